"""The run record (toy_agent/record.py): what the agent's rules did to an observation is data
(notes, the command's result) in the trajectory, the session and the report; every record
file is checked once, with one line naming the file and the field; older files still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedLlm, write, xml_action

from toy_agent.agent import ReactAgent
from toy_agent.events import Event, StepFinished, ToolFinished, TrajectoryRecorder
from toy_agent.llm import ReplayLlmClient
from toy_agent.messages import LlmResponse, Note
from toy_agent.parsing import Observation
from toy_agent.record import (
    RecordError,
    read_trajectory,
    session_from_dict,
    task_results,
    trajectory_from_dict,
)
from toy_agent.report import write_report
from toy_agent.sessions import SessionRecorder, SessionStore, messages_from_trajectory
from toy_agent.tools import CodeRepositoryTools

DEMO = Path(__file__).resolve().parents[1] / "toy_agent" / "demo" / "trajectory.json"


def observations(events: list[Event]) -> list[Observation]:
    return [e.observation for e in events if isinstance(e, ToolFinished)]


def run(repo: Path, *replies: str, **kwargs: Any) -> tuple[list[Event], Path]:
    """The replies run by the real agent over `repo`, its events and its trajectory."""
    seen: list[Event] = []
    trajectory = repo.parent / "t.json"
    agent = ReactAgent(ScriptedLlm(*replies, xml_action("task_complete", result="done")), repo,
                       on_event=[seen.append, TrajectoryRecorder(trajectory)],
                       **kwargs)  # fmt: skip
    agent.run("do it")
    return seen, trajectory


# ------------------------------------------------------------------------- notes as data
def test_each_rule_marks_its_observation_with_a_note_beside_the_same_text(repo: Path) -> None:
    write(repo, "big.txt", "".join(f"line {n}\n" for n in range(3000)))
    seen, trajectory = run(
        repo,
        xml_action("list_files"), xml_action("list_files"), xml_action("list_files"),
        xml_action("read_file", path="../outside.txt"),
        xml_action("write_file", path=".git/config", content="x"),
        xml_action("read_file", path="big.txt"),
        context_budget=2_000,
    )  # fmt: skip
    listed, _, repeated, outside, git, big = observations(seen)
    assert listed.notes == ()
    assert repeated.notes == (
        Note("repeat", "list_files called with the same parameters 3 times in a row"),
    )
    assert repeated.content.endswith(  # the model's text, as before notes existed
        "\n\nWarning: you have called list_files with the same parameters 3 times in a row. "
        "Repeating it will not change the result; try a different approach, or call "
        "task_complete if you are done."
    )
    assert [n.kind for n in outside.notes] == ["refused"]
    assert "outside the repository" in outside.notes[0].text and outside.is_error
    assert [n.kind for n in git.notes] == ["refused"]
    assert {n.kind for n in big.notes} == {"cut"}  # read_file's window, the context budget
    what = big.notes[-1].text.partition(" of its output cut (to fit the context budget; ")[0]
    assert what.endswith(" characters") and f"[… {what} cut: to fit" in big.content

    recorded = read_trajectory(trajectory)
    assert [o.notes for s in recorded.steps for o in s.observations][2:6] == [
        repeated.notes, outside.notes, git.notes, big.notes]  # fmt: skip


def test_a_declined_action_and_a_failing_command_are_data(repo: Path) -> None:
    seen, trajectory = run(
        repo,
        xml_action("write_file", path="a.txt", content="x"),
        xml_action("run_command", command="echo out; exit 3"),
        allow_commands=True, confirm=lambda action: action.tool_name != "write_file",
    )  # fmt: skip
    declined, failed = observations(seen)
    assert declined.notes == (Note("declined", "declined by the user"),)
    assert failed.is_error and failed.command is not None and failed.command.exit_code == 3
    command = read_trajectory(trajectory).steps[1].observations[0].command
    assert command is not None and (command.exit_code, command.status) == (3, "exit 3")


# --------------------------------------------------------------------------- reading
@pytest.mark.parametrize(
    ("change", "where", "problem"),
    [
        (lambda d: d["steps"][0]["observations"][0].update(is_error="yes"),
         "steps[0].observations[0].is_error", "expected a boolean"),
        (lambda d: d["steps"][0].pop("response"), "steps[0].response", "missing"),
        (lambda d: d["steps"][1]["response"]["usage"].update(input_tokens=1.5),
         "steps[1].response.usage.input_tokens", "expected an integer"),
        (lambda d: d["steps"][0]["actions"][0].update(parameters=[]),
         "steps[0].actions[0].parameters", "expected an object"),
        (lambda d: d.update(settings="x"), "settings", "expected an object"),
        (lambda d: d.update(steps={}), "steps", "expected a list"),
    ],
)  # fmt: skip
def test_a_bad_trajectory_is_one_line_naming_the_file_and_the_field(
    change: Any, where: str, problem: str, tmp_path: Path
) -> None:
    data = json.loads(DEMO.read_text())
    change(data)
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(RecordError) as caught:
        read_trajectory(bad)
    assert str(caught.value) == f"trajectory {bad}: {where}: {problem}"
    assert (caught.value.where, caught.value.problem) == (where, problem)


def test_a_trajectory_of_the_first_shape_still_reads_replays_and_continues(
    tmp_path: Path,
) -> None:
    """The first trajectories: no format, notes, command, images, timings or result; a
    response with only its text; an action without call_id."""
    first = {
        "task": "look",
        "steps": [
            {"iteration": 1, "response": {"text": xml_action("list_files")},
             "actions": [{"tool_name": "list_files", "parameters": {}}],
             "observations": [{"tool_name": "list_files", "content": "hello.py"}]},
            {"response": {"text": xml_action("task_complete", result="ok")}},
        ],
    }  # fmt: skip
    path = tmp_path / "first.json"
    path.write_text(json.dumps(first))
    recorded = read_trajectory(path)
    step = recorded.steps[0]
    assert (step.iteration, step.observations[0].is_error, step.observations[0].notes) == (
        1, False, ())  # fmt: skip
    assert (recorded.result, recorded.diffs, recorded.steps[1].iteration) == (None, None, 2)
    messages = messages_from_trajectory(first)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "hello.py" in messages[2].content
    replay = ReplayLlmClient(path)
    assert replay.call_llm("", []).text == first["steps"][0]["response"]["text"]
    demo = read_trajectory(DEMO)  # the bundled recording, as --demo replays it
    assert demo.task and demo.steps and demo.result is not None and demo.result.success


def test_results_are_read_the_last_line_of_an_id_winning_and_a_bad_one_named(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(
        '{"id": "a", "outcome": "max_iterations", "success": false}\n'
        '{"id": "b", "outcome": "completed", "success": true, "attempts": [{}, {}],'
        ' "baseline": {"passed": false}, "resolved": true, "attempt": 2}\n'
        '{"id": "a", "outcome": "completed", "success": true, "cost_usd": 0.5}\n'
    )
    b, a = task_results(results)  # in the order of their last lines
    assert (a.id, a.outcome, a.cost_usd, b.verdict, b.attempts, b.attempt) == (
        "a", "completed", 0.5, "resolved", 2, 2)  # fmt: skip
    results.write_text('{"id": "a"}\n{"id": "b", "success": "yes"}\n')
    with pytest.raises(RecordError, match=r"results .*results.jsonl: line 2.success: expected a "
                                          "boolean"):  # fmt: skip
        task_results(results)


# ---------------------------------------------------------------------- sessions, report
def reply(tool: str, **params: Any) -> LlmResponse:
    return LlmResponse(xml_action(tool, **params))


def test_a_session_after_compact_and_undo_reports_every_run_and_marks_a_failing_command(
    repo: Path, tmp_path: Path
) -> None:
    """The runs keep where their task is (kept true by /compact) and each step's
    observations as data: the page shows every run's steps, the failing command's error
    mark, and the tasks as given (an undo's note to the model is no run's title)."""
    from toy_agent.sessions import undo_last_run

    store = SessionStore(tmp_path / "sessions")
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="off")
    llm = ScriptedLlm(
        reply("write_file", path="LICENSE", content="MIT\n"), reply("task_complete", result="a"),
        reply("run_command", command="echo broken; exit 4"), reply("task_complete", result="b"),
        LlmResponse("Run 1 added a LICENSE (undone); run 2 ran a failing command."),
        reply("get_file_info", path="hello.py"), reply("task_complete", result="c"),
    )  # fmt: skip
    recorder = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, on_event=recorder)
    agent.run_result(recorder.task("add a license"), history=recorder.conversation())
    undo_last_run(store, recorder.session)
    agent.run_result(recorder.task("run the tests"), history=recorder.conversation())
    assert recorder.compact(llm, 100_000) is not None
    agent.run_result(recorder.task("look at hello.py"), history=recorder.conversation())

    path = store.path(recorder.session)
    saved = session_from_dict(json.loads(path.read_text()), str(path))
    assert [r.task for r in saved.runs] == ["add a license", "run the tests", "look at hello.py"]
    assert saved.runs[0].start is None and saved.runs[2].start is not None
    assert saved.messages[saved.runs[2].start].content == "look at hello.py"
    assert saved.compactions[0].summary == "Run 1 added a LICENSE (undone); run 2 ran a " \
                                           "failing command."  # fmt: skip
    command = saved.runs[1].steps[0].observations[0].command  # type: ignore[index]
    assert command is not None and command.exit_code == 4

    html = write_report([path], tmp_path / "session.html").read_text()
    runs = {n: html.split(f'id="run-{n}"')[1].split("<section")[0] for n in (1, 2, 3)}
    assert "replaced by the summary of a /compact" in runs[1]
    assert "run_command" in runs[2] and '<span class="tag error">exit 4</span>' in runs[2]
    assert "get_file_info" in runs[3]
    assert "(Note:" not in html.split('<pre class="text task">', 1)[1].split("</pre>")[0]
    tasks = [part.split("</pre>")[0] for part in html.split('<pre class="text task">')[1:]]
    assert tasks == ["add a license", "run the tests", "look at hello.py"]


def test_a_failing_command_is_marked_in_the_run_page(repo: Path, tmp_path: Path) -> None:
    _, trajectory = run(repo, xml_action("run_command", command="exit 2"), allow_commands=True)
    html = write_report([trajectory], tmp_path / "r.html").read_text()
    assert '<span class="tag error">exit 2</span>' in html
    warnings = html.split('<ul class="warnings">')[1].split("</ul>")[0]
    assert '<span class="tag error">error</span>' in warnings


def test_the_trajectory_and_the_session_keep_the_same_observation_record(
    repo: Path, tmp_path: Path
) -> None:
    store = SessionStore(tmp_path / "sessions")
    tools = CodeRepositoryTools(repo)
    steps: list[Any] = []
    recorder = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(ScriptedLlm(reply("read_file", path="../x"), reply("task_complete",
                                   result="d")), tools=tools,
                       on_event=[recorder, lambda e: steps.append(e)
                                 if isinstance(e, StepFinished) else None])  # fmt: skip
    agent.run_result("read outside")
    record = trajectory_from_dict({"steps": [steps[0].step.to_dict()]}).steps[0].observations[0]
    saved = session_from_dict(json.loads(store.path(recorder.session).read_text()))
    kept = saved.runs[0].steps[0].observations[0]  # type: ignore[index]
    assert kept.notes == record.notes and [n.kind for n in kept.notes] == ["refused"]
    assert kept.is_error and kept.content == ""  # the text is in the session's messages


def test_a_session_saved_before_runs_kept_their_start_still_splits_into_runs() -> None:
    """The old way, for old files only: a run begins at the first later user message that
    ends with its task, its recorded task loses the undo note, and the summary follows the
    header in the first message."""
    from toy_agent.sessions import SUMMARY_HEADER

    head = f"first task\n\n{SUMMARY_HEADER}\nit went well"
    old = {
        "format": "toy_agent.session/1", "repo": "/r",
        "runs": [{"task": "first task", "outcome": "completed"},
                 {"task": "(Note: the user reverted x.)\n\nsecond", "outcome": "completed"}],
        "compactions": [{"applied": True, "runs": 1}],
        "messages": [{"role": "user", "content": head},
                     {"role": "assistant", "content": "kept step of run 1"},
                     {"role": "user", "content": "(Note: the user reverted x.)\n\nsecond"},
                     {"role": "assistant", "content": "run 2's step"}],
    }  # fmt: skip
    record = session_from_dict(old, "old.json")
    assert [r.task for r in record.runs] == ["first task", "second"]
    chunks, summary = record.run_messages(SUMMARY_HEADER)
    assert summary == "it went well"
    assert [[m.content for m in c or ()] for c in chunks] == [
        ["kept step of run 1"], ["run 2's step"]]  # fmt: skip
