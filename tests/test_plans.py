"""Plan, then act: --permission-mode plan explores read-only and ends with a plan, saved and
shown; approved, the same session carries it out in the mode the user picks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_main, toy_agent
from fakes import write_replay, xml_action

from toy_agent.plans import chosen_mode

PLAN = "# Plan\n1. In hello.py, fix the greeting: `helo` -> `hello`.\n2. Check: python hello.py"


def planned_then_done(path: Path) -> Path:
    """A model that reads, tries an edit (plan mode refuses it), plans; then, carrying the
    plan out, edits and finishes."""
    return write_replay(
        path,
        xml_action("read_file", path="hello.py"),
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
        xml_action("task_complete", result=PLAN),
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
        xml_action("task_complete", result="Fixed the greeting."),
    )


@pytest.mark.parametrize(
    ("answer", "mode"),
    [("edits", "edits"), ("e", "edits"), ("AUTO", "auto"), ("as", "ask"), ("a", None),
     ("no", None), ("n", None), ("", None), ("yes", None)],
)  # fmt: skip
def test_the_answer_names_the_mode_or_declines(answer, mode):
    assert chosen_mode(answer) == mode


def test_a_plan_approved_at_the_prompt_is_carried_out_in_the_chosen_mode(home, repo, capsys):
    trajectory = repo.parent / "run.json"
    done = run_main(capsys, "--repo", str(repo), "--replay", str(planned_then_done(
                    repo.parent / "r.json")), "--permission-mode", "plan", "--trajectory",
                    str(trajectory), "--task", "fix the greeting", stdin="edits\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (repo / "hello.py").read_text() == "print('hello')\n"
    [plan_file] = (home / "state" / "toy-agent" / "plans").glob("*.md")
    assert plan_file.read_text() == PLAN + "\n"
    assert f"The plan is saved in {plan_file}." in done.stderr
    assert "Carry out this plan? edits, auto or ask" in done.stderr
    assert "In hello.py, fix the greeting" in done.stdout  # the plan run's summary shows it
    assert "Fixed the greeting." in done.stdout

    [session_file] = (home / "state" / "toy-agent" / "sessions").glob("*.json")
    session = json.loads(session_file.read_text())
    first, second = session["runs"]  # one session, two runs
    assert first["task"] == "fix the greeting"
    assert second["task"].startswith(f"The user approved your plan (saved in {plan_file})")
    assert PLAN in second["task"]
    run = json.loads(trajectory.read_text())  # the trajectory is the last run's
    assert run["settings"]["permission_mode"] == "edits"
    messages = [m["content"] for m in session["messages"]]
    refused = next(m for m in messages if "edit_file is not available" in m)
    assert "this run is read-only (--permission-mode plan)" in refused


def test_a_plan_declined_or_unanswered_changes_nothing(home, repo, capsys):
    for answer in ("no\n", ""):
        done = run_main(capsys, "--repo", str(repo), "--replay", str(planned_then_done(
                        repo.parent / "r.json")), "--permission-mode", "plan", "--task",
                        "fix the greeting", stdin=answer)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "toy-agent: not carried out; the plan stays in" in done.stderr
        assert (repo / "hello.py").read_text() == "print('helo')\n"


def test_in_scripts_plan_mode_returns_the_plan_and_its_file(home, repo, capsys):
    done = run_main(capsys, "--repo", str(repo), "--replay", str(planned_then_done(
                    repo.parent / "r.json")), "--permission-mode", "plan", "--output", "json",
                    "--task", "fix the greeting", stdin="edits\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["result"] == PLAN and result["permission_mode"] == "plan"
    assert Path(result["plan_file"]).read_text() == PLAN + "\n"
    assert (repo / "hello.py").read_text() == "print('helo')\n"  # nothing asked, nothing done


@pytest.mark.slow
def test_on_a_terminal_the_plan_is_shown_and_approved_at_the_views_prompt(home, repo, tmp_path):
    from test_view import CSI, Terminal

    recording = planned_then_done(tmp_path / "r.json")
    term = Terminal(toy_agent("--task", "fix the greeting", "--repo", str(repo), "--replay",
                              str(recording), "--permission-mode", "plan"), tmp_path,
                    env={"XDG_STATE_HOME": str(home / "state")}, columns=200)  # fmt: skip
    term.read_until("Carry out this plan? edits, auto or ask (the mode to run it in), or no: ")
    assert (repo / "hello.py").read_text() == "print('helo')\n"
    term.type("auto\r")
    screen = CSI.sub("", term.finish())
    assert term.proc.returncode == 0, screen
    assert "In hello.py, fix the greeting" in screen and "The plan is saved in " in screen
    assert "Fixed the greeting." in screen
    assert (repo / "hello.py").read_text() == "print('hello')\n"
