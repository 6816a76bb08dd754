"""Work that checks itself: a command's result as data, refusals counted, a check that decides
the run, every edit parsed, and a batch that counts a fix only when it flips a failing test.
Through the real CLI with a scripted (replayed) model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import run_main, toy_agent
from fakes import ScriptedLlm, folder, run_in_pty, write_replay, xml_action

pytestmark = pytest.mark.usefixtures("home")  # see conftest

FAILING = "printf 'collected 1 item\\nE   assert 1 == 2\\n1 failed\\n'; exit 1"


def replayed(repo: Path, replay: Path, *flags: str) -> list[str]:
    return ["--task", "work", "--repo", str(repo), "--llm-provider", "replay",
            "--replay", str(replay), "--sandbox", "off", *flags]  # fmt: skip


def test_a_failing_command_is_an_error_with_its_exit_code_in_stream_json_and_trajectory(
    capsys, repo, tmp_path
):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=FAILING),
        xml_action("run_command", command="echo fine"),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "t.json"
    run = run_main(capsys, *replayed(repo, replay, "--allow-commands", "--output",
                                     "stream-json", "--trajectory", str(trajectory)))  # fmt: skip

    lines = [json.loads(line) for line in run.stdout.splitlines()]
    finished = [line for line in lines if line["type"] == "tool_finished"]
    assert [f["is_error"] for f in finished] == [True, False]
    assert finished[0]["command"]["exit_code"] == 1
    assert finished[0]["command"]["timed_out"] is False
    assert "1 failed" in finished[0]["command"]["output_tail"]
    assert finished[1]["command"]["exit_code"] == 0
    result = lines[-1]
    assert [c["exit_code"] for c in result["commands"]] == [1, 0]
    assert result["commands"][0]["iteration"] == 1
    steps = json.loads(trajectory.read_text())["steps"]
    recorded = steps[0]["observations"][0]
    assert recorded["is_error"] is True and recorded["command"]["exit_code"] == 1
    assert steps[1]["observations"][0]["command"]["exit_code"] == 0


def test_a_timed_out_command_is_data_too(capsys, repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command="sleep 5", timeout=1),
        xml_action("task_complete", result="done"),
    )
    run = run_main(capsys, *replayed(repo, replay, "--allow-commands", "--output", "json"))

    command = json.loads(run.stdout)["commands"][0]
    assert command["timed_out"] is True and command["killed"] is True
    assert command["exit_code"] is None


@pytest.mark.slow
def test_the_live_view_shows_a_failing_command_with_its_exit_code_and_output_tail(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=FAILING),
        xml_action("task_complete", result="done"),
    )
    output = run_in_pty(toy_agent(*replayed(repo, replay, "--allow-commands")))

    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", output)
    assert re.search(r"✗ run_command printf .* · exit 1", plain)
    assert "│ E   assert 1 == 2" in plain and "│ 1 failed" in plain


def test_the_report_marks_a_failed_command_and_unfolds_its_tail(capsys, repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=FAILING),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "t.json"
    run_main(capsys, *replayed(repo, replay, "--allow-commands", "--output", "json",
                               "--trajectory", str(trajectory)))  # fmt: skip
    page = tmp_path / "page.html"
    run = run_main(capsys, "report", str(trajectory), "-o", str(page))

    assert run.returncode == 0, run.stderr
    html = page.read_text()
    assert '<span class="tag error">exit 1</span>' in html
    assert '<pre class="tail">' in html and "E   assert 1 == 2" in html


def test_refused_actions_are_counted_and_listed_and_strict_makes_the_run_fail(
    capsys, repo, tmp_path
):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command="rm -rf build"),
        xml_action("task_complete", result="done"),
    )
    flags = ("--allow-commands", "--deny-command", "rm", "--output", "json")
    run = run_main(capsys, *replayed(repo, replay, *flags))

    result = json.loads(run.stdout)
    assert run.returncode == 0 and result["outcome"] == "completed"
    assert result["refused"] == 1
    [refusal] = result["refused_actions"]
    assert refusal["tool"] == "run_command" and refusal["by"] == "rule"
    assert refusal["iteration"] == 1

    strict = run_main(capsys, *replayed(repo, replay, *flags, "--strict"))
    assert strict.returncode == 1 and json.loads(strict.stdout)["exit_code"] == 1

    text = run_main(capsys, *replayed(repo, replay, *flags[:3]))
    assert "✓ completed, but 1 action not run (refused or declined)" in text.stdout
    assert "run_command: refused by a rule" in text.stdout


def test_strict_keeps_a_clean_run_at_exit_0(capsys, repo, tmp_path):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    run = run_main(capsys, *replayed(repo, replay, "--strict", "--output", "json"))

    assert run.returncode == 0 and json.loads(run.stdout)["refused_actions"] == []


CHECK = "python3 -c 'import calc; assert calc.add(1, 2) == 3, calc.add(1, 2)'"


def calc_repo(root: Path) -> Path:
    return folder(root, {"calc.py": "def add(a, b):\n    return a - b\n"})


def test_a_failing_check_is_shown_to_the_model_which_fixes_the_code_and_the_run_exits_0(
    capsys, tmp_path
):
    repo = calc_repo(tmp_path / "repo")
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("task_complete", result="done, I think"),
        xml_action("edit_file", path="calc.py", old_str="a - b", new_str="a + b"),
        xml_action("task_complete", result="fixed"),
    )
    trajectory = tmp_path / "t.json"
    run = run_main(capsys, *replayed(repo, replay, "--check", CHECK, "--output", "json",
                                     "--trajectory", str(trajectory)))  # fmt: skip

    result = json.loads(run.stdout)
    assert run.returncode == 0, run.stderr
    assert result["outcome"] == "completed" and result["result"] == "fixed"
    assert result["check"]["passed"] is True and result["check"]["attempts"] == 2
    assert result["check"]["command"] == CHECK and result["check"]["exit_code"] == 0
    data = json.loads(trajectory.read_text())
    told = data["steps"][0]["observations"][0]
    assert told["tool_name"] == "task_complete" and told["is_error"] is True
    assert "exited with 1" in told["content"] and "AssertionError: -1" in told["content"]
    assert "attempt 1 of 3" in told["content"]
    assert [c["passed"] for c in data["checks"]] == [False, True]


def test_a_check_that_never_passes_ends_the_run_with_exit_1_and_the_check_in_the_json(
    capsys, tmp_path
):
    repo = calc_repo(tmp_path / "repo")
    replay = write_replay(tmp_path / "r.json", *[xml_action("task_complete", result="done")] * 2)
    run = run_main(capsys, *replayed(repo, replay, "--check", CHECK, "--check-retries", "1",
                                     "--output", "stream-json"))  # fmt: skip

    lines = [json.loads(line) for line in run.stdout.splitlines()]
    result = lines[-1]
    assert run.returncode == 1 and result["exit_code"] == 1
    assert result["outcome"] == "check_failed" and result["success"] is False
    check = result["check"]
    assert check["passed"] is False and check["exit_code"] == 1 and check["attempts"] == 2
    assert "AssertionError: -1" in check["output_tail"]
    schema = json.loads((Path(__file__).parents[1] / "docs/output.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for line in lines:
        validator.validate(line)
    checks = [line for line in lines if line["type"] == "check_finished"]
    assert [(c["attempt"], c["limit"], c["passed"]) for c in checks] == [
        (1, 2, False),
        (2, 2, False),
    ]


def test_a_deny_rule_binds_the_check_too(capsys, tmp_path):
    repo = calc_repo(tmp_path / "repo")
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    run = run_main(capsys, *replayed(repo, replay, "--check", CHECK, "--check-retries", "0",
                                     "--deny-command", "python3", "--output", "json"))  # fmt: skip

    check = json.loads(run.stdout)["check"]
    assert run.returncode == 1 and check["passed"] is False and check["exit_code"] is None
    assert "refused" in check["output_tail"]


def test_the_python_api_takes_a_check(tmp_path):

    from toy_agent import ReactAgent  # noqa: PLC0415

    repo = calc_repo(tmp_path / "repo")
    llm = ScriptedLlm(
        xml_action("task_complete", result="done"),
        xml_action("edit_file", path="calc.py", old_str="a - b", new_str="a + b"),
        xml_action("task_complete", result="fixed"),
    )
    result = ReactAgent(llm, repo, check=CHECK).run("fix add")

    assert result["success"] is True and result["check"]["attempts"] == 2
    assert "AssertionError: -1" in llm.sent_text()
