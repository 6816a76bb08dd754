"""Sessions: the interactive mode on a real terminal, continue and resume across processes,
the session files, undo, and the project's instructions in the system prompt."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import subprocess
import termios
import time
from pathlib import Path

import pytest
from cli_helpers import quickest_provider_env, run_cli, run_main, toy_agent
from fake_providers import FakeProvider, Reply, anthropic_reply, openai_reply
from fakes import ScriptedLlm, finishes, native_call, wait_until, write_replay, xml_action

from toy_agent import ReactAgent
from toy_agent.cli import main
from toy_agent.config import MAX_INSTRUCTIONS_BYTES
from toy_agent.events import TRAJECTORY_FORMAT
from toy_agent.messages import LlmResponse, ToolCall
from toy_agent.sessions import (
    NothingToUndo,
    SessionRecorder,
    SessionStore,
    undo_last_run,
    undo_latest_in_repo,
)
from toy_agent.tools import CodeRepositoryTools


def sessions_dir(home: Path) -> Path:
    return home / "state" / "toy-agent" / "sessions"


def sent_text(request) -> str:
    return json.dumps(request.body)


# --- the interactive mode, on a pseudo-terminal ---------------------------------------------


class Terminal:
    """toy-agent on a pseudo-terminal it controls, so Ctrl-C (\\x03) is the real thing."""

    ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")

    def __init__(self, args: list[str], env: dict[str, str]):
        self.controller, terminal = pty.openpty()
        self.proc = subprocess.Popen(
            toy_agent(*args), stdin=terminal, stdout=terminal,
            stderr=terminal, env={**os.environ, "TERM": "xterm", **env}, close_fds=True,
            start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )  # fmt: skip
        os.close(terminal)
        self.raw = b""
        self.seen = 0  # what expect() has matched up to

    @property
    def text(self) -> str:
        return self.ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def expect(self, wanted: str, timeout: float = 30) -> str:
        """Wait for `wanted` after the last match; return the text up to it."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.text.find(wanted, self.seen)
            if found >= 0:
                before, self.seen = self.text[self.seen : found], found + len(wanted)
                return before
            ready, _, _ = select.select([self.controller], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):  # OSError: the child closed the terminal
                    self.raw += os.read(self.controller, 65536)
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {wanted!r}; the terminal shows:\n{self.text}")

    def type(self, text: str) -> None:
        os.write(self.controller, text.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(30)
        finally:
            os.close(self.controller)


@pytest.mark.slow
def test_an_interactive_session_continues_the_conversation_and_undoes_a_task(home, repo):
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(
                xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello")
            ),  # fmt: skip
            openai_reply(xml_action("task_complete", result="Fixed the greeting.")),
            openai_reply(
                xml_action("write_file", path="tests/test_hello.py", content="import hello\n")
            ),  # fmt: skip
            openai_reply(xml_action("task_complete", result="Added a test.")),
        )
        term = Terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.expect("/help for commands")
        term.expect(">")
        term.type("fix the greeting\n")
        term.expect("Fixed the greeting.")
        term.expect(">")
        term.type("now add a test for it\n")
        term.expect("Added a test.")
        term.expect(">")

        first_request_of_task_two = sent_text(server.requests[2])
        assert "fix the greeting" in first_request_of_task_two
        assert "print('hello')" in first_request_of_task_two  # the first task's observation
        assert "Fixed the greeting." in first_request_of_task_two
        assert (repo / "tests" / "test_hello.py").exists()

        term.type("/diff\n")
        assert "+import hello" in term.expect("\n>")
        term.type("/undo\n")
        assert "removed tests/test_hello.py" in term.expect("\n>")
        assert not (repo / "tests").exists()  # the folder the task made goes too
        term.type("/undo\n")
        assert "restored hello.py" in term.expect("\n>")
        assert (repo / "hello.py").read_text() == "print('helo')\n"
        term.type("/exit\n")
        assert term.close() == 0

    [session_file] = sessions_dir(home).glob("*.json")
    session = json.loads(session_file.read_text())
    assert session["repo"] == str(repo.resolve())
    assert [run["task"] for run in session["runs"]] == ["fix the greeting",
                                                        "now add a test for it"]  # fmt: skip
    assert all(run["undone"] for run in session["runs"])


@pytest.mark.slow
def test_ctrl_c_cancels_the_task_in_flight_and_returns_to_the_prompt(home, repo):
    with FakeProvider() as server:
        server.enqueue(
            Reply(delay=30, body=openai_reply("late").body),
            openai_reply(xml_action("task_complete", result="Second answer.")),
        )
        term = Terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.expect(">")
        term.type("a slow task\n")
        wait_until(lambda: server.requests, "the task's first request")
        term.type("\x03")
        term.expect("cancelled")
        term.expect(">")
        term.type("a quick task\n")
        term.expect("Second answer.")
        term.expect(">")
        term.type("\x04")  # Ctrl-D ends the session
        assert term.close() == 0

    assert len(server.requests) == 2
    assert "a slow task" in sent_text(server.requests[1])  # still part of the conversation


@pytest.mark.slow
def test_without_a_terminal_and_without_a_task_the_exit_code_is_two(home, repo):
    proc = run_cli("--repo", str(repo))
    assert proc.returncode == 2
    assert "--task is required" in proc.stderr


# --- continue and resume, across processes --------------------------------------------------


@pytest.mark.slow
def test_continue_and_resume_carry_the_conversation_into_a_new_process(
    home, repo, tmp_path, capsys
):
    trajectory = tmp_path / "first.json"
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(
                xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello")
            ),  # fmt: skip
            openai_reply(xml_action("task_complete", result="Fixed.")),
            openai_reply(xml_action("task_complete", result="It prints hello.")),
            openai_reply(xml_action("task_complete", result="Resumed.")),
            openai_reply(xml_action("task_complete", result="From the trajectory.")),
        )
        env = quickest_provider_env(server)
        # The first run only leaves the files: in this process; the others are new processes.
        first = run_main(capsys, "--repo", str(repo), "--task", "fix the greeting", "--output",
                         "json", "--trajectory", str(trajectory), env=env)  # fmt: skip
        assert first.returncode == 0, first.stderr
        session_id = json.loads(first.stdout)["session"]
        assert (sessions_dir(home) / f"{session_id}.json").is_file()

        second = run_cli("--repo", str(repo), "-c", "--task", "what does it print now?",
                         "--output", "json", env=env)  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout)["session"] == session_id
        continued = sent_text(server.requests[2])
        assert "fix the greeting" in continued and "print('hello')" in continued
        assert continued.index("fix the greeting") < continued.index("what does it print now?")

        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()  # --resume ID works from any folder: the session knows its repo
        third = run_cli("--resume", session_id, "--task", "and now?", "--output", "json",
                        cwd=elsewhere, env=env)  # fmt: skip
        assert third.returncode == 0, third.stderr
        resumed = sent_text(server.requests[3])
        assert "what does it print now?" in resumed and "and now?" in resumed

        fourth = run_cli("--repo", str(repo), "--resume", str(trajectory), "--task",
                         "explain the fix", "--output", "json", env=env)  # fmt: skip
        assert fourth.returncode == 0, fourth.stderr
        from_trajectory = sent_text(server.requests[4])
        assert "fix the greeting" in from_trajectory and "print('hello')" in from_trajectory
        assert "what does it print now?" not in from_trajectory
        assert json.loads(fourth.stdout)["session"] != session_id  # a new session from it

    saved = json.loads((sessions_dir(home) / f"{session_id}.json").read_text())
    assert [run["task"] for run in saved["runs"]] == [
        "fix the greeting", "what does it print now?", "and now?"]  # fmt: skip


def test_a_file_from_elsewhere_does_not_choose_the_repository_by_itself(
    home, repo, tmp_path, capsys, monkeypatch
):
    """A session or trajectory file can come from anyone: the repository it names is used
    only where the user is, or when the user names it with --repo. What it names is shown
    with its control characters escaped."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shared = tmp_path / "shared.json"
    reply = write_replay(tmp_path / "reply.json", xml_action("task_complete", result="ok"))

    def resume(recorded: str, *extra: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        shared.write_text(json.dumps({"format": TRAJECTORY_FORMAT, "task": "earlier",
                                      "steps": [], "settings": {"repo": recorded}}))  # fmt: skip
        monkeypatch.chdir(cwd)  # main() in this process: it reads only files and the folder
        return run_main(capsys, "--llm-provider", "replay", "--replay", str(reply), "--resume",
                        str(shared), "--task", "go on", *extra)  # fmt: skip

    refused = resume(str(elsewhere), cwd=repo)
    assert refused.returncode == 2
    assert f"the file names the repository {elsewhere}; pass --repo {elsewhere}" in refused.stderr
    assert resume(str(elsewhere), cwd=elsewhere).returncode == 0  # where the user is
    assert resume(str(elsewhere), "--repo", str(repo), cwd=tmp_path).returncode == 0

    hostile = resume("/nowhere\x1b]52;c;aGk=\x07", cwd=repo)  # a clipboard write, if printed
    assert hostile.returncode == 2
    assert "/nowhere\\x1b]52;c;aGk=\\x07 is gone" in hostile.stderr


def test_continue_without_a_saved_session_is_a_usage_error(home, repo, tmp_path, capsys):
    replay = tmp_path / "r.json"
    steps = [{"response": LlmResponse(xml_action("task_complete", result="ok")).to_dict()}]
    replay.write_text(json.dumps({"steps": steps}))
    assert main(["--repo", str(repo), "-c", "--task", "x", "--replay", str(replay)]) == 2
    assert "no saved session" in capsys.readouterr().err


def test_a_continued_conversation_is_fitted_to_the_context_budget(home, repo):
    (repo / "big.txt").write_text("word " * 20_000)
    store = SessionStore()
    tools = CodeRepositoryTools(repo)
    llm = ScriptedLlm(
        xml_action("read_file", path="big.txt"),
        xml_action("task_complete", result="read it"),
        xml_action("list_files"),
        xml_action("read_file", path="hello.py"),
        xml_action("task_complete", result="done"),
    )
    sessions = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, context_budget=500, on_event=sessions)
    agent.run_result("read big.txt")
    agent.run_result("now something else", history=store.load(sessions.session.id).history())

    sent = json.dumps([m.to_dict() for m in llm.requests[-1]["messages"]])
    assert "read big.txt" in sent and "elided" in sent
    assert "word " * 1000 not in sent


def test_the_session_is_saved_after_every_step(home, repo):
    store = SessionStore()
    tools = CodeRepositoryTools(repo)
    seen: list[dict] = []

    class Peeking(ScriptedLlm):
        def call_llm(self, system_prompt, messages, *, tools=None, on_text=None):
            seen.extend(json.loads(p.read_text()) for p in store.root.glob("*.json"))
            return super().call_llm(system_prompt, messages, tools=tools, on_text=on_text)

    llm = Peeking(xml_action("list_files"), xml_action("task_complete", result="ok"))
    sessions = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, on_event=sessions)
    agent.run_result("look around")

    assert seen and seen[-1]["runs"][0]["outcome"] == "running"
    assert "list_files" in json.dumps(seen[-1]["messages"])  # the first step, already on disk


def test_native_calls_left_open_by_a_finished_task_are_answered_when_it_continues(repo):
    llm = ScriptedLlm(
        native_call(("task_complete", {"result": "first"})),
        native_call(("task_complete", {"result": "second"})),
    )
    agent = ReactAgent(llm, repo, tool_format="native")
    agent.run_result("first task")
    agent.run_result("second task", history=agent.conversation_history)

    # The old call gets its result, and an assistant turn closes that loop before the new task:
    # a result travelling with the new task would keep the old loop open.
    answer, closing, task = llm.requests[1]["messages"][-3:]
    assert [r.call_id for r in answer.tool_results] == ["call_0"] and not answer.content
    assert closing.role == "assistant" and not closing.tool_calls
    assert task.content == "second task" and not task.tool_results


@pytest.mark.parametrize(
    ("fmt", "action", "observation"),
    [
        ("xml", '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "hello.py"}',
         "<OBSERVATION>\n"),
        ("react", 'Action: read_file\nAction Input: {"path": "hello.py"}', "Observation: "),
    ],
)  # fmt: skip
def test_a_native_conversation_continued_in_a_text_format_is_rewritten_in_that_format(
    repo, fmt, action, observation
):
    first = ScriptedLlm(
        native_call(("read_file", {"path": "hello.py"}), text="Look at it."),
        native_call(("task_complete", {"result": "read"})),
    )
    native = ReactAgent(first, repo, tool_format="native")
    native.run_result("read the greeting")
    llm = ScriptedLlm(xml_action("task_complete", result="again") if fmt == "xml"
                      else "Thought: done\nFinal Answer: again")  # fmt: skip
    ReactAgent(llm, repo, tool_format=fmt).run_result(
        "and now?", history=native.conversation_history
    )

    sent = llm.requests[0]["messages"]
    assert not any(m.tool_calls or m.tool_results for m in sent)  # no tools offered to answer
    assert [m.role for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert "Look at it." in sent[1].content and action in sent[1].content
    assert sent[2].content.startswith(observation) and "print('helo')" in sent[2].content
    assert "task_complete" in sent[3].content and sent[4].content == "and now?"


def test_continue_in_xml_after_a_native_run_sends_the_provider_no_tool_blocks(
    home, repo, tmp_path, capsys
):
    """Anthropic rejects tool_use blocks in a request that offers no tools. The native run
    is a replay of Claude's replies (its session holds the same calls and results)."""
    native = tmp_path / "native.json"
    steps = [LlmResponse("Look.", tool_calls=(ToolCall("read_file", {"path": "hello.py"},
                         "toolu_1"),), stop_reason="tool_use"),
             LlmResponse("", tool_calls=(ToolCall("task_complete", {"result": "read"},
                         "toolu_2"),), stop_reason="tool_use")]  # fmt: skip
    native.write_text(json.dumps({"steps": [{"response": s.to_dict()} for s in steps]}))
    first = run_main(capsys, "--repo", str(repo), "--task", "read it", "--tool-format", "native",
                     "--replay", str(native))  # fmt: skip
    assert first.returncode == 0, first.stderr
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(xml_action("task_complete", result="again")))
        second = run_main(capsys, "--repo", str(repo), "-c", "--task", "and now?",
                          "--tool-format", "xml", env=server.env("claude"))  # fmt: skip
        assert second.returncode == 0, second.stderr

    body = server.requests[0].body
    assert "tools" not in body
    blocks = [b for m in body["messages"] for b in m["content"]]
    assert {b["type"] for b in blocks} == {"text"}
    assert "<tool_name>read_file</tool_name>" in sent_text(server.requests[0])


# --- undo -----------------------------------------------------------------------------------


def edit_run(repo: Path, *replies: str, task: str = "edit") -> SessionStore:
    store = SessionStore()
    tools = CodeRepositoryTools(repo)
    sessions = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(ScriptedLlm(*replies), tools=tools, on_event=sessions)
    agent.run_result(task)
    return store


def test_undo_refuses_when_a_file_changed_since_the_run(home, repo, capsys):
    edit_run(repo, xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
             xml_action("write_file", path="notes.txt", content="new\n"),
             xml_action("task_complete", result="ok"))  # fmt: skip
    (repo / "hello.py").write_text("print('edited by hand')\n")

    assert main(["--undo", "--repo", str(repo)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "hello.py" in err and "changed since" in err
    assert (repo / "hello.py").read_text() == "print('edited by hand')\n"
    assert (repo / "notes.txt").exists()  # nothing was reverted

    (repo / "hello.py").write_text("print('hello')\n")  # as the run left it: undo may go on
    assert main(["--undo", "--repo", str(repo)]) == 0
    assert (repo / "hello.py").read_text() == "print('helo')\n"
    assert not (repo / "notes.txt").exists()


def test_a_huge_file_a_run_replaced_is_never_read_and_undo_says_no_copy_was_kept(
    home, repo, capsys
):
    """A sparse terabyte: backing it up, or hashing it to see whether it changed, would read
    it all. Its size and times stand for its hash; no copy is kept, so undo refuses."""
    huge = repo / "huge.log"
    with huge.open("wb") as f:
        f.write(b"x\n")
        f.truncate(1 << 40)
    replace = xml_action("write_file", path="huge.log", content="small\n")
    finishes(lambda: edit_run(repo, replace, xml_action("task_complete", result="ok")), 30)

    assert main(["--undo", "--repo", str(repo)]) == 1
    assert "no copy was kept of huge.log (larger than 8 MB)" in capsys.readouterr().err
    assert huge.read_text() == "small\n"


def test_undo_goes_back_one_run_at_a_time_and_restores_bytes_exactly(home, repo):
    (repo / "data.bin").write_bytes(b"caf\xe9 in latin-1\r\n")
    edit_run(repo, xml_action("write_file", path="data.bin", content="text now"),
             xml_action("task_complete", result="ok"), task="first")  # fmt: skip
    edit_run(repo, xml_action("write_file", path="data.bin", content="text again"),
             xml_action("task_complete", result="ok"), task="second")  # fmt: skip
    store = SessionStore()

    assert undo_latest_in_repo(store, repo).task == "second"
    assert (repo / "data.bin").read_text() == "text now"
    assert undo_latest_in_repo(store, repo).task == "first"
    assert (repo / "data.bin").read_bytes() == b"caf\xe9 in latin-1\r\n"
    with pytest.raises(NothingToUndo):
        undo_latest_in_repo(store, repo)


def test_undo_tells_the_model_with_the_next_task(home, repo):
    store = edit_run(repo, xml_action("write_file", path="a.txt", content="A"),
                     xml_action("task_complete", result="ok"))  # fmt: skip
    session = store.latest(repo.resolve())
    undo_last_run(store, session)
    llm = ScriptedLlm(xml_action("task_complete", result="ok"))
    tools = CodeRepositoryTools(repo)
    agent = ReactAgent(llm, tools=tools)
    recorder = SessionRecorder(store, store.latest(repo.resolve()), tools,
                               lambda: agent.conversation_history)  # fmt: skip
    agent.run_result(recorder.task("next"), history=recorder.session.history())
    assert "reverted the file changes" in llm.requests[0]["messages"][-1].content


def test_a_declined_or_failed_write_leaves_nothing_to_undo(home, repo, capsys):
    edit_run(repo, xml_action("edit_file", path="hello.py", old_str="absent", new_str="x"),
             xml_action("task_complete", result="ok"))  # fmt: skip
    assert main(["--undo", "--repo", str(repo)]) == 1
    assert "nothing to undo" in capsys.readouterr().err


def test_an_unreadable_latest_session_stops_undo_and_continue_instead_of_an_older_one(
    home, repo, tmp_path, capsys
):
    """A cut-off session file (a full disk, a hand edit) may be the latest of the repository:
    --undo and --continue refuse with one line naming it, instead of acting on an older run;
    the listing shows it as unreadable. One that still names another repository is no bar."""
    (repo / "b.txt").write_text("b0\n")
    for name, task in (("hello.py", "first"), ("b.txt", "second")):
        replay = write_replay(tmp_path / f"{task}.json", xml_action(
            "write_file", path=name, content=f"by {task}\n"),
            xml_action("task_complete", result="ok"))  # fmt: skip
        ran = run_main(capsys, "--repo", str(repo), "--replay", str(replay), "--task", task)
        assert ran.returncode == 0, ran.stderr
        time.sleep(0.02)  # the second session is the later file
    latest = max(sessions_dir(home).glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    latest.write_text(latest.read_text()[:1500])  # truncated mid-way

    for args in (["--undo"], ["-c", "--task", "go on", "--replay", str(replay)]):
        refused = run_main(capsys, "--repo", str(repo), *args)
        assert refused.returncode == 2, refused.stderr
        err = refused.stderr.strip()
        assert err.splitlines() == [err] and f"cannot read {latest}" in err
        assert f"sessions delete {latest.stem}" in err and "--resume ID" in err
    assert (repo / "hello.py").read_text() == "by first\n"  # the older run was not undone
    [older] = (p for p in sessions_dir(home).glob("*.json") if p != latest)
    assert len(json.loads(older.read_text())["runs"]) == 1  # nor continued

    listing = run_main(capsys, "sessions", "list", "--json")
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    assert [(r["id"], r["outcome"]) for r in rows][0] == (latest.stem, "unreadable")
    assert rows[0]["repo"] == str(repo.resolve()) and f"cannot read {latest}" in rows[0]["error"]
    assert rows[1]["task"] == "first"

    other = sessions_dir(home) / "20990101-000000-abcdef.json"
    other.write_text(json.dumps({"format": "toy_agent.session/1", "repo": "/elsewhere"})[:-1])
    latest.unlink()
    assert run_main(capsys, "--undo", "--repo", str(repo)).returncode == 0
    assert (repo / "hello.py").read_text() == "print('helo')\n"


# --- project instructions -------------------------------------------------------------------


def test_agents_md_and_the_users_instructions_reach_the_system_prompt(
    home, repo, capsys, monkeypatch
):
    (repo / "AGENTS.md").write_text("Run `make check` before finishing.\n")
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(xml_action("task_complete", result="ok")))
        for name, value in server.env("claude").items():
            monkeypatch.setenv(name, value)
        code = main(["--repo", str(repo), "--task", "x", "--output", "json",
                     "--append-system-prompt", "Answer in French."])  # fmt: skip

    assert code == 0, capsys.readouterr().err
    system = json.dumps(server.requests[0].body["system"])
    assert "Run `make check` before finishing." in system
    assert "Answer in French." in system
    assert system.index("make check") < system.index("Answer in French.")


def test_a_long_agents_md_is_cut_and_the_prompt_says_so(home, repo):
    (repo / "AGENTS.md").write_text("rule\n" * (MAX_INSTRUCTIONS_BYTES // 4))
    llm = ScriptedLlm(xml_action("task_complete", result="ok"))
    from toy_agent.config import load_instructions

    tools = CodeRepositoryTools(repo)
    instructions = load_instructions(tools)
    ReactAgent(llm, tools=tools, instructions=instructions.text).run("x")

    system = llm.requests[0]["system"]
    assert instructions.source == "AGENTS.md (cut at 32 KB)"
    assert "AGENTS.md was cut here" in system
    assert system.count("rule") <= MAX_INSTRUCTIONS_BYTES // 5 + 1


def test_an_agents_md_linking_out_of_the_repository_is_not_read(home, repo, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the private key\n")
    (repo / "AGENTS.md").symlink_to(secret)
    from toy_agent.config import load_instructions

    assert load_instructions(CodeRepositoryTools(repo)).text == ""


@pytest.mark.slow
def test_the_live_views_first_line_names_agents_md(home, repo, tmp_path):
    (repo / "AGENTS.md").write_text("Be brief.\n")
    replay = tmp_path / "r.json"
    steps = [{"response": LlmResponse(xml_action("task_complete", result="ok")).to_dict()}]
    replay.write_text(json.dumps({"steps": steps}))
    term = Terminal(["--repo", str(repo), "--replay", str(replay), "--task", "x"], {})
    first_line = term.expect("\n")
    assert "AGENTS.md" in first_line and first_line.startswith("toy-agent")
    assert term.close() == 0


def test_the_commands_table_lists_every_session_command():
    from toy_agent.interactive import COMMANDS

    text = (Path(__file__).resolve().parents[1] / "docs" / "sessions.md").read_text()
    table = text.split("\n### Commands\n", 1)[1].split("\n\n", 2)[0]
    documented = {row.split("`")[1].split()[0] for row in table.splitlines() if row[:3] == "| `"}
    assert documented == {name.split()[0] for name in COMMANDS}
