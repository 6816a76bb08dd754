"""SWE-bench in and out: instances as tasks, graded as the official harness grades, predictions.

The instance is made from a real project nobody here wrote (six's pinned sdist and its own
tests, tests/swebench_helpers.py) with one injected bug."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import swebench_helpers as helpers
from fakes import ScriptedLlm, write_replay, xml_action

from toy_agent.batch.driver import RunSettings, run_batch
from toy_agent.batch.swebench import SweOptions, model_patch, parse_slice, status_of
from toy_agent.batch.tasks import BatchError
from toy_agent.cli import main

PYTEST = f"{sys.executable} -m pytest -rA"


@pytest.fixture(scope="session")
def six_tree(request: pytest.FixtureRequest) -> Path:
    import swebench_helpers as helpers

    cache = getattr(request.config, "cache", None)
    root = cache.mkdir("swebench-six").parent if cache else helpers.DEFAULT_CACHE
    try:
        return helpers.sdist(root)
    except helpers.Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def instance(six_tree: Path, tmp_path: Path, *, src_layout: bool = False) -> dict:
    import swebench_helpers as helpers

    return helpers.make_instance(six_tree, tmp_path, src_layout=src_layout)


def options(tmp_path: Path, **kw) -> SweOptions:
    return SweOptions({"benjaminp/six": str(tmp_path / "six")}, test_command=PYTEST, **kw)


def record_of(out: Path) -> dict:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def gold_run(six_tree, tmp_path_factory):
    """A --gold batch of the instance: (its folder, the instance, the summary)."""
    tmp_path = tmp_path_factory.mktemp("gold")
    data = instance(six_tree, tmp_path)
    published = dict(data, PASS_TO_PASS=json.dumps(data["PASS_TO_PASS"]))  # the dataset's way
    tasks = tmp_path / "instances.json"
    tasks.write_text(json.dumps([published]), encoding="utf-8")
    out = tmp_path / "out"
    summary = run_batch(tasks, out, RunSettings(gold=True, sandbox="off"), swe=options(tmp_path))
    return out, data, summary


@pytest.mark.slow
def test_gold_patch_is_graded_resolved_with_each_test_status(gold_run):
    out, data, summary = gold_run
    record = record_of(out)
    assert summary.passed == 1 and record["resolved"] is True
    assert record["baseline"]["tests"]["FAIL_TO_PASS"] == {"test_six.py::test_int2byte": "FAILED"}
    assert set(record["tests"]["FAIL_TO_PASS"].values()) == {"PASSED"}
    assert set(record["tests"]["PASS_TO_PASS"].values()) == {"PASSED"}
    assert record["metadata"]["version"] == "1.17" and "created_at" in record["metadata"]
    log = (out / record["log"]).read_text(encoding="utf-8")
    assert "PASSED test_six.py::test_int2byte" in log
    preds = [json.loads(line) for line in (out / "preds.jsonl").read_text().splitlines()]
    assert preds == [{"instance_id": "benjaminp__six-1", "model_name_or_path": "gold",
                      "model_patch": data["patch"]}]  # fmt: skip
    assert json.loads((out / "preds.json").read_text())["benjaminp__six-1"] == preds[0]


@pytest.mark.slow
def test_the_official_swebench_loader_reads_the_predictions(gold_run):
    try:
        from swebench.harness.utils import get_predictions_from_file
    except ImportError as exc:  # a test-only dependency of the dev extra
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"the swebench package is not installed: {exc}")
    out, data, _ = gold_run
    expected = [{"instance_id": data["instance_id"], "model_name_or_path": "gold",
                 "model_patch": data["patch"]}]  # fmt: skip
    for name in ("preds.jsonl", "preds.json"):
        assert get_predictions_from_file(str(out / name), "unused", "test") == expected


@pytest.mark.slow
def test_a_wrong_fix_is_not_resolved_and_test_edits_stay_out_of_the_prediction(six_tree, tmp_path):
    data = instance(six_tree, tmp_path)
    tasks = tmp_path / "instances.jsonl"
    tasks.write_text(json.dumps(data) + "\n", encoding="utf-8")
    script = ScriptedLlm(
        xml_action("edit_file", path="six.py", old_str=helpers.BUGGY,
                   new_str=helpers.WRONG_FIX),
        # the agent "fixes" the test too: the harness resets it, and so does the prediction
        xml_action("write_file", path="test_six.py", content="def test_nothing():\n    pass\n"),
        xml_action("write_file", path="reproduce.py", content="import six\n"),
        xml_action("task_complete", result="fixed"),
    )  # fmt: skip
    out = tmp_path / "out"
    settings = RunSettings(make_llm=lambda: script, sandbox="off")
    summary = run_batch(tasks, out, settings, swe=options(tmp_path), model_name="scripted/m")
    record = record_of(out)
    assert summary.failed == 1 and record["resolved"] is False
    assert record["tests"]["FAIL_TO_PASS"]["test_six.py::test_int2byte"] == ("FAILED")
    assert set(record["tests"]["PASS_TO_PASS"].values()) == {"PASSED"}
    patch = (out / record["patch"]).read_text()
    assert "test_six.py" in patch and "reproduce.py" in patch
    pred = json.loads((out / "preds.jsonl").read_text())
    assert pred["model_name_or_path"] == "scripted/m"
    assert "a/six.py" in pred["model_patch"]
    assert "test_six.py" not in pred["model_patch"] and "reproduce.py" not in pred["model_patch"]


@pytest.mark.slow
def test_no_fix_is_not_counted_when_the_tests_import_a_fixed_editable_install(six_tree, tmp_path):
    # The developer's editable install points at the source checkout, whose HEAD has the fix
    # (src layout: only the install makes `import six` work); the sandbox is off. The tests
    # pass before the agent starts, so the task is already_passing, never resolved.
    data = instance(six_tree, tmp_path, src_layout=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pytest").is_dir())
    (site / "ours.pth").write_text(ours + "\n")  # pytest
    (site / "__editable__.six.pth").write_text(f"{tmp_path / 'six' / 'src'}\n")  # the install
    swe = replace(options(tmp_path), test_command=f"{venv / 'bin' / 'python'} -m pytest -rA")
    out = tmp_path / "out"
    never = ScriptedLlm()
    summary = run_batch([data], out, RunSettings(make_llm=lambda: never, sandbox="off"),
                        swe=swe)  # fmt: skip
    record = record_of(out)
    assert summary.passed == 0 and record["resolved"] is False
    assert record["outcome"] == "already_passing"
    assert record["baseline"]["tests"]["FAIL_TO_PASS"] == {"test_six.py::test_int2byte": "PASSED"}
    assert json.loads((out / "preds.jsonl").read_text())["model_patch"] == ""


@pytest.mark.slow
def test_the_cli_runs_a_right_fix_from_a_scripted_model_and_exports_predictions(
    six_tree, tmp_path, capsys
):
    data = instance(six_tree, tmp_path)
    tasks = tmp_path / "instances.json"
    other = dict(data, instance_id="benjaminp__six-2")
    tasks.write_text(json.dumps([data, other]), encoding="utf-8")
    replay = write_replay(
        tmp_path / "replay.json",
        xml_action("edit_file", path="six.py", old_str=helpers.BUGGY,
                   new_str=helpers.RIGHT_FIX),
        xml_action("task_complete", result="fixed"),
    )  # fmt: skip
    out = tmp_path / "out"
    code = main(["--tasks-file", str(tasks), "--out", str(out), "--replay", str(replay),
                 "--llm-provider", "replay", "--sandbox", "off", "--quiet",
                 "--repo-map", f"benjaminp/six={tmp_path / 'six'}", "--test-cmd", PYTEST,
                 "--filter", "six-1$", "--slice", "0:1", "--model-name", "mine"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    record = record_of(out)
    assert record["id"] == "benjaminp__six-1" and record["resolved"] is True
    argv = ["--tasks-file", str(tasks), "--out", str(out), "--replay", str(replay),
            "--llm-provider", "replay", "--sandbox", "off", "--quiet", "--filter", "six-1$",
            "--repo-map", f"benjaminp/six={tmp_path / 'six'}", "--model-name", "mine"]  # fmt: skip
    (out / "preds.jsonl").unlink()  # as if stopped between the result and its prediction
    assert main(argv) == 0  # nothing to run, and the prediction is written again
    assert json.loads((out / "preds.jsonl").read_text())["model_name_or_path"] == "mine"
    (out / "preds.jsonl").unlink()
    (out / "preds.json").unlink()
    assert main(["export-preds", str(out), "--model-name", "again"]) == 0
    pred = json.loads((out / "preds.jsonl").read_text())
    assert pred["model_name_or_path"] == "again" and "a/six.py" in pred["model_patch"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "the following arguments are required: OUT"),
        (["out", "--modle-name", "x"], "unrecognized arguments: --modle-name x"),
        (["missing"], "cannot read missing/results.jsonl"),
    ],
    ids=["no-out", "unknown-flag", "no-results"],
)
def test_an_export_preds_mistake_is_one_error_line(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    assert main(["export-preds", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"toy-agent: error: {says}")
    assert len(captured.err.splitlines()) == 1


def test_an_instance_without_a_repository_stops_the_batch(tmp_path):
    data = {"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0" * 40,
            "problem_statement": "x", "test_patch": "", "FAIL_TO_PASS": ["t.py::t"],
            "PASS_TO_PASS": "[]"}  # fmt: skip
    with pytest.raises(BatchError, match="--repo-map a/b=PATH"):
        run_batch([data], tmp_path / "out", RunSettings(sandbox="off"))


def test_a_test_status_is_found_by_its_node_id():
    statuses = {("tests.test_x.TestC", "test_a[1-x]"): "FAILED", ("test_y", "test_b"): "XFAIL"}
    assert status_of("tests/test_x.py::TestC::test_a[1-x]", statuses) == "FAILED"
    assert status_of("test_y.py::test_b", statuses) == "XFAIL"
    assert status_of("test_y.py::test_c", statuses) == "MISSING"


def test_model_patch_leaves_out_test_files_scratch_files_and_excluded_globs():
    def diff(path: str, new: bool = False) -> str:
        mode = "new file mode 100644\n" if new else ""
        return (f"diff --git a/{path} b/{path}\n{mode}--- a/{path}\n+++ b/{path}\n"
                "@@ -1 +1 @@\n-a\n+b\n")  # fmt: skip

    patch = (diff("pkg/core.py") + diff("tests/test_core.py") + diff("reproduce.py", new=True)
             + diff("docs/notes.md") + diff("test_helpers.py")
             + diff("pkg/__pycache__/core.cpython-311.pyc", new=True))  # fmt: skip
    kept = model_patch(patch, ["tests/test_core.py"], ["docs/*"])
    assert kept == diff("pkg/core.py") + diff("test_helpers.py")


def test_slices_are_pythons():
    assert parse_slice("2:5") == (2, 5) and parse_slice(":-1") == (None, -1)
    with pytest.raises(ValueError, match="A:B"):
        parse_slice("two")


def test_the_repo_cache_clones_each_repository_once(tmp_path):
    from toy_agent.batch.swebench import repository

    source = tmp_path / "upstream"
    source.mkdir()
    (source / "a.py").write_text("a = 1\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t",
                                                 "commit", "-qm", "a"]):  # fmt: skip
        subprocess.run(["git", *args], cwd=source, check=True)
    cache = tmp_path / "cache"
    opts = SweOptions({"o/n": f"file://{source}"}, cache)
    path = repository("o/n", opts, "here")
    assert Path(path) == cache / "o__n" and (Path(path) / "a.py").read_text() == "a = 1\n"
    shutil.rmtree(source)  # a second task of the repository does not clone it again
    assert repository("o/n", opts, "here") == path
    with pytest.raises(BatchError, match="cannot clone o/m into --repo-cache"):
        repository("o/m", SweOptions({"o/m": f"file://{source}"}, cache), "here")
