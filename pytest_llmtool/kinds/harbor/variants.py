"""ot-harness's agent variants of a Harbor task (`--llm-harbor-variants`, read by
`inputs/harbor_variants.py`): each variant is an item label (`task[model-variant]`) and is
applied to the trial, or the item is skipped saying why, never run as the base in disguise.

A skills variant copies its folder's skills into the container where Harbor injects skills
(`[environment].skills_dir`, which must be absolute, else `/runtime/skills`) and names them
to the agent after its instruction, as Harbor's terminus-2 does (`<available_skills>`).
An mcp variant needs an agent that can be handed the server inside a container: none can
yet, so its items skip (`MCP_AGENTS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from xml.etree.ElementTree import Element, SubElement, indent, tostring

import yaml

from pytest_llmtool.inputs.harbor_variants import HarborVariant
from pytest_llmtool.sandbox import SandboxError

if TYPE_CHECKING:
    from pytest_llmtool.kinds.harbor.task import HarborTask
    from pytest_llmtool.sandbox.container.engine import Container

# Harbor's default for injected skills (`agent_env_paths.default_skills_dir`).
DEFAULT_SKILLS_DIR = "/runtime/skills"
# Agents that read an instruction (and so can be told of the skills).
INSTRUCTED_AGENTS = frozenset({"builtin", "claude-code", "codex", "opencode", "gemini-cli"})
# Agents the trial hands an mcp variant's server to: none yet (its items skip).
MCP_AGENTS: frozenset[str] = frozenset()


def variant_labels(variants: Sequence[HarborVariant]) -> list[tuple[str, HarborVariant | None]]:
    """`Kind.labels` for a Harbor task: one plain item without variants, else one per
    variant, its id the label (`task[model-id]`)."""
    if not variants:
        return [("", None)]
    return [(v.id, v) for v in variants]


def variant_skip_reason(variant: HarborVariant | None, agent: str) -> str | None:
    """Why `agent` cannot run `variant` (a skip, said before running); None when it can."""
    if variant is None or variant.kind == "base":
        return None
    if variant.kind == "skills" and agent not in INSTRUCTED_AGENTS:
        return (
            f"variant {variant.id}: {agent} reads no instruction, so a skills folder would "
            "change nothing (it would be a base run)"
        )
    if variant.kind == "mcp" and agent not in MCP_AGENTS:
        return (
            f"variant {variant.id}: an MCP server cannot be handed to {agent} in a Harbor "
            "container yet (it would be a base run)"
        )
    return None


def skills_target(task: HarborTask) -> str:
    """Where a task's container receives injected skills; a relative `skills_dir` is an
    error, as in Harbor (`Trial._resolve_effective_skills_dir`)."""
    own = task.config.environment.skills_dir
    if own is None:
        return DEFAULT_SKILLS_DIR
    if not PurePosixPath(own).is_absolute():
        raise SandboxError(
            f"{task.path / 'task.toml'}: [environment].skills_dir must be absolute for "
            f"injected skills, got {own!r} (or leave it out: {DEFAULT_SKILLS_DIR})"
        )
    return own


def _skills(variant: HarborVariant | None) -> list[Path]:
    if variant is None or variant.kind != "skills" or variant.skills_dir is None:
        return []
    return sorted(p for p in variant.skills_dir.iterdir() if (p / "SKILL.md").is_file())


async def install_variant(
    variant: HarborVariant | None, container: Container, task: HarborTask
) -> None:
    """Put a skills variant's skills into the trial's container, before the agent runs
    (nothing for the others)."""
    skills = _skills(variant)
    if skills:
        target = skills_target(task)
        await container.put({p.name: p for p in skills}, target)
        await container.exec(f"chmod -R a+rX '{target}'", user="0")


def variant_note(variant: HarborVariant | None, task: HarborTask) -> str:
    """What follows the instruction under a skills variant: where the skills are, and each
    one's name, description and SKILL.md (Harbor's `<available_skills>`); "" otherwise."""
    skills = _skills(variant)
    if not skills:
        return ""
    target = skills_target(task)
    root = Element("available_skills")
    for folder in skills:
        skill = SubElement(root, "skill")
        SubElement(skill, "name").text = folder.name
        SubElement(skill, "description").text = _description(folder / "SKILL.md")
        SubElement(skill, "location").text = f"{target}/{folder.name}/SKILL.md"
    indent(root, space="  ")
    return (
        f"\n\nSkills are available under {target}: read a skill's SKILL.md before using it.\n"
        + tostring(root, encoding="unicode")
    )


def _description(path: Path) -> str:
    """A SKILL.md's `description`, from its Agent Skills front matter ("" when none)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    head = text.split("---", 2)[1] if text.startswith("---") and text.count("---") >= 2 else ""
    try:
        data = yaml.safe_load(head) if head else None
    except yaml.YAMLError:
        data = None
    return str(data.get("description", "")) if isinstance(data, dict) else ""
