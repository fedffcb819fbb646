"""Images: built (or found) once per run, shared by the items that use them.

An image built from a directory is tagged by a digest of its build context
(`llmtool/<name>:<digest>`), so a second process of the run (an xdist worker) or a later run
finds it by tag and builds nothing; a lock file under the run's shared directory makes
concurrent workers wait for one build instead of racing. Builds run with `--rm --force-rm`:
a failed step leaves no container behind. A failed build is `BuildFailed`, with the log's tail.
Nothing is pulled: an image to start, and each image a Dockerfile builds `FROM`, must be
present already (the engine would otherwise pull an absent `FROM` image during the build).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_llmtool.sandbox.container import BuildFailed
from pytest_llmtool.sandbox.container.engine import Engine

BUILD_LOG_TAIL = 30


@dataclass(frozen=True)
class ImageRef:
    """An image ready to start: the reference to start it by and its id (`sha256:...`)."""

    ref: str
    image_id: str
    built: bool  # built by this process (False: found already present)


def context_digest(context: Path, dockerfile: str = "Dockerfile") -> str:
    """A digest of a build context's files (names, modes and bytes), in a stable order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(context).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + str(path.readlink()).encode())
        else:
            digest.update(oct(path.stat().st_mode & 0o777).encode() + path.read_bytes())
        digest.update(b"\0")
    digest.update(dockerfile.encode())
    return digest.hexdigest()[:16]


def tag_for(name: str, context: Path) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "task"
    return f"llmtool/{slug[:100]}:{context_digest(context)}"


async def image_id(engine: Engine, ref: str) -> str | None:
    code, out, _ = await engine.call("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return out.decode().strip() if code == 0 else None


_locks: dict[str, asyncio.Lock] = {}


async def ensure_image(
    engine: Engine,
    *,
    context: Path | None = None,
    image: str | None = None,
    name: str = "task",
    timeout: float = 600.0,
    lock_dir: Path | None = None,
    network: str | None = None,
) -> ImageRef:
    """The image to start: `image` as given (it must be present: nothing is pulled), or
    the one built from `context` (its `Dockerfile`), built only when its tag is absent;
    its RUN steps on `network` (`none` for a build that needs nothing from outside), else
    on the engine's default."""
    if context is None:
        if image is None:
            raise BuildFailed("neither a build context nor an image was given")
        found = await image_id(engine, image)
        if found is None:
            raise BuildFailed(
                f"image {image} is not present on {engine.endpoint()} and is not pulled "
                "(build it, or load it with `docker load`, before the run)"
            )
        return ImageRef(image, found, built=False)
    tag = tag_for(name, context)
    lock = _locks.setdefault(tag, asyncio.Lock())
    async with lock:
        found = await image_id(engine, tag)
        if found is not None:
            return ImageRef(tag, found, built=False)
        with _file_lock(lock_dir, tag):
            found = await image_id(engine, tag)
            if found is not None:
                return ImageRef(tag, found, built=False)
            await _build(engine, context, tag, timeout, network)
        found = await image_id(engine, tag)
        if found is None:
            raise BuildFailed(f"{engine.name} built {tag} but cannot find it")
        return ImageRef(tag, found, built=True)


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile builds `FROM`: not `scratch`, not an earlier stage, and not
    one named by a build argument (which only the build resolves)."""
    stages: set[str] = set()
    bases: list[str] = []
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
        image = args[0]
        if image != "scratch" and "$" not in image and image.lower() not in stages:
            bases.append(image)
    return bases


async def _build(
    engine: Engine, context: Path, tag: str, timeout: float, network: str | None
) -> None:
    dockerfile = context / "Dockerfile"
    try:
        bases = base_images(dockerfile.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise BuildFailed(f"cannot read {dockerfile}: {exc}") from exc
    for base in bases:
        if await image_id(engine, base) is None:
            raise BuildFailed(
                f"{dockerfile} builds FROM {base}, which is not present on "
                f"{engine.endpoint()} and is not pulled (build or `docker load` it first)"
            )
    try:
        code, out, err = await engine.call(
            "build",
            "--rm",
            "--force-rm",
            *(["--network", network] if network else []),
            "-t",
            tag,
            str(context),
            timeout=timeout,
            check=False,
        )
    except TimeoutError:
        raise BuildFailed(f"building {context} took longer than {timeout:g} s") from None
    if code != 0:
        log = (out + err).decode(errors="replace").strip().splitlines()
        tail = "\n".join(log[-BUILD_LOG_TAIL:])
        raise BuildFailed(f"building the image of {context} failed (exit {code}):\n{tail}")


class _file_lock:
    """An exclusive `flock` on `<lock_dir>/<tag>.lock` while building (none without a
    directory). Blocking: a worker waits while another builds, as it would for the image."""

    def __init__(self, lock_dir: Path | None, tag: str) -> None:
        self._path = (
            lock_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".lock") if lock_dir else None
        )
        self._fd: int | None = None

    def __enter__(self) -> None:
        if self._path is None:
            return
        import fcntl
        import os

        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self._path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            import os

            os.close(self._fd)
