"""Batch runs (--tasks-file): isolated copies, patches, checks, resume, Ctrl-C, Ray.

The model is a loopback server speaking the Anthropic wire format that answers each task
from its own script, so tasks may run in any order or side by side.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli_environment, quickest_provider_env, run_main, toy_agent
from fake_providers import (
    FakeProvider,
    RecordedRequest,
    Reply,
    anthropic_reply,
    error_reply,
    openai_reply,
)
from fakes import BlockingLlm, ScriptedLlm, finishes, run_in_pty, wait_until, xml_action

from toy_agent.batch.driver import RECORD_KEYS, BatchError, RunSettings
from toy_agent.batch.tasks import Task as BatchTask
from toy_agent.batch.workcopy import prepare_copy, remove_copy
from toy_agent.batch.worker import Credentials, run_task
from toy_agent.cli import main
from toy_agent.llm import LlmError
from toy_agent.messages import LlmResponse, Usage

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("clean_env")  # see conftest
GIT_IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@example.com"]


class TaskScripts(FakeProvider):
    """Replies per task: the script is picked by a marker in the task text, the reply by how
    many replies the conversation already holds. `delays` slows a task's replies down.

    `together` names tasks that must run side by side: the first request of each is held
    until every one of them has sent its first (they `met`). One that waits in vain for
    `MEETING_TIMEOUT` seconds gets a 501, so a batch that ran them one after another fails
    instead of hanging. `wire` is the API it speaks: Claude's, or OpenAI's (whose SDK starts
    quickest, for runs in a process of their own where the provider is incidental)."""

    MEETING_TIMEOUT = 30.0  # generous: the others' first requests come within milliseconds

    def __init__(
        self,
        scripts: dict[str, list[str]],
        delays: dict[str, float] | None = None,
        together: tuple[str, ...] = (),
        wire: str = "claude",
    ):
        super().__init__()
        self.answer = {"claude": anthropic_reply, "openai": openai_reply}[wire]
        self.scripts = scripts
        self.delays = delays or {}
        self.seen: dict[str, int] = defaultdict(int)  # marker -> requests
        self.arrived = {marker: threading.Event() for marker in together}
        self.met: set[str] = set()

    def reply_to(self, request: RecordedRequest) -> Reply:
        self.record(request)
        messages = request.body["messages"]
        task = next(m for m in messages if m["role"] == "user")  # OpenAI's come after a system one
        marker = next((m for m in self.scripts if m in json.dumps(task)), None)
        if marker is None:
            return error_reply(501, "no script for this task")
        self.seen[marker] += 1
        step = sum(1 for m in messages if m["role"] == "assistant")
        if step >= len(self.scripts[marker]):
            return error_reply(501, f"the script of {marker} has no reply {step + 1}")
        if step == 0 and marker in self.arrived:
            self.arrived[marker].set()
            if not all(e.wait(self.MEETING_TIMEOUT) for e in self.arrived.values()):
                return error_reply(501, f"{marker} ran alone: {sorted(self.arrived)} never met")
            self.met.add(marker)
        reply = self.answer(self.scripts[marker][step])
        return replace(reply, delay=self.delays.get(marker, 0.0))

    def asked_by(self, marker: str) -> int:
        return self.seen[marker]


def done(result: str = "done") -> str:
    return xml_action("task_complete", result=result)


SCRIPTS = {
    "alpha": [  # fixes the greeting and adds a file; its check passes
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
        xml_action("write_file", path="docs/new.txt", content="new\n"),
        done("fixed"),
    ],
    "bravo": [  # on the same repository, a different edit; its check fails
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="HELLO"),
        done("shouted"),
    ],
    "charlie": [  # a plain folder: a changed file and a new one
        xml_action("write_file", path="notes.txt", content="rewritten\n"),
        xml_action("write_file", path="sub/added.md", content="# added\n"),
        done(),
    ],
    "delta": [xml_action("list_files")],  # runs out of iterations, changes nothing
}
TASKS = [
    {"id": "alpha", "repo": "repo", "task": "[alpha] fix the greeting",
     "check": "grep -q \"'hello'\" hello.py && test -f docs/new.txt"},
    {"id": "bravo", "repo": "repo", "task": "[bravo] shout", "check": "grep -q hello hello.py"},
    {"id": "charlie", "repo": "plain", "task": "[charlie] notes", "check": "test -f sub/added.md"},
    {"id": "delta", "repo": "plain", "task": "[delta] look around", "max_iterations": 1},
]  # fmt: skip


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *GIT_IDENTITY, *args], cwd=cwd, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file outside .git, and for a repository its refs, HEAD, status and worktrees."""
    files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(folder).parts}  # fmt: skip
    if (folder / ".git").exists():
        for args in (["for-each-ref"], ["rev-parse", "HEAD"], ["status", "--porcelain"],
                     ["worktree", "list", "--porcelain"], ["stash", "list"]):  # fmt: skip
            files[" ".join(args)] = git(*args, cwd=folder).encode()
    return files


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Path]:
    """A git repository and a plain folder, next to where the task file goes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hello.py").write_text("print('helo')\n")
    (repo / "logo.bin").write_bytes(b"\x00\x01binary")
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "base", cwd=repo)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("original\n")
    return {"repo": repo, "plain": plain}


def write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def run_batch_cli(
    provider: FakeProvider, tasks: Path, out: Path, *extra: str, monkeypatch: pytest.MonkeyPatch
) -> int:
    for name, value in provider.env("claude").items():
        monkeypatch.setenv(name, value)
    return main(["--tasks-file", str(tasks), "--out", str(out), "--sandbox", "auto", *extra])


# ------------------------------------------------------------------------- the main scenario
@pytest.mark.slow
def test_a_batch_over_a_git_repo_and_a_plain_folder_records_patches_checks_and_trajectories(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    before = {name: snapshot(path) for name, path in sources.items()}
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", TASKS), tmp_path / "out"
    with TaskScripts(SCRIPTS, together=("alpha", "bravo")) as provider:
        code = run_batch_cli(provider, tasks, out, "--workers", "2", "--check-retries", "0",
                             monkeypatch=monkeypatch)  # fmt: skip

    assert code == 1  # bravo's check failed, delta did not complete
    records = {r["id"]: r for r in results(out)}
    assert sorted(records) == ["alpha", "bravo", "charlie", "delta"]
    assert all(list(r) == list(RECORD_KEYS) for r in records.values())

    alpha, bravo, charlie, delta = (records[k] for k in ("alpha", "bravo", "charlie", "delta"))
    assert alpha["outcome"] == "completed" and alpha["success"] is True
    assert alpha["check"]["passed"] is True and alpha["check"]["exit_code"] == 0
    assert alpha["check"]["output_tail"] == "" and alpha["check"]["attempts"] == 1
    assert alpha["iterations"] == 3 and alpha["usage"]["input_tokens"] == 30
    assert alpha["cost_usd"] == pytest.approx(0.00021)  # 30 in x $2/M + 15 out x $10/M
    assert alpha["files_changed"] == [{"path": "docs/new.txt", "added": 1, "removed": 0},
                                      {"path": "hello.py", "added": 1, "removed": 1}]  # fmt: skip
    assert alpha["base_commit"] == git("rev-parse", "HEAD", cwd=sources["repo"]).strip()
    assert bravo["outcome"] == "check_failed" and bravo["success"] is False
    assert bravo["check"]["passed"] is False and bravo["check"]["exit_code"] == 1
    assert charlie["success"] is True and charlie["base_commit"] is None
    assert delta["outcome"] == "max_iterations" and delta["success"] is False
    assert delta["check"] is None and delta["patch"] is None and delta["files_changed"] == []
    assert "iteration limit" in delta["error"]

    # Each task saw only its own changes: one repository, two independent copies.
    patches = {k: (out / r["patch"]).read_text() for k, r in records.items() if r["patch"]}
    assert "+print('hello')" in patches["alpha"] and "HELLO" not in patches["alpha"]
    assert "+print('HELLO')" in patches["bravo"] and "docs/new.txt" not in patches["bravo"]
    assert "new file mode" in patches["alpha"] and "new file mode" in patches["charlie"]
    for task_id, source in (("alpha", "repo"), ("bravo", "repo"), ("charlie", "plain")):
        subprocess.run(["git", "apply", "--check", str(out / records[task_id]["patch"])],
                       cwd=sources[source], check=True)  # fmt: skip

    trajectory = json.loads((out / alpha["trajectory"]).read_text())
    assert trajectory["task"] == "[alpha] fix the greeting"
    assert [s["actions"][0]["tool_name"] for s in trajectory["steps"]] == [
        "edit_file", "write_file", "task_complete"]  # fmt: skip

    # The two tasks on one repository ran side by side: each one's first request was held
    # until the other's came.
    assert provider.met == {"alpha", "bravo"}

    assert {name: snapshot(path) for name, path in sources.items()} == before
    out_text = capsys.readouterr().out
    assert "[4/4]" in out_text and "✓ alpha" in out_text and "✗ bravo" in out_text
    assert "check failed (exit 1)" in out_text
    assert "4 tasks: 2 passed, 2 failed" in out_text and "\x1b" not in out_text


@pytest.mark.slow
def test_a_second_run_resumes_without_any_llm_request_and_redo_reruns(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", TASKS[:3]), tmp_path / "out"
    with TaskScripts(SCRIPTS) as provider:
        first = run_batch_cli(provider, tasks, out, monkeypatch=monkeypatch)
        asked = len(provider.requests)
        lines = (out / "results.jsonl").read_text()
        capsys.readouterr()
        second = run_batch_cli(provider, tasks, out, "--workers", "3", "--output", "json",
                               monkeypatch=monkeypatch)  # fmt: skip
        assert len(provider.requests) == asked  # nothing ran again
        assert (out / "results.jsonl").read_text() == lines
        totals = json.loads(capsys.readouterr().out)  # one object, nothing else
        assert totals["total"] == totals["skipped"] == 3 and totals["ran"] == 0
        assert (totals["passed"], totals["failed"], totals["not_run"]) == (2, 1, 0)

        redo = run_batch_cli(provider, tasks, out, "--redo", monkeypatch=monkeypatch)
        assert len(provider.requests) == 2 * asked

    assert first == second == redo == 1  # bravo's check fails every time
    assert [r["id"] for r in results(out)] == ["alpha", "bravo", "charlie"]  # one line each
    assert "3 tasks to run" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "repo": "repo", "task": "t"}', "{not json"], "line 2: not valid JSON"),
        (['{"id": "a", "repo": "repo", "task": "t", "model": "x"}'], "line 1: unknown key 'model'"),
        (['{"id": "a", "repo": "repo"}'], "line 1: 'task' is missing"),
        (['{"id": "a", "repo": "repo", "task": "t"}', "", '{"id": "a", "repo": "plain", '
          '"task": "u"}'], "line 3: duplicate id 'a' (first on line 1)"),
        (['{"id": "../x", "repo": "repo", "task": "t"}'], "line 1: id '../x' must be"),
        (['{"id": "a", "repo": "nowhere", "task": "t"}'], "line 1: repo nowhere is not a folder"),
        (['{"id": "a", "repo": "plain", "task": "t", "rev": "main"}'], "line 1: 'rev' needs a git"),
        (['{"id": "a", "repo": "repo", "task": "t", "rev": "-b"}'], "'rev' '-b' cannot start"),
        (['{"id": "a", "repo": "repo", "task": "t", "max_iterations": 0}'], "line 1: 'max_iter"),
        (["[1, 2]"], "line 1: expected a JSON object"),
    ],
)  # fmt: skip
def test_task_file_mistakes_are_rejected_before_anything_runs(
    lines: list[str], message: str, sources: dict[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: Any,
) -> None:  # fmt: skip
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, tmp_path / "out", monkeypatch=monkeypatch)
        assert provider.requests == []
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "x"], "--task is for a single run"),
        (["--trajectory", "t.json"], "--trajectory is for a single run"),
        (["--executor", "local", "--ray-address", "ray://h:10001"], "--ray-address needs"),
        (["--llm-provider", "replay"], "--replay FILE"),
    ],
)
def test_flags_that_do_not_fit_a_batch_exit_with_code_two(
    argv: list[str], message: str, sources: dict[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: Any,
) -> None:  # fmt: skip
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS[:1])
    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, tmp_path / "out", *argv, monkeypatch=monkeypatch)
    assert code == 2 and message in capsys.readouterr().err


def test_out_without_a_tasks_file_and_a_missing_key_are_usage_errors(
    sources: dict[str, Path], tmp_path: Path, capsys: Any
) -> None:
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "--tasks-file" in capsys.readouterr().err
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS[:1])
    assert main(["--tasks-file", str(tasks), "--out", str(tmp_path / "out")]) == 2
    assert "ANTHROPIC_API_KEY is not set" in capsys.readouterr().err


def test_executor_ray_without_ray_names_the_install_command(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS[:1])
    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, tmp_path / "out", "--executor", "ray",
                             monkeypatch=monkeypatch)  # fmt: skip
        assert provider.requests == []
    assert code == 2
    assert 'pip install "toy-agent[ray]"' in capsys.readouterr().err
    assert not (tmp_path / "out" / "results.jsonl").exists()


# ---------------------------------------------------------------------------------- Ctrl-C
@pytest.mark.slow
def test_ctrl_c_keeps_finished_results_and_the_next_run_does_the_rest(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", [TASKS[0], TASKS[2]])
    out = tmp_path / "out"
    with TaskScripts(SCRIPTS, delays={"charlie": 30}, wire="openai") as provider:
        proc = subprocess.Popen(
            toy_agent("--tasks-file", str(tasks), "--out", str(out)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=cli_environment(quickest_provider_env(provider)),
        )  # fmt: skip
        wait_until(lambda: provider.asked_by("charlie"), "charlie's first request")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert [r["id"] for r in results(out)] == ["alpha"]
    assert "stopping: 1 running task will not be recorded" in stdout
    assert "2 tasks: 1 passed, 0 failed, 1 not run" in stdout
    assert git("worktree", "list", "--porcelain", cwd=sources["repo"]).count("worktree ") == 1

    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, out, monkeypatch=monkeypatch)
        assert provider.asked_by("alpha") == 0 and provider.asked_by("charlie") == 3
    assert code == 0
    assert [r["id"] for r in results(out)] == ["alpha", "charlie"]
    assert "1 task to run with 1 worker (1 of 2 already have results)" in capsys.readouterr().out


@pytest.mark.slow
def test_on_a_terminal_a_progress_line_shows_done_running_tokens_and_eta_and_warnings_go_above(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    """One terminal run, one worker: alpha, charlie, then echo, whose request nobody scripted.
    The line is drawn again as a task starts, finishes or moves on a step, so alpha's short
    replies (a little slower than none, so its steps are seen) are enough to show it all."""
    echo = {"id": "echo", "repo": "plain", "task": "[echo] nobody scripted this"}
    tasks = write_tasks(tmp_path / "tasks.jsonl", [TASKS[0], TASKS[2], echo])
    with TaskScripts(SCRIPTS, delays={"alpha": 0.1}, wire="openai") as provider:
        screen = run_in_pty(
            toy_agent("--tasks-file", str(tasks), "--out", str(tmp_path / "out"),
                      "--max-retries", "0"), quickest_provider_env(provider),
        )  # fmt: skip
    assert "\r\x1b[2K" in screen  # the progress line erased and drawn again in place
    assert "0/3 done · 1 running · ✓ 0 ✗ 0 · 0 tokens" in screen
    assert "· alpha step " in screen  # which task runs, and at which step
    assert "1/3 done · 1 running · ✓ 1 ✗ 0 · 45 tokens" in screen and "ETA" in screen
    # A task's warning names it, on a line of its own above the progress line.
    assert "\r\x1b[2KWARNING echo: LLM call failed" in screen
    assert screen.index("0/3 done") < screen.index("WARNING echo")
    assert "3 tasks: 2 passed, 1 failed" in screen


def test_the_progress_line_is_cut_to_the_width_so_it_can_be_erased() -> None:
    """A progress line wider than the terminal would wrap, and erasing the line would leave
    its first rows on screen: it is cut with `…` instead; the lines above it are not."""
    import io

    from toy_agent.batch.driver import BatchView

    screen = io.StringIO()
    view = BatchView(screen, live=True)
    view.start(3, 3, 3)
    view.update(3, [(f"a-task-with-a-long-name-{i}", 12) for i in range(3)])
    record = {"id": "t" * 100, "success": True, "outcome": "completed", "check": None,
              "iterations": 1, "elapsed_seconds": 1.0}  # fmt: skip
    view.finished(record)
    progress = screen.getvalue().split("\r\x1b[2K")
    assert progress[0] == "" and progress[1] == "3 tasks to run with 3 workers\n"
    assert 20 < len(progress[2]) < 80 and progress[2].endswith("…")
    assert progress[2].startswith("0/3 done · 3 running")
    assert progress[3].startswith(f"[1/3] ✓ {'t' * 100}  completed") and "…" not in progress[3]


# ------------------------------------------------------------------------------- Python API
def test_a_tasks_own_effort_wins_over_the_batchs(
    sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toy_agent import run_batch

    done = openai_reply(xml_action("task_complete", result="ok"))
    with FakeProvider() as server:
        server.enqueue(done, done)
        for name, value in server.env("openai").items():
            monkeypatch.setenv(name, value)
        tasks = [{"id": "own", "repo": str(sources["plain"]), "task": "t", "effort": "high"},
                 {"id": "batch", "repo": str(sources["plain"]), "task": "t"}]  # fmt: skip
        settings = RunSettings(provider="openai", model="gpt-5-mini", effort="low",
                               sandbox="off", max_retries=0)  # fmt: skip
        summary = run_batch(tasks, sources["plain"].parent / "effort-out", settings, workers=1)

    assert summary.passed == 2
    assert sorted(r.body["reasoning_effort"] for r in server.requests) == ["high", "low"]


def test_run_batch_from_python_with_any_llm_client(sources: dict[str, Path]) -> None:
    from toy_agent import run_batch

    def scripted() -> ScriptedLlm:
        return ScriptedLlm(xml_action("write_file", path="out.txt", content="x\n"), done())

    tasks = [{"id": f"t{i}", "repo": str(sources["repo"]), "task": "write", "check": "test -f "
              "out.txt"} for i in range(3)]  # fmt: skip
    out = sources["repo"].parent / "api-out"
    summary = run_batch(tasks, out, RunSettings(make_llm=scripted, sandbox="off"), workers=3)

    assert (summary.exit_code, summary.passed, summary.failed, summary.ran) == (0, 3, 0, 3)
    assert [r["files_changed"] for r in summary.records] == [
        [{"path": "out.txt", "added": 1, "removed": 0}]] * 3  # fmt: skip
    assert summary.to_dict()["usage"] == Usage().to_dict()
    with pytest.raises(BatchError, match="tasks line 2: duplicate id 't0'"):
        run_batch([tasks[0], tasks[0]], out, RunSettings(make_llm=scripted))


def test_a_patch_or_trajectory_link_left_in_the_out_folder_is_replaced_never_followed(
    sources: dict[str, Path],
) -> None:
    """The batch's own files are written whole (temp file, then rename), like results.jsonl:
    a link standing where a task's patch or trajectory goes is replaced, and what it points
    at is left as it was."""
    from toy_agent import run_batch

    out, victim = sources["repo"].parent / "out", sources["repo"].parent / "victim.txt"
    victim.write_text("keep me\n")
    for name in ("patches/t0.diff", "trajectories/t0.json"):
        (out / name).parent.mkdir(parents=True)
        (out / name).symlink_to(victim)

    def scripted() -> ScriptedLlm:
        return ScriptedLlm(xml_action("write_file", path="out.txt", content="x\n"), done())

    tasks = [{"id": "t0", "repo": str(sources["repo"]), "task": "write"}]
    summary = run_batch(tasks, out, RunSettings(make_llm=scripted, sandbox="off"))

    assert summary.ran == 1 and victim.read_text() == "keep me\n"
    assert not (out / "patches/t0.diff").is_symlink()
    assert "+x" in (out / "patches/t0.diff").read_text()
    assert json.loads((out / "trajectories/t0.json").read_text())["task"] == "write"


def test_log_records_of_a_task_name_it_even_from_the_llm_calls_thread(
    sources: dict[str, Path],
) -> None:
    from toy_agent import run_batch
    from toy_agent.batch.worker import TaskLogFilter

    class Chatty(ScriptedLlm):
        def call_llm(self, *args: Any, **kwargs: Any) -> LlmResponse:
            logging.getLogger("toy_agent.test").warning("asked %d", len(self.requests))
            return super().call_llm(*args, **kwargs)

    def scripted() -> ScriptedLlm:
        return Chatty(LlmError("scripted", "the provider is down"))

    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    handler.addFilter(TaskLogFilter())
    logging.getLogger().addHandler(handler)
    try:
        tasks = [{"id": f"t{i}", "repo": str(sources["plain"]), "task": "x"} for i in range(2)]
        out = sources["plain"].parent / "logged-out"
        run_batch(tasks, out, RunSettings(make_llm=scripted, sandbox="off"), workers=2)
    finally:
        logging.getLogger().removeHandler(handler)
    assert all(message.startswith(("t0: ", "t1: ")) for message in seen), seen
    assert sorted(m for m in seen if "asked" in m or "LLM call failed" in m) == [
        "t0: LLM call failed: scripted API error: the provider is down", "t0: asked 0",
        "t1: LLM call failed: scripted API error: the provider is down", "t1: asked 0",
    ]  # fmt: skip


@pytest.mark.slow
def test_checks_run_sandboxed_without_secrets_and_are_killed_at_the_timeout(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toy_agent import run_batch
    from toy_agent.sandbox import SCRATCH_HOME, bwrap_problem

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value-1234567890")
    sandboxed = bwrap_problem() is None
    in_sandbox = f'test "$HOME" = {SCRATCH_HOME}' if sandboxed else "true"
    tasks = [
        {"id": "clean", "repo": str(sources["plain"]), "task": "x",
         "check": f'test -z "$ANTHROPIC_API_KEY" && {in_sandbox} && echo checked'},
        {"id": "slow", "repo": str(sources["plain"]), "task": "x", "check": "sleep 30"},
    ]  # fmt: skip
    settings = RunSettings(make_llm=lambda: ScriptedLlm(done()), check_timeout=0.5,
                           check_retries=0,
                           sandbox="bwrap" if sandboxed else "off")  # fmt: skip
    started = time.monotonic()
    summary = run_batch(tasks, tmp_path / "out", settings, workers=2)

    clean, slow = summary.records
    assert clean["check"]["passed"] is True and clean["check"]["exit_code"] == 0
    assert clean["check"]["output_tail"] == "checked\n"
    assert slow["check"]["passed"] is False and slow["check"]["exit_code"] is None
    assert "timed out after 0.5s" in slow["check"]["output_tail"]
    assert slow["check"]["seconds"] < 1  # at 0.5 s, not rounded up to a whole second
    assert time.monotonic() - started < 15


def test_a_task_whose_copy_cannot_be_made_is_recorded_as_an_error(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    from toy_agent import run_batch

    tasks = [{"id": "bad-rev", "repo": str(sources["repo"]), "task": "x", "rev": "no-such-rev"},
             {"id": "bad-url", "repo": f"file://{tmp_path}/missing.git", "task": "x"}]  # fmt: skip
    summary = run_batch(tasks, tmp_path / "out", RunSettings(make_llm=ScriptedLlm))
    assert summary.exit_code == 1
    for record in summary.records:
        assert record["outcome"] == "error" and record["patch"] is None
        assert record["error"].startswith(("git worktree failed", "git clone failed"))
    assert git("worktree", "list", "--porcelain", cwd=sources["repo"]).count("worktree ") == 1


def test_copies_are_fresh_and_leave_the_source_as_it_was(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    git("tag", "v0", cwd=sources["repo"])
    (sources["repo"] / "hello.py").write_text("print('uncommitted')\n")  # not in the copy
    scratch = tmp_path / "scratch"
    before = snapshot(sources["repo"])
    task = BatchTask("w", str(sources["repo"]), "x", rev="v0")
    url_task = BatchTask("u", f"file://{sources['repo']}", "x", rev="v0")
    for copy in (prepare_copy(task, scratch), prepare_copy(url_task, scratch)):
        assert (copy.path / "hello.py").read_text() == "print('helo')\n"
        (copy.path / "hello.py").write_text("changed\n")
        remove_copy(copy)
        assert not copy.path.exists()
    assert snapshot(sources["repo"]) == before


@pytest.mark.slow
def test_a_repository_whose_git_config_runs_programs_runs_none_of_them(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository someone else wrote (not a fresh clone) brings its own .git/config: filter
    drivers (smudge on checkout, clean on add), an fsmonitor, hooks. The batch's git calls
    on it and on its copies must start none of them, and still make the patch."""
    repo, ran = sources["repo"], tmp_path / "ran"
    ran.mkdir()
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n*.py filter=a=b\n")
    git("add", ".gitattributes", cwd=repo)
    git("commit", "-qm", "attributes", cwd=repo)
    hook = repo / ".git" / "hooks" / "post-checkout"
    for name, value in {
        "filter.evil.smudge": f"touch {ran}/smudge; cat",
        "filter.evil.clean": f"touch {ran}/clean; cat",
        "filter.evil.required": "true",
        "filter.a=b.smudge": f"touch {ran}/smudge-a=b; cat",  # a name -c cannot carry
        "core.fsmonitor": f"touch {ran}/fsmonitor; false",
        "diff.evil.command": f"touch {ran}/diff",
        "diff.external": f"touch {ran}/external",
    }.items():
        git("config", name, value, cwd=repo)
    hook.write_text(f"#!/bin/sh\ntouch {ran}/hook\n")
    hook.chmod(0o755)
    tasks = write_tasks(tmp_path / "tasks.jsonl", [TASKS[0]])
    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, tmp_path / "out", monkeypatch=monkeypatch)

    assert code == 0
    record = results(tmp_path / "out")[0]
    assert record["outcome"] == "completed" and record["success"] is True
    assert "+print('hello')" in (tmp_path / "out" / record["patch"]).read_text()
    assert sorted(p.name for p in ran.iterdir()) == []


@pytest.mark.parametrize("kind", ["url", "worktree"])
def test_a_command_that_moves_the_work_tree_cannot_put_files_outside_the_copy_in_the_patch(
    sources: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    """The attack: a command (unsandboxed here, so it can write .git) runs `git config
    core.worktree` pointing at the home folder. The driver's own git calls name the copy's git
    folder and work tree as they were made, so the patch holds only the copy's files."""
    from toy_agent import run_batch

    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = MARKER-SECRET\n")
    repo = f"file://{sources['repo']}" if kind == "url" else str(sources["repo"])
    move = f"git config core.worktree {home}"
    tasks = [{"id": "t", "repo": repo, "task": "x"}]
    settings = RunSettings(
        make_llm=lambda: ScriptedLlm(xml_action("run_command", command=move),
                                     xml_action("write_file", path="new.txt", content="n\n"),
                                     done()),
        allow_commands=True, sandbox="off",
    )  # fmt: skip
    summary = run_batch(tasks, tmp_path / "out", settings)
    record = summary.records[0]
    assert record["outcome"] == "completed", record
    assert [f["path"] for f in record["files_changed"]] == ["new.txt"]
    patch = (tmp_path / "out" / record["patch"]).read_text()
    assert "MARKER-SECRET" not in patch and ".aws" not in patch


@pytest.mark.slow
def test_a_ray_that_cannot_be_imported_or_reached_is_one_line_and_exit_2(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A broken install (`import ray` raising a protobuf TypeError) and a cluster that cannot
    be reached: each is one line naming the cause, exit 2, and the usage-error JSON."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS[:1])
    broken = tmp_path / "broken"
    (broken / "ray").mkdir(parents=True)
    (broken / "ray" / "__init__.py").write_text(
        "raise TypeError('Descriptors cannot be created directly.')\n"
    )
    unreachable = tmp_path / "unreachable"
    (unreachable / "ray").mkdir(parents=True)
    (unreachable / "ray" / "__init__.py").write_text(
        "def is_initialized():\n    return False\n"
        "def init(**options):\n    raise ConnectionError('Could not connect to 10.0.0.9:6379')\n"
    )
    for fake, cause in ((broken, "importing ray failed (TypeError: Descriptors cannot be "
                         "created directly.)"),
                        (unreachable, "could not start or reach the Ray cluster at "
                         "10.0.0.9:6379 (ConnectionError: Could not connect")):  # fmt: skip
        with monkeypatch.context() as patch:  # `import ray` finds the fake, then the real again
            patch.syspath_prepend(str(fake))
            patch.delitem(sys.modules, "ray", raising=False)
            patch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
            try:
                code = main(["--tasks-file", str(tasks), "--out", str(tmp_path / "out"),
                             "--executor", "ray", "--ray-address", "10.0.0.9:6379",
                             "--output", "json"])  # fmt: skip
            finally:
                sys.modules.pop("ray", None)  # the fake, when it imported
        out, err = capsys.readouterr()
        assert code == 2, err
        assert err.count("\n") == 1 and cause in err, err
        assert "Traceback" not in err
        reply = json.loads(out)
        assert reply["outcome"] == "usage_error" and reply["exit_code"] == 2


@pytest.mark.slow
def test_a_plain_folder_with_a_fifo_and_a_socket_is_copied_without_reading_them(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copying a FIFO's content would block for ever (and a device's could never end): the
    copy makes the FIFO anew and leaves the socket out; the task runs as usual."""
    plain = sources["plain"]
    os.mkfifo(plain / "pipe")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(plain / "sock"))
        tasks = write_tasks(tmp_path / "tasks.jsonl", [TASKS[2]])
        with TaskScripts(SCRIPTS) as provider:
            code = finishes(
                lambda: run_batch_cli(provider, tasks, tmp_path / "out", monkeypatch=monkeypatch)
            )

    assert code == 0
    record = results(tmp_path / "out")[0]
    assert record["outcome"] == "completed" and record["success"] is True
    assert sorted(f["path"] for f in record["files_changed"]) == ["notes.txt", "sub/added.md"]


@pytest.mark.slow
def test_a_task_that_changes_a_file_whose_name_is_not_utf8_is_recorded(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git names the file with its raw byte; results.jsonl and the trajectory still write
    (as JSON's \\udcXX escape, which reads back as the same name)."""
    name = os.fsdecode(b"caf\xe9.txt")
    (sources["plain"] / name).write_text("old\n")
    scripts = {"latin": [xml_action("write_file", path="caf\\xe9.txt", content="new\n"),
                         done("rewrote it")]}  # fmt: skip
    task = {"id": "latin", "repo": "plain", "task": "[latin] rewrite it"}
    tasks = write_tasks(tmp_path / "tasks.jsonl", [task])
    with TaskScripts(scripts) as provider:
        code = run_batch_cli(provider, tasks, tmp_path / "out", monkeypatch=monkeypatch)

    assert code == 0
    record = results(tmp_path / "out")[0]
    assert record["outcome"] == "completed" and record["files_changed"][0]["path"] == name
    assert (sources["plain"] / name).read_text() == "old\n"  # the copy changed, not the source


# -------------------------------------------------------------------------------------- Ray
def test_credentials_show_their_variables_names_never_a_value() -> None:
    """What a task gets its key in may be printed by Ray (a failed task's arguments)."""
    credentials = Credentials({"ANTHROPIC_API_KEY": "sk-ant-secret-value-123"})
    for shown in (repr(credentials), str(credentials), repr([credentials])):
        assert "ANTHROPIC_API_KEY" in shown and "secret-value" not in shown
    assert credentials.environ() == {"ANTHROPIC_API_KEY": "sk-ant-secret-value-123"}


def test_a_task_handed_credentials_reaches_the_model_with_them_and_redacts_only_the_key(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    """What a Ray worker does, without Ray: no provider variable in this environment."""
    key = "sk-ant-api03-" + "h4Nd" * 8
    task = BatchTask("k", str(sources["plain"]), "say where you are")
    with FakeProvider() as server:
        said = f"I used {key} at {server.url}"
        server.enqueue(anthropic_reply(xml_action("task_complete", result=said)))
        credentials = Credentials(server.env("claude", key=key))
        result = run_task(task, RunSettings(sandbox="off"), tmp_path / "scratch",
                          credentials=credentials)  # fmt: skip

    assert result["outcome"] == "completed", result["error"]
    assert any(key in value for value in server.requests[0].headers.values())
    answer = result["trajectory_data"]["result"]["result"]
    assert answer == f"I used [REDACTED] at {server.url}"  # a base URL is no secret


@pytest.fixture
def ray_dir() -> Iterator[Path]:
    """A folder for Ray's session, with a short path: Ray's sockets live in it."""
    folder = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_ray_runs_the_task_file_as_local_does_and_its_workers_get_the_key_only_as_an_argument(
    sources: dict[str, Path],
    tmp_path: Path,
    ray_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    """One Ray (it takes seconds to start) for both checks. On Ray, the task file gives the
    results of a local run, field for field but the time taken, patch for patch, and leaves
    the sources as they were. Ray logs a task's runtime environment and shows it on its
    dashboard, so the key must not travel there. Here the workers start without the key in
    their environment (Ray is started before it is set), so a task can only reach the model
    with the key it was handed; no file Ray writes (its logs, its session) holds the key; and
    a Ray the batch did not start is left running."""
    ray = pytest.importorskip("ray")
    key = "sk-proj-" + "q7Z" * 12  # recognisable anywhere Ray might write it
    url_task = {"id": "echo", "repo": f"file://{sources['repo']}", "task": "[alpha] via a URL",
                "check": TASKS[0]["check"]}  # fmt: skip
    tasks = write_tasks(tmp_path / "tasks.jsonl", [TASKS[0], TASKS[2], url_task])
    before = {name: snapshot(path) for name, path in sources.items()}
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=str(ray_dir),
             logging_level=logging.WARNING)  # fmt: skip
    try:
        with TaskScripts(SCRIPTS, wire="openai") as provider:  # its SDK starts quickest
            variables = {**provider.env("openai", key=key), "TOY_AGENT_LLM_PROVIDER": "openai"}
            for name, value in variables.items():
                monkeypatch.setenv(name, value)
            codes = [
                main(
                    [
                        "--tasks-file",
                        str(tasks),
                        "--out",
                        str(tmp_path / out),
                        "--sandbox",
                        "auto",
                        "--workers",
                        "2",
                        *executor,
                    ]
                )
                for out, executor in (("local", []), ("ray", ["--executor", "ray"]))
            ]
        assert codes == [0, 0], capsys.readouterr()
        assert len(provider.requests) == 2 * 9  # each run: three tasks of three replies
        assert all(any(key in value for value in request.headers.values())
                   for request in provider.requests)  # fmt: skip
        assert ray.is_initialized()  # a Ray the batch did not start is left running
    finally:
        ray.shutdown()

    by_id = {r["id"]: r for r in results(tmp_path / "local")}
    for record in results(tmp_path / "ray"):
        expected = by_id.pop(record["id"])
        assert list(record) == list(expected)
        assert steady(record) == steady(expected)
        assert (tmp_path / "ray" / record["patch"]).read_bytes() == (
            tmp_path / "local" / expected["patch"]).read_bytes()  # fmt: skip
        assert (tmp_path / "ray" / record["trajectory"]).exists()
    assert by_id == {}  # every task ran on Ray too
    assert {name: snapshot(path) for name, path in sources.items()} == before
    written = [path for path in ray_dir.rglob("*") if path.is_file() and not path.is_symlink()]
    assert any(path.suffix in (".log", ".out", ".err") for path in written)  # Ray did log
    assert [path for path in written if key.encode() in path.read_bytes()] == []


@pytest.mark.slow
def test_without_a_ray_running_the_batch_starts_a_local_one_and_stops_it_after(
    sources: dict[str, Path],
    tmp_path: Path,
    ray_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    """`--executor ray` with neither --ray-address nor RAY_ADDRESS, the way most people first
    try it: the batch starts a local Ray, runs the tasks on it and stops it again."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    tasks = write_tasks(tmp_path / "tasks.jsonl", [TASKS[2]])
    monkeypatch.setenv("RAY_TMPDIR", str(ray_dir))  # Ray's sockets want a short path
    with TaskScripts(SCRIPTS, wire="openai") as provider:
        for name, value in quickest_provider_env(provider).items():
            monkeypatch.setenv(name, value)
        code = main(["--tasks-file", str(tasks), "--out", str(tmp_path / "out"), "--sandbox",
                     "off", "--workers", "1", "--executor", "ray"])  # fmt: skip

    assert code == 0, capsys.readouterr()
    assert not ray.is_initialized()  # the Ray it started is stopped
    [record] = results(tmp_path / "out")
    assert (record["id"], record["outcome"], record["check"]["passed"]) == (
        "charlie", "completed", True)  # fmt: skip
    assert provider.asked_by("charlie") == 3
    assert any(ray_dir.rglob("*.log")) or any(ray_dir.rglob("*.out"))  # Ray ran in ray_dir


# ------------------------------------------------------------------------------- cost limits
@pytest.mark.slow
def test_max_cost_limits_each_task_and_max_total_cost_starts_no_task_past_it(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call reports 10 in / 5 out tokens: $0.000105 at Claude Sonnet's price."""
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS)
    per_task = tmp_path / "per-task"
    with TaskScripts(SCRIPTS) as provider:
        run_batch_cli(provider, tasks, per_task, "--max-cost", "0.0002", monkeypatch=monkeypatch)
    records = {r["id"]: r for r in results(per_task)}
    assert records["alpha"]["outcome"] == "cost_limit"  # a third call would pass $0.0002
    assert all(r["cost_usd"] <= 0.0002 for r in records.values())

    total = tmp_path / "total"
    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, total, "--max-total-cost", "0.0001",
                             monkeypatch=monkeypatch)  # fmt: skip
    assert code == 1
    assert [r["id"] for r in results(total)] == ["alpha"]  # it alone already cost more


def test_a_cost_limit_without_a_price_is_refused_before_anything_runs(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", TASKS)
    with TaskScripts(SCRIPTS) as provider:
        code = run_batch_cli(provider, tasks, tmp_path / "out", "--model", "my-local-model",
                             "--max-total-cost", "1", monkeypatch=monkeypatch)  # fmt: skip
        assert provider.requests == []
    err = capsys.readouterr().err
    assert code == 2 and "none is known for model 'my-local-model'" in err


def steady(record: dict[str, Any]) -> dict[str, Any]:
    """A result without what varies from run to run: times (the task's, its checks')."""
    timeless = {k: v for k, v in record.items() if k != "elapsed_seconds"}
    for key in ("check", "baseline"):
        if isinstance(timeless.get(key), dict):
            timeless[key] = {k: v for k, v in timeless[key].items() if k != "seconds"}
    return timeless


# ----------------------------------------------------------------------------- at scale
@pytest.mark.slow
def test_a_batch_of_20_survives_ctrl_c_and_kill_9_and_resumes_to_the_end(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    twenty = [{"id": f"t{n:02d}", "repo": "repo", "task": f"[twenty] task {n}"}
              for n in range(20)]  # fmt: skip
    tasks = write_tasks(tmp_path / "tasks.jsonl", twenty)
    out = tmp_path / "out"
    script = {"twenty": [xml_action("write_file", path="done.txt", content="x\n"), done()]}
    args = ("--tasks-file", str(tasks), "--out", str(out), "--workers", "4", "--sandbox", "off",
            "--output", "json")  # fmt: skip
    argv = toy_agent(*args)

    def worktrees() -> int:
        return git("worktree", "list", "--porcelain", cwd=sources["repo"]).count("worktree ")

    # A temporary folder of its own: any batch removes the scratch folders killed batches left
    # in its temporary folder, so another test's batch (or another checkout's) running now
    # in the shared one could take the copies the kill leaves before the third run does.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with TaskScripts(script, delays={"twenty": 0.2}, wire="openai") as provider:
        env = cli_environment({**quickest_provider_env(provider), "TMPDIR": str(scratch)})
        # Ctrl-C: the JSON summary still comes, interrupted, with nothing "from an earlier run"
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)  # fmt: skip
        wait_until(lambda: (out / "results.jsonl").exists()
                   and len(results(out)) >= 2, "two results")  # fmt: skip
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        summary = json.loads(stdout)
        first = len(results(out))
        assert summary["interrupted"] is True and summary["skipped"] == 0
        assert summary["ran"] == first and 2 <= first < 20 and summary["total"] == 20
        assert worktrees() == 1

        # kill -9: its scratch folder and the copies in it stay behind
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)  # fmt: skip

        def its_copies() -> list[Path]:
            return [folder for folder in scratch.glob("toy-agent-batch-*")
                    if (folder / "owner").exists()
                    and (folder / "owner").read_text().split()[0] == str(proc.pid)
                    and any((folder / "copies").glob("t*"))]  # fmt: skip

        wait_until(lambda: its_copies() and len(results(out)) > first, "a running copy")
        (left,) = its_copies()
        proc.kill()
        proc.communicate(timeout=30)
        second = len(results(out))
        assert left.exists()

        # the next run removes them, and does exactly the rest (in this process: nothing it
        # shows needs one of its own; its temporary folder is the scratch one, as theirs)
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        done_run = run_main(capsys, *args, env={**quickest_provider_env(provider),
                                                "TMPDIR": str(scratch)})  # fmt: skip
    assert done_run.returncode == 0, done_run.stderr
    summary = json.loads(done_run.stdout)
    assert summary["skipped"] == second and summary["ran"] == 20 - second
    assert summary["passed"] == 20 and summary["interrupted"] is False
    assert sorted(r["id"] for r in results(out)) == [t["id"] for t in twenty]
    assert "left by a batch that was killed" in done_run.stderr and not left.exists()
    assert worktrees() == 1


def test_task_timeout_stops_a_stuck_agent_records_its_work_and_the_batch_goes_on(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    from fakes import BlockingLlm

    from toy_agent import run_batch

    stuck = BlockingLlm()
    clients = iter([stuck, ScriptedLlm(xml_action("write_file", path="a.txt", content="a\n"),
                                       done())])  # fmt: skip
    tasks = [{"id": "stuck", "repo": str(sources["plain"]), "task": "t"},
             {"id": "fine", "repo": str(sources["plain"]), "task": "t"}]  # fmt: skip
    settings = RunSettings(make_llm=lambda: next(clients), sandbox="off", task_timeout=0.5)
    summary = finishes(lambda: run_batch(tasks, tmp_path / "out", settings))
    stuck.release.set()
    by_id = {r["id"]: r for r in summary.records}
    assert by_id["stuck"]["outcome"] == "timeout" and not by_id["stuck"]["success"]
    assert "--task-timeout: stopped after 0.5s" in by_id["stuck"]["error"]
    assert by_id["fine"]["outcome"] == "completed" and by_id["fine"]["success"]
    assert summary.interrupted is False


@pytest.mark.slow
def test_a_setup_runs_once_before_the_agent_and_stays_out_of_the_patch(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    from toy_agent import run_batch

    setup = "mkdir -p .venv && echo x > .venv/marker && echo built > build.txt"
    tasks = [{"id": "set", "repo": str(sources["repo"]), "task": "t", "setup": setup,
              "check": "test -f build.txt && test -f mine.txt"},
             {"id": "broken", "repo": str(sources["repo"]), "task": "t",
              "setup": "echo no compiler >&2; exit 3"}]  # fmt: skip
    clients = iter([ScriptedLlm(xml_action("write_file", path="mine.txt", content="m\n"),
                                done())])  # fmt: skip
    settings = RunSettings(make_llm=lambda: next(clients), sandbox="off")
    summary = run_batch(tasks, tmp_path / "out", settings)
    by_id = {r["id"]: r for r in summary.records}
    assert by_id["set"]["resolved"] is True  # the check saw the setup's build.txt
    assert [f["path"] for f in by_id["set"]["files_changed"]] == ["mine.txt"]
    patch = (tmp_path / "out" / by_id["set"]["patch"]).read_text()
    assert "build.txt" not in patch and ".venv" not in patch
    assert by_id["broken"]["outcome"] == "error"
    assert "setup exited with 3" in by_id["broken"]["error"]
    assert "no compiler" in by_id["broken"]["error"]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_the_agent_can_use_git_in_its_copy_without_writing_to_the_source(
    sources: dict[str, Path], tmp_path: Path, sandbox: str
) -> None:
    from toy_agent import run_batch

    before = snapshot(sources["repo"])
    script = "; ".join([
        "echo changed > hello.py", "git diff HEAD --stat", "git log --oneline",
        "git stash", "git stash list", "git stash pop", "git checkout -- hello.py",
        "git status --short", "echo new > added.txt", "true",
    ])  # fmt: skip
    settings = RunSettings(
        make_llm=lambda: ScriptedLlm(xml_action("run_command", command=script), done()),
        allow_commands=True, sandbox=sandbox,
    )  # fmt: skip
    summary = run_batch([{"id": "g", "repo": str(sources["repo"]), "task": "t"}],
                        tmp_path / "out", settings)  # fmt: skip
    trajectory = json.loads((tmp_path / "out" / "trajectories" / "g.json").read_text())
    output = json.dumps(trajectory)
    assert "hello.py | 2 +-" in output and "base" in output  # git diff HEAD, git log
    if sandbox == "off":  # the copy's .git is its own: stash and checkout work in it
        assert "stash@{0}" in output and "Dropped refs/stash" in output
        assert [f["path"] for f in summary.records[0]["files_changed"]] == ["added.txt"]
    assert snapshot(sources["repo"]) == before  # no stash, no worktree, nothing in the source


def test_line_and_paragraph_separators_inside_a_record_keep_it_one_line(tmp_path: Path) -> None:
    """U+2028, U+2029 and NEL stay raw inside a JSON string (ensure_ascii=False, ours and many
    tools'), and are no line ends of JSON Lines: a task line that holds them is one task, and
    a result whose check printed them is read back whole (the resume does not run it again,
    the report reads it)."""
    from toy_agent.batch.driver import run_batch
    from toy_agent.record import task_results

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    odd = "out\u2028put\u2029\x85end"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "repo": str(repo), "task": f"say {odd}",
                                 "check": f"printf '{odd}'; false"}, ensure_ascii=False) + "\n",
                     encoding="utf-8")  # fmt: skip
    settings = RunSettings(make_llm=lambda: ScriptedLlm(done()))
    run_batch(tasks, tmp_path / "out", replace(settings, check_retries=0), quiet=True)
    lines = (tmp_path / "out" / "results.jsonl").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 2 and odd in lines[0]  # one record, and its newline

    run_batch(tasks, tmp_path / "out", RunSettings(make_llm=ScriptedLlm), quiet=True)  # no reply
    [result] = task_results(tmp_path / "out" / "results.jsonl")
    assert result.id == "t1" and result.check is not None and odd in result.check.output_tail
    assert len((tmp_path / "out" / "results.jsonl").read_text().split("\n")) == 2


def test_a_result_line_edited_into_no_result_is_run_again_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from toy_agent.batch.driver import run_batch

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    tasks = [{"id": "t1", "repo": str(repo), "task": "t"}, {"id": "t2", "repo": str(repo),
                                                           "task": "t"}]  # fmt: skip
    run_batch(tasks, tmp_path / "out", RunSettings(make_llm=lambda: ScriptedLlm(done())),
              quiet=True)  # fmt: skip
    path = tmp_path / "out" / "results.jsonl"
    kept = [line for line in path.read_text().splitlines() if '"t2"' in line]
    path.write_text('{"id": "t1"}\n' + kept[0] + "\n")

    asked: list[str] = []
    summary = run_batch(tasks, tmp_path / "out", RunSettings(
        make_llm=lambda: asked.append("t") or ScriptedLlm(done())), quiet=True)  # fmt: skip
    assert asked == ["t"] and summary.skipped == 1  # t1 again, t2 kept
    assert "1 unreadable line" in caplog.text
    assert sorted(r["id"] for r in results(tmp_path / "out")) == ["t1", "t2"]


def test_a_second_batch_on_a_folder_in_use_stops_at_once_and_the_first_goes_on(
    tmp_path: Path,
) -> None:
    from toy_agent.batch.driver import run_batch

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    tasks = [{"id": "t1", "repo": str(repo), "task": "t"}]
    blocking = BlockingLlm()
    settings = RunSettings(make_llm=lambda: blocking)
    first = threading.Thread(target=run_batch, args=(tasks, tmp_path / "out", settings),
                             kwargs={"quiet": True})  # fmt: skip
    first.start()
    try:
        assert blocking.called.wait(30)
        in_use = rf"--out .*out is in use by another batch \(pid {os.getpid()}\)"
        with pytest.raises(BatchError, match=in_use):
            run_batch(tasks, tmp_path / "out", RunSettings(make_llm=ScriptedLlm), quiet=True)
    finally:
        blocking.release.set()
        first.join(30)
    assert [r["id"] for r in results(tmp_path / "out")] == ["t1"]  # once, by the first
    run_batch(tasks, tmp_path / "out", RunSettings(make_llm=ScriptedLlm), quiet=True)  # free again
