"""Harbor tasks loaded and checked (`kinds/harbor/load.py`) and the verifier's rewards read as
Harbor reads them (`kinds/harbor/reward.py`): pure functions over files, no container."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmtool.kinds import Problem
from pytest_llmtool.kinds.harbor.load import (
    TaskIds,
    dataset_problems,
    harbor_digest,
    load,
    load_task,
    recognition,
    registry_problems,
)
from pytest_llmtool.kinds.harbor.reward import (
    below_min_reward,
    metadata_problems,
    min_reward_failure,
    read_rewards,
    roll_up,
    task_decision,
)
from pytest_llmtool.kinds.harbor.task import HarborTask

TOML = """\
[metadata]
difficulty = "easy"

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 30.0

[environment]
docker_image = "local/debian:bookworm"
"""


def make_task(
    root: Path,
    name: str = "hello",
    toml: str = TOML,
    instruction: str | None = "Write hello to /app/out.txt\n",
    test: str | None = "echo 1 > /logs/verifier/reward.txt\n",
) -> Path:
    """A task directory `root/name` with its task.toml, instruction and tests/test.sh."""
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "task.toml").write_text(toml)
    if instruction is not None:
        (folder / "instruction.md").write_text(instruction)
    if test is not None:
        (folder / "tests" / "test.sh").write_text(test)
    return folder / "task.toml"


def problem(found: HarborTask | Problem) -> Problem:
    assert isinstance(found, Problem), found
    return found


def test_a_task_loads_with_its_instruction_category_and_id(tmp_path: Path) -> None:
    path = make_task(
        tmp_path, instruction="<!-- canary GUID 123 -->\n\nWrite hello to /app/out.txt\n"
    )
    task = load_task(path)
    assert isinstance(task, HarborTask)
    assert task.instruction == "Write hello to /app/out.txt\n"
    assert task.name == task.task_id == "hello"
    assert task.category == tmp_path.name  # no [metadata].category, no dataset: the parent
    assert task.config.agent.timeout_sec == 30.0
    assert task.path == path.parent.resolve()


def test_a_docker_image_not_present_is_no_load_problem(tmp_path: Path) -> None:
    toml = TOML.replace("local/debian:bookworm", "nowhere/never:0")
    assert isinstance(load_task(make_task(tmp_path, toml=toml)), HarborTask)


def test_recognition_takes_task_files_beside_a_task_and_nothing_else(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    assert recognition(path) is not None and recognition(path).taken  # type: ignore[union-attr]
    lone = tmp_path / "project" / "task.toml"
    lone.parent.mkdir()
    lone.write_text('[tool]\nname = "x"\n')
    found = recognition(lone)
    assert found is not None and not found.taken and "not a Harbor task" in found.why
    assert recognition(tmp_path / "pyproject.toml") is None


@pytest.mark.parametrize(
    ("toml", "line", "said"),
    [
        # `[environment]` as an array of tables: pydantic names the key.
        (
            'schema_version = "1.4"\n[[environment]]\ncpus = 1\n',
            2,
            "task.toml: [environment]: Input should be a valid dictionary",
        ),
        (TOML.replace("[environment]", "[environment]\ncpus = 'many'"), 10, "[environment].cpus:"),
        ("a = 1\nb = \n", 2, "task.toml is not valid TOML: "),
        (
            TOML + "[[steps]]\nname = 'one'\n[[steps]]\nname = 'One'\n",
            14,
            "[[steps]]: step 'One' is named twice",
        ),
        (TOML + '[metadata2]\n[environment.x]\nos = "windows"\n', None, None),
    ],
)
def test_bad_task_toml_names_the_key_and_line(
    tmp_path: Path, toml: str, line: int | None, said: str | None
) -> None:
    found = load_task(make_task(tmp_path, toml=toml))
    if said is None:  # an unknown table is ignored, as Harbor ignores it
        assert isinstance(found, HarborTask)
        return
    p = problem(found)
    assert p.message.startswith(said) or said in p.message, p.message
    assert p.lineno == line


def test_task_toml_that_is_a_directory_binary_or_huge(tmp_path: Path) -> None:
    folder = tmp_path / "dir"
    (folder / "task.toml").mkdir(parents=True)
    assert problem(load_task(folder / "task.toml")).message == "task.toml is a directory"
    binary = make_task(tmp_path, "binary")
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe")
    assert "not UTF-8" in problem(load_task(binary)).message
    nul = make_task(tmp_path, "nul")
    nul.write_bytes(b"a = 1\n\x00\x00")
    assert "NUL" in problem(load_task(nul)).message
    huge = make_task(tmp_path, "huge")
    with huge.open("r+b") as stream:
        stream.truncate(50 << 20)  # sparse: 50 MB never read
    said = problem(load_task(huge)).message
    assert said == f"task.toml is {50 << 20} bytes, larger than the {4 << 20}-byte limit"


def test_missing_parts_are_problems(tmp_path: Path) -> None:
    said = problem(load_task(make_task(tmp_path, "a", instruction=None))).message
    assert said == "instruction.md is missing: it is what the agent is asked"
    said = problem(load_task(make_task(tmp_path, "b", test=None))).message
    assert said == "tests/test.sh is missing: the verifier runs it to write the reward"
    bat = make_task(tmp_path, "c", test=None)
    (bat.parent / "tests" / "test.bat").write_text("echo 1\n")
    assert "has test.bat but no test.sh" in problem(load_task(bat)).message
    no_env = make_task(tmp_path, "d", toml="[metadata]\n")
    assert "no environment/Dockerfile and no [environment].docker_image" in (
        problem(load_task(no_env)).message
    )
    windows = make_task(tmp_path, "e", toml=TOML + 'os = "windows"\n')
    assert problem(load_task(windows)).message.startswith('[environment].os = "windows"')


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ('network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "an allowlisted network"),
        ("gpus = 1\n", "GPUs"),
        ('mcp_servers = [{name = "x", url = "http://x/mcp"}]\n', "MCP servers for the agent"),
        ('[verifier.environment]\ndocker_image = "v"\n', "a separate verifier environment"),
        ('[[verifier.collect]]\ncommand = "cp /app/x /logs"\n', "collect commands"),
        ('[agent]\nnetwork_mode = "no-network"\n', "a network of the agent phase's own"),
    ],
)
def test_what_harbor_would_run_otherwise_is_refused(tmp_path: Path, extra: str, said: str) -> None:
    """A task asking for what the plugin does not run is an error naming it, never a trial
    that quietly differs from Harbor's."""
    toml = TOML.replace("[verifier]\ntimeout_sec = 60.0\n\n", "").replace(
        "[agent]\ntimeout_sec = 30.0\n\n", ""
    )
    message = problem(load_task(make_task(tmp_path, toml=toml + extra))).message
    assert said in message
    assert "which this plugin does not run" in message


def test_a_compose_file_beside_a_dockerfile_is_refused(tmp_path: Path) -> None:
    path = make_task(tmp_path, toml="[metadata]\n")
    (path.parent / "environment").mkdir()
    (path.parent / "environment" / "Dockerfile").write_text("FROM local/debian:bookworm\n")
    (path.parent / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    assert "environment/docker-compose.yaml" in problem(load_task(path)).message


def test_a_dockerfile_environment_loads(tmp_path: Path) -> None:
    path = make_task(tmp_path, toml="[metadata]\ncategory = 'files'\n")
    (path.parent / "environment").mkdir()
    (path.parent / "environment" / "Dockerfile").write_text("FROM local/debian:bookworm\n")
    task = load_task(path)
    assert isinstance(task, HarborTask)
    assert task.category == "files"
    assert task.environment_dir == path.parent.resolve() / "environment"


def test_multi_step_tasks_need_each_step_and_a_test_script(tmp_path: Path) -> None:
    toml = TOML + "[[steps]]\nname = 'first'\nmin_reward = 1.0\n[[steps]]\nname = 'second'\n"
    path = make_task(tmp_path, toml=toml, instruction=None, test=None)
    (path.parent / "tests" / "check.sh").write_text("true\n")
    for step in ("first", "second"):
        (path.parent / "steps" / step / "tests").mkdir(parents=True)
        (path.parent / "steps" / step / "instruction.md").write_text(f"do {step}\n")
    (path.parent / "steps" / "first" / "tests" / "test.sh").write_text("true\n")
    # The second step has no test.sh, nor the task a shared one.
    said = problem(load_task(path)).message
    assert said == "step 'second' has no steps/second/tests/test.sh and the task no tests/test.sh"
    (path.parent / "steps" / "second" / "tests" / "test.sh").write_text("true\n")
    task = load_task(path)
    assert isinstance(task, HarborTask)
    assert [s.name for s in task.steps] == ["first", "second"]
    assert task.steps[1].instruction == "do second\n" and task.instruction == ""
    (path.parent / "steps" / "second" / "instruction.md").unlink()
    assert "steps/second/instruction.md is missing" in problem(load_task(path)).message


def test_a_test_script_linked_out_of_the_task_is_refused(tmp_path: Path) -> None:
    """tests/ is copied into the container: a link to /etc/passwd would copy the host's
    file there. A link leading out is a problem; one inside the task is followed."""
    path = make_task(tmp_path, test=None)
    (path.parent / "tests" / "test.sh").symlink_to("/etc/passwd")
    said = problem(load_task(path)).message
    assert said.startswith("tests/test.sh is a symbolic link leading out of the task")
    (path.parent / "tests" / "test.sh").unlink()
    (path.parent / "tests" / "real.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (path.parent / "tests" / "test.sh").symlink_to("real.sh")
    assert isinstance(load_task(path), HarborTask)
    (path.parent / "tests" / "loop").symlink_to("..")
    assert "a link to a directory above it" in problem(load_task(path)).message


def test_an_instruction_or_solution_linked_out_or_a_fifo_is_refused(tmp_path: Path) -> None:
    path = make_task(tmp_path, instruction=None)
    (path.parent / "instruction.md").symlink_to("/etc/hostname")
    assert "instruction.md is a symbolic link leading out" in problem(load_task(path)).message
    (path.parent / "instruction.md").unlink()
    (path.parent / "instruction.md").write_text("go\n")
    (path.parent / "solution").mkdir()
    os.mkfifo(path.parent / "solution" / "pipe")
    assert problem(load_task(path)).message == (
        "solution/pipe is a FIFO; a task holds only files and directories"
    )


def test_task_ids_are_unique_in_the_run(tmp_path: Path) -> None:
    named = TOML.replace("[metadata]", '[task]\nname = "org/same"\n\n[metadata]')
    ids = TaskIds()
    first = load_task(make_task(tmp_path / "a", toml=named), ids)
    second = load_task(make_task(tmp_path / "b", toml=named), ids)
    assert isinstance(first, HarborTask) and isinstance(second, HarborTask)
    assert first.task_id == "org/same"
    assert second.task_id.startswith("org/same@") and second.task_id.endswith("b/hello")
    # The same task loaded again (another worker's collection) keeps its id.
    again = load_task(tmp_path / "a" / "hello" / "task.toml", ids)
    assert isinstance(again, HarborTask) and again.task_id == "org/same"


def _dataset(root: Path, tasks: list[str], name: str = "org/mini") -> Path:
    entries = "".join(f'\n[[tasks]]\nname = "{t}"\ndigest = "sha256:{"a" * 64}"\n' for t in tasks)
    path = root / "dataset.toml"
    path.write_text(f'schema_version = "1.0"\n\n[dataset]\nname = "{name}"\n{entries}')
    return path


def test_a_dataset_naming_a_task_twice_or_a_missing_one(tmp_path: Path) -> None:
    make_task(tmp_path, "hello")
    path = _dataset(tmp_path, ["org/hello", "org/hello", "org/elsewhere"])
    assert recognition(path).taken  # type: ignore[union-attr]
    found = dataset_problems(path)
    assert [(p.lineno, p.message.split(":")[0]) for p in found] == [
        (6, "task 'org/hello'"),  # its digest is not the one pinned (made up here)
        (10, "[[tasks]]"),
        (14, "task 'org/elsewhere' is not here"),
    ]
    assert "named twice (first at line 6): it runs once" in found[1].message
    # The dataset file yields its problems only: the task is collected by its task.toml.
    assert all(isinstance(p, Problem) for _, p in load(path))
    task = load_task(tmp_path / "hello" / "task.toml")
    assert isinstance(task, HarborTask)
    assert (task.dataset, task.category) == ("org/mini", "org/mini")


def test_a_dataset_entry_with_a_bad_digest(tmp_path: Path) -> None:
    path = tmp_path / "dataset.toml"
    path.write_text('[dataset]\nname = "o/d"\n[[tasks]]\nname = "o/t"\ndigest = "md5:1"\n')
    assert dataset_problems(path)[0].message.startswith("[[tasks]] 'o/t': digest must be")


def test_a_local_registry(tmp_path: Path) -> None:
    make_task(tmp_path, "one")
    registry = [
        {
            "name": "mini",
            "version": "1.0",
            "tasks": [
                {"name": "one", "path": "one"},
                {"name": "out", "path": "../elsewhere"},
                {"name": "remote", "git_url": "https://example.com/x.git", "path": "t"},
            ],
        }
    ]
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(registry, indent=1))
    assert recognition(path).taken  # type: ignore[union-attr]
    said = [p.message for p in registry_problems(path)]
    assert said == [
        "dataset 'mini', task 'out': path '../elsewhere' leads out of " + str(tmp_path),
        "dataset 'mini', task 'remote': not local (no path, or fetched from git_url)",
    ]
    task = load_task(tmp_path / "one" / "task.toml")
    assert isinstance(task, HarborTask) and task.category == "mini"


# --- rewards -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b'{"reward": NaN}', "VerifierOutputParseError: non-finite reward 'reward': nan"),
        (b'{"reward": 1e999}', "VerifierOutputParseError: non-finite reward 'reward': inf"),
        (b"[1]", "VerifierOutputParseError: reward.json holds a list, not an object"),
        (b"1e999", "VerifierOutputParseError: reward.json holds a float, not an object"),
        (b"", "RewardFileEmptyError: reward.json is empty"),
        (b"{", "VerifierOutputParseError: reward.json is not JSON"),
        (b'{"reward": 1', "VerifierOutputParseError: reward.json is not JSON"),
        (b"\xff\xfe{}", "VerifierOutputParseError: reward.json is not JSON"),
    ],
)
def test_bad_reward_json_is_a_graded_failure(raw: bytes, error: str) -> None:
    found = read_rewards(raw, b"1")  # reward.json wins even when broken, as in Harbor
    assert found.rewards is None and found.source == "reward.json"
    assert found.error is not None and found.error.startswith(error), found.error


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"1\n2", "VerifierOutputParseError: reward.txt is not one number: '1\\n2'"),
        (b"", "RewardFileEmptyError: reward.txt is empty"),
        (b"nan\n", "VerifierOutputParseError: non-finite reward in reward.txt"),
        (b"one", "VerifierOutputParseError: reward.txt is not one number"),
    ],
)
def test_bad_reward_txt_is_a_graded_failure(raw: bytes, error: str) -> None:
    found = read_rewards(None, raw)
    assert found.rewards is None and found.error is not None
    assert found.error.startswith(error), found.error
    assert found.error_type == error.partition(":")[0]


def test_rewards_as_harbor_reads_them() -> None:
    assert read_rewards(None, b" 0.5\n").rewards == {"reward": 0.5}
    both = read_rewards(b'{"reward": 1, "style": 0.25}', b"0")
    assert (both.rewards, both.source) == ({"reward": 1.0, "style": 0.25}, "reward.json")
    missing = read_rewards(None, None)
    assert missing.error_type == "RewardFileNotFoundError" and missing.source is None


def test_a_string_reward_is_kept_as_a_detail_not_a_number() -> None:
    found = read_rewards(b'{"reward": "1"}', None)
    assert (found.rewards, found.details, found.error) == ({}, {"reward": "1"}, None)


def test_formulacode_reward_json_keeps_numbers_booleans_and_details() -> None:
    raw = json.dumps(
        {
            "agent_advantage": 0.12,
            "agent_advantage_level1": -0.5,
            "num_valid_benchmarks": 3,
            "tests_passed": True,
            "snapshots_passed": False,
            "lsv_error": None,
            "per_benchmark_speedups": {"a.b": 1.2},
            "tamper_precheck": {"files": [], "rule": None},
        }
    ).encode()
    found = read_rewards(raw, b"1.2")
    assert found.rewards == {
        "agent_advantage": 0.12,
        "agent_advantage_level1": -0.5,
        "num_valid_benchmarks": 3.0,
        "tests_passed": 1.0,
        "snapshots_passed": 0.0,
    }
    assert found.details == {
        "lsv_error": None,
        "per_benchmark_speedups": {"a.b": 1.2},
        "tamper_precheck": {"files": [], "rule": None},
    }


def test_multi_step_roll_up_and_min_reward() -> None:
    steps = [{"reward": 1.0, "style": 0.5}, None, {"reward": 0.0}]
    assert roll_up("mean", steps) == {"reward": 0.5, "style": 0.25}
    assert roll_up(None, steps) == roll_up("mean", steps)
    assert roll_up("final", steps) == {"reward": 0.0}
    assert roll_up("final", [{"reward": 1.0}, None]) is None
    assert roll_up("mean", [None, None]) is None and roll_up("mean", []) is None
    assert not below_min_reward({"reward": 1.0}, 1.0)
    assert below_min_reward({"style": 1.0}, 0.5)  # a missing key is -inf
    assert below_min_reward(None, {"style": 0.0})
    assert min_reward_failure({"reward": 0.25}, {"reward": 0.5}) == (
        "reward=0.25 below min_reward 0.5"
    )
    assert not below_min_reward({"reward": 0.0}, None)


def test_the_decision_comes_from_the_task_then_the_option() -> None:
    assert task_decision({}) == ("reward", 1.0)
    assert task_decision({}, 0.5) == ("reward", 0.5)
    own = {"llmtool_threshold": 0.2, "llmtool_reward_key": "agent_advantage"}
    assert task_decision(own, 0.5) == ("agent_advantage", 0.2)
    assert metadata_problems(own) == []
    bad = metadata_problems({"llmtool_threshold": math.inf, "llmtool_reward_key": ""})
    assert len(bad) == 2 and bad[1].startswith("[metadata].llmtool_threshold")


def test_metadata_decision_keys_are_checked_at_load(tmp_path: Path) -> None:
    toml = TOML.replace('difficulty = "easy"', 'llmtool_threshold = "high"')
    said = problem(load_task(make_task(tmp_path, toml=toml)))
    assert said.message == (
        "task.toml: [metadata].llmtool_threshold: expected a finite number, got 'high'"
    )
    assert said.lineno == 1


@pytest.mark.parametrize("value", ["nan", "abc", "inf"])
def test_a_bad_reward_threshold_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = pytester.runpytest(f"--llm-reward-threshold={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --llm-reward-threshold: expected a number, got '{value}'"]
    )


HARBOR_DIR = Path(
    os.environ.get("LLMTOOL_HARBOR_DIR", Path.home() / ".cache/pytest-llmtool/harbor-0.25.0")
)
_PACKAGER = r"""
import sys, types, typing, typing_extensions
from pathlib import Path
typing.TypedDict = typing_extensions.TypedDict
typing.override = typing_extensions.override
class Stand(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})
for name in ("toml", "shortuuid"):
    sys.modules.setdefault(name, Stand(name))
sys.path.append(sys.argv[1])
from harbor.publisher.packager import Packager
print("sha256:" + Packager.compute_content_hash(Path(sys.argv[2]))[0])
"""


def test_digests_are_harbors(tmp_path: Path) -> None:
    """The digest a dataset pins, computed as Harbor's own packager computes it (its wheel
    unpacked as tests/test_harbor_summary.py says; skipped where it is not)."""
    if not (HARBOR_DIR / "harbor" / "publisher" / "packager.py").is_file():
        why = f"Harbor's wheel is not unpacked in {HARBOR_DIR} (.ci/run does it)"
        if os.environ.get("LLMTOOL_REQUIRE_AGENT_CLIS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    task = make_task(tmp_path, "hello").parent
    (task / "environment" / "sub").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM local/debian:bookworm\n")
    (task / "environment" / "sub" / "data.txt").write_bytes(b"\x00\x01")
    (task / "tests" / "__pycache__").mkdir()
    (task / "tests" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"x")
    (task / "tests" / "notes.txt~").write_text("backup")
    (task / "tests" / "link.sh").symlink_to("test.sh")
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("echo hello > /app/out.txt\n")
    (task / "README.md").write_text("# hello\n")
    (task / "unrelated.txt").write_text("not packaged\n")
    harbor = subprocess.run(
        [sys.executable, "-c", _PACKAGER, str(HARBOR_DIR), str(task)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert harbor.returncode == 0, harbor.stderr[-2000:]
    assert harbor_digest(task.resolve()) == harbor.stdout.strip()


def test_a_local_task_that_is_not_the_one_pinned(tmp_path: Path) -> None:
    task = make_task(tmp_path, "hello").parent
    path = _dataset(tmp_path, ["org/hello"])
    said = dataset_problems(path)
    assert len(said) == 1 and said[0].lineno == 6
    assert said[0].message.startswith("task 'org/hello': the local task ")
    assert f"its digest is {harbor_digest(task.resolve())}, the dataset's sha256:aaaa" in (
        said[0].message
    )
    path.write_text(path.read_text().replace(f"sha256:{'a' * 64}", harbor_digest(task) or ""))
    assert dataset_problems(path) == []


def test_a_harbor_jobs_path_that_is_a_file_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass\n")
    (pytester.path / "old.json").write_text("{}\n")
    result = pytester.runpytest("--llm-harbor-jobs=old.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --llm-harbor-jobs: {pytester.path}/old.json exists and is not a directory"]
    )
