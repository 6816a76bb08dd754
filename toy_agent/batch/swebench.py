"""SWE-bench in and out: instances as batch tasks, graded the way the official harness grades
(the test files reset, `test_patch` applied over the agent's work, exactly FAIL_TO_PASS and
PASS_TO_PASS run, each test's status read), and the predictions file its harness reads.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from toy_agent.batch.tasks import BatchError, Instance, Task, task_from_dict
from toy_agent.batch.workcopy import CLONE_TIMEOUT, Copy, GitError, _git
from toy_agent.record import jsonl_lines

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "test_patch",
            "FAIL_TO_PASS", "PASS_TO_PASS")  # fmt: skip
# Fields that become the task; every other field is kept in the record's "metadata".
USED = (*REQUIRED, "patch", "hints_text")
DEFAULT_TEST_COMMAND = "python -m pytest -rA"
EVAL_FOLDER = ".toy-agent-eval"  # in the copy while the tests run, removed after
PASSING = ("PASSED", "XFAIL")  # the harness's test_passed
# New files the agent made that are left out of model_patch by default (scratch work and
# tests of its own); the files test_patch touches are always left out (the harness resets them).
SCRATCH_GLOBS = ("reproduce*", "repro_*", "scratch*", "debug_*", "test_*.py", "*_test.py",
                 "*.orig", "*.rej")  # fmt: skip
BUILD_GLOBS = ("*.pyc", "__pycache__/*", "*/__pycache__/*")  # by path, new or not


@dataclass(frozen=True)
class SweOptions:
    """How SWE-bench instances become tasks: where each `owner/name` repository is
    (`repo_map`: a folder or a git URL; `repo_cache`: one clone per repository, shared by all
    tasks, from GitHub unless `repo_map` gives a URL), which instances (`filter`, a regex on
    the id; `slice`, Python's A:B over what the filter kept), the hints, the test command."""

    repo_map: Mapping[str, str] = field(default_factory=dict)
    repo_cache: Path | None = None
    hints: bool = False
    filter: str | None = None
    slice: tuple[int | None, int | None] | None = None
    test_command: str = DEFAULT_TEST_COMMAND


def parse_slice(text: str) -> tuple[int | None, int | None]:
    """`A:B`, `A:` or `:B` (Python's slice, negative numbers counting from the end)."""
    match = re.fullmatch(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*", text)
    if not match:
        raise ValueError(f"--slice {text!r}: expected A:B, A: or :B (whole numbers)")
    start, stop = match.groups()
    return (int(start) if start else None, int(stop) if stop else None)


def is_instance(data: Any) -> bool:
    return isinstance(data, dict) and "instance_id" in data


def read_entries(path: Path) -> list[tuple[int, Any]]:
    """The file's objects with their line (JSONL) or position (a JSON array, parquet)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as parquet
        except ImportError:
            raise BatchError(
                f"--tasks-file {path}: reading parquet needs pyarrow "
                "(pip install pyarrow), or use the dataset's JSON"
            ) from None
        rows = parquet.read_table(path).to_pylist()
        return list(enumerate(rows, 1))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise BatchError(f"cannot read --tasks-file {path}: {reason}") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BatchError(f"{path}: not valid JSON ({exc})") from None
        return list(enumerate(data, 1))
    entries = []
    for number, line in enumerate(jsonl_lines(text), 1):
        if line.strip():
            try:
                entries.append((number, json.loads(line)))
            except ValueError as exc:
                raise BatchError(f"{path} line {number}: not valid JSON ({exc})") from None
            except RecursionError:
                raise BatchError(f"{path} line {number}: not valid JSON (nested too deeply)"
                                 ) from None  # fmt: skip
    return entries


def instance_task(data: dict[str, Any], options: SweOptions, *, base: Path, where: str) -> Task:
    """One SWE-bench instance as a task: the problem statement (and hints, when asked) at
    base_commit of its repository, graded by its tests."""
    for key in REQUIRED:
        if key not in data:
            raise BatchError(f"{where}: SWE-bench instance without {key!r}")
    tests = {
        key: _test_list(data[key], f"{where}: {key}") for key in ("FAIL_TO_PASS", "PASS_TO_PASS")
    }
    if not tests["FAIL_TO_PASS"]:
        raise BatchError(f"{where}: FAIL_TO_PASS is empty: nothing would say the task is solved")
    text = str(data["problem_statement"])
    if options.hints and str(data.get("hints_text") or "").strip():
        text += "\n\nHints:\n" + str(data["hints_text"])
    task = task_from_dict(
        {"id": data["instance_id"], "repo": repository(str(data["repo"]), options, where),
         "task": text, "rev": data["base_commit"]}, base=base, where=where,
    )  # fmt: skip
    metadata = {k: v for k, v in data.items() if k not in USED}
    instance = Instance(str(data["test_patch"]), tests["FAIL_TO_PASS"], tests["PASS_TO_PASS"],
                        data.get("patch"), metadata, options.test_command)  # fmt: skip
    return Task(task.id, task.repo, task.task, task.rev, instance=instance)


def _test_list(value: Any, where: str) -> tuple[str, ...]:
    """A list of test ids, or the dataset's JSON string of one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise BatchError(f"{where} is neither a list nor a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise BatchError(f"{where} must be a list of test ids")
    return tuple(value)


_clone_lock = threading.Lock()


def repository(name: str, options: SweOptions, where: str) -> str:
    """Where `owner/name` is: --repo-map's folder, or a clone in --repo-cache (made once)."""
    mapped = options.repo_map.get(name)
    if mapped is not None and (options.repo_cache is None or Path(mapped).expanduser().is_dir()):
        return mapped
    if options.repo_cache is None:
        raise BatchError(f"{where}: repository {name}: give --repo-map {name}=PATH (a clone) "
                         "or --repo-cache DIR (cloned there once)")  # fmt: skip
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        raise BatchError(f"{where}: repo {name!r} is not owner/name")
    folder = options.repo_cache / name.replace("/", "__")
    with _clone_lock:
        if not (folder / ".git").exists():
            url = mapped or f"https://github.com/{name}.git"
            options.repo_cache.mkdir(parents=True, exist_ok=True)
            try:
                _git("clone", "--quiet", "--", url, str(folder), timeout=CLONE_TIMEOUT)
            except GitError as exc:
                raise BatchError(f"{where}: cannot clone {name} into --repo-cache: {exc}"
                                 ) from None  # fmt: skip
    return str(folder)


def pick(tasks: Sequence[Task], pattern: str | None, part: tuple[int | None, int | None] | None
         ) -> list[Task]:  # fmt: skip
    """--filter REGEX (searched in the id), then --slice A:B of what is left."""
    picked = [t for t in tasks if pattern is None or re.search(pattern, t.id)]
    return picked[slice(*part)] if part else picked


# ------------------------------------------------------------------------------- grading
@dataclass(frozen=True)
class Grade:
    """One evaluation: each test's status and the whole log."""

    check: dict[str, Any]  # the record's check, with "tests"
    log: str


def patch_files(patch: str) -> list[tuple[str, bool]]:
    """The files a patch touches, each with whether the patch creates it."""
    files: list[tuple[str, bool]] = []
    old: str | None = None
    for line in patch.split("\n"):  # a patch's lines end at "\n" only, as git's do
        if line.startswith("--- "):
            old = line[4:].split("\t")[0].strip()
        elif line.startswith("+++ ") and old is not None:
            new = line[4:].split("\t")[0].strip()
            path = new[2:] if new.startswith("b/") else old[2:]
            if new == "/dev/null":
                path = old[2:]
            files.append((path, old == "/dev/null"))
            old = None
    return files


def reset_files(copy: Copy, files: Iterable[tuple[str, bool]]) -> None:
    """The harness's `git checkout BASE -- FILES`, without writing the source's index: each
    file back as it is at the base, a file the patch creates removed."""
    for path, created in files:
        target = copy.path / path
        if created:
            target.unlink(missing_ok=True)
            continue
        try:
            content = _git("show", f"{copy.base}:{path}", cwd=copy.path, env=copy.git_env)
        except GitError:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def apply_patch(copy: Copy, patch: str, scratch: Path) -> str | None:
    """Apply `patch` to the copy's files as the harness does (`git apply`, else `patch
    --fuzz=5`); None when it applied, else why not."""
    scratch.mkdir(parents=True, exist_ok=True)
    file = scratch / "apply.patch"
    file.write_text(patch if patch.endswith("\n") else patch + "\n", encoding="utf-8")
    try:
        _git("apply", "--whitespace=nowarn", str(file), cwd=copy.path, env=copy.git_env)
        return None
    except GitError as exc:
        reason = str(exc)
    try:
        done = subprocess.run(["patch", "--batch", "--fuzz=5", "-p1", "-i", str(file)],
                              cwd=copy.path, capture_output=True, timeout=300)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return reason
    return None if done.returncode == 0 else reason


def eval_command(instance: Instance) -> str:
    """Exactly the instance's tests, by pytest node id, with a JUnit XML report of each."""
    tests = dict.fromkeys((*instance.fail_to_pass, *instance.pass_to_pass))
    return (
        f"{instance.test_command} -p no:cacheprovider --rootdir=. "
        f"--junitxml={EVAL_FOLDER}/junit.xml {' '.join(map(shlex.quote, tests))}"
    )


def grade(copy: Copy, instance: Instance, tools: Any, timeout: float, scratch: Path) -> Grade:
    """The harness's evaluation in the task's copy: the files test_patch touches reset,
    test_patch applied over whatever the agent changed, the tests run, each test's status
    read from the JUnit report; `passed` (resolved) when every FAIL_TO_PASS test and every
    PASS_TO_PASS test passes. The copy's test files are reset again after."""
    files = patch_files(instance.test_patch)
    eval_folder = copy.path / EVAL_FOLDER
    reset_files(copy, files)
    failure = apply_patch(copy, instance.test_patch, scratch)
    command = eval_command(instance)
    try:
        if failure is not None:
            log = f"test_patch did not apply: {failure}\n"
            result = None
            statuses: dict[tuple[str, str], str] = {}
        else:
            eval_folder.mkdir(exist_ok=True)
            result = tools.run_check(f"{command} > {EVAL_FOLDER}/log 2>&1", timeout)
            log_file = eval_folder / "log"
            log = log_file.read_text("utf-8", "replace") if log_file.exists() else ""
            log = tools.redactor.redact(log)
            statuses = junit_statuses(eval_folder / "junit.xml")
    finally:
        reset_files(copy, files)
        shutil.rmtree(eval_folder, ignore_errors=True)
    tests = {
        "FAIL_TO_PASS": {t: status_of(t, statuses) for t in instance.fail_to_pass},
        "PASS_TO_PASS": {t: status_of(t, statuses) for t in instance.pass_to_pass},
    }
    passed = all(s in PASSING for group in tests.values() for s in group.values())
    check = {
        "command": command, "passed": passed,
        "exit_code": None if result is None else result.exit_code,
        "output_tail": log[-2000:], "attempts": 1,
        "seconds": 0.0 if result is None else round(result.seconds, 3),
        "timed_out": bool(result and result.timed_out), "tests": tests,
    }  # fmt: skip
    if result is not None and result.sandbox_note:
        check["sandbox_note"] = result.sandbox_note
    return Grade(check, log)


def junit_statuses(report: Path) -> dict[tuple[str, str], str]:
    """(classname, name) -> PASSED, FAILED, ERROR, SKIPPED or XFAIL, from pytest's report."""
    try:
        root = ElementTree.parse(report).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    statuses: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        key = (case.get("classname") or "", case.get("name") or "")
        status = "PASSED"
        for child in case:
            if child.tag == "failure":
                status = "FAILED"
            elif child.tag == "error":
                status = "ERROR" if status == "PASSED" else status
            elif child.tag == "skipped":
                xfail = (child.get("type") or "") == "pytest.xfail"
                status = "XFAIL" if xfail else "SKIPPED"
        statuses[key] = status
    return statuses


def status_of(node_id: str, statuses: Mapping[Any, str]) -> str:
    """A pytest node id's status (MISSING when the report does not have the test)."""
    head, bracket, params = node_id.partition("[")
    parts = head.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    classname = ".".join([module, *parts[1:-1]])
    name = parts[-1] + bracket + params
    return statuses.get((classname, name), "MISSING")


# ----------------------------------------------------------------------------- predictions
def model_patch(patch: str, test_files: Iterable[str], exclude: Sequence[str] = ()) -> str:
    """The patch without the files test_patch touches, new scratch or test files of the
    agent's (SCRATCH_GLOBS, by file name), and the files `exclude`'s globs match (by path)."""
    tests = set(test_files)
    kept = []
    for chunk in re.split(r"(?m)^(?=diff --git )", patch):
        if not chunk.startswith("diff --git "):
            kept.append(chunk)
            continue
        header = chunk.split("\n", 1)[0]
        match = re.match(r"diff --git a/(.*) b/(.*)$", header)
        path = match.group(2) if match else ""
        created = "\nnew file mode " in chunk.split("\n@@", 1)[0]
        name = path.rsplit("/", 1)[-1]
        scratch = created and any(fnmatch.fnmatch(name, g) for g in SCRATCH_GLOBS)
        globs = (*BUILD_GLOBS, *exclude)
        if path in tests or scratch or any(fnmatch.fnmatch(path, g) for g in globs):
            continue
        kept.append(chunk)
    return "".join(kept)


def prediction(record: Mapping[str, Any], patch: str, model_name: str,
               exclude: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """The harness's prediction for a finished task (an empty patch when nothing changed)."""
    return {"instance_id": record["id"], "model_name_or_path": model_name,
            "model_patch": model_patch(patch, record.get("test_files") or (), exclude)}  # fmt: skip


# ---------------------------------------------------------------------------------- loading
def load_instances_or_tasks(
    source: Path | Sequence[Mapping[str, Any]], options: SweOptions | None = None
) -> list[Task]:
    """The tasks of a task file (JSONL), or of SWE-bench instances as the dataset publishes
    them (a JSON array, JSONL, parquet), told apart by `instance_id`; then --filter and
    --slice. `source` may also be a list of dicts of either kind."""
    options = options or SweOptions()
    if isinstance(source, Path):
        entries, base, name = read_entries(source), source.parent, str(source)
    else:
        entries, base, name = list(enumerate(source, 1)), Path.cwd(), "tasks"
    if entries and is_instance(entries[0][1]):
        tasks: list[Task] = []
        seen: dict[str, int] = {}
        for number, data in entries:
            where = f"{name} line {number}" if name.endswith("l") else f"{name} item {number}"
            if not is_instance(data):
                raise BatchError(f"{where}: not a SWE-bench instance (no 'instance_id')")
            if data["instance_id"] in seen:
                raise BatchError(f"{where}: duplicate instance_id {data['instance_id']!r}")
            seen[data["instance_id"]] = number
            if options.filter and not re.search(options.filter, str(data["instance_id"])):
                continue  # not picked: its repository is not needed
            tasks.append(instance_task(data, options, base=base, where=where))
        tasks = pick(tasks, None, options.slice)
    else:
        from toy_agent.batch.tasks import _tasks

        tasks = pick(_tasks(entries, base, name), options.filter, options.slice)
    if not tasks:
        raise BatchError(f"{name}: no task is left after --filter/--slice")
    return tasks


def export_predictions(
    out: Path, model_name: str | None = None, exclude: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """preds.jsonl and preds.json for a batch folder, from results.jsonl and patches/ (a
    folder made before predictions were written, or to rename the model)."""
    results = out / "results.jsonl"
    try:
        lines = jsonl_lines(results.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BatchError(f"cannot read {results}: {exc.strerror or exc}") from None
    records: dict[str, dict[str, Any]] = {}
    for line in lines:
        try:
            record = json.loads(line)
            records[record["id"]] = record
        except (ValueError, TypeError, KeyError):
            continue
    preds = []
    for record in records.values():
        patch = (out / record["patch"]).read_text("utf-8", "replace") if record.get("patch") else ""
        name = model_name or _recorded_model(out, record) or "toy-agent"
        preds.append(prediction(record, patch, name, exclude))
    from toy_agent.events import json_text
    from toy_agent.files import atomic_write

    atomic_write(out / "preds.jsonl", "".join(json_text(p, indent=None) + "\n" for p in preds))
    atomic_write(out / "preds.json", json_text({p["instance_id"]: p for p in preds}) + "\n")
    return preds


def _recorded_model(out: Path, record: Mapping[str, Any]) -> str | None:
    """The model a task's trajectory names, as provider/model when it names both."""
    if not record.get("trajectory"):
        return None
    try:
        data = json.loads((out / record["trajectory"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    settings = data.get("settings") if isinstance(data, dict) else None
    if not isinstance(settings, dict):
        return None
    model, provider = settings.get("model"), settings.get("provider")
    return f"{provider}/{model}" if model and provider else model


class _ExportParser(argparse.ArgumentParser):
    """A usage mistake is a BatchError: one line, as the main command and the other
    subcommands say theirs, not the usage text."""

    def error(self, message: str) -> NoReturn:
        raise BatchError(message)


def export_command(argv: list[str]) -> int:
    """`toy-agent export-preds OUT`: the predictions of a batch folder, for the harness. A
    mistake is one line on stderr and exit code 2."""
    import sys

    from toy_agent.messages import visible

    parser = _ExportParser(
        prog="toy-agent export-preds",
        description="write OUT/preds.jsonl and OUT/preds.json (SWE-bench's predictions) from "
        "a batch folder's results.jsonl and patches",
    )
    parser.add_argument("out", metavar="OUT", help="the batch's --out folder")
    parser.add_argument(
        "--model-name",
        metavar="NAME",
        help="model_name_or_path (default: the trajectory's provider/model)",
    )
    parser.add_argument(
        "--patch-exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave the files GLOB matches out of model_patch; repeatable",
    )
    try:
        args = parser.parse_args(argv)
        preds = export_predictions(Path(args.out), args.model_name, args.patch_exclude)
    except BatchError as exc:
        print(f"toy-agent: error: {visible(str(exc))}", file=sys.stderr)
        return 2
    print(f"{len(preds)} predictions: {Path(args.out) / 'preds.jsonl'}")
    return 0
