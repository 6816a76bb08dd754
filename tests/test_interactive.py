"""The interactive prompt in a real terminal (tmux): pastes, new lines, history, Ctrl-C; and
its commands (/cost, /model, /compact, /sessions, /help)."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import quickest_provider_env, run_cli, run_main, toy_agent
from fake_providers import FakeProvider, Reply, gemini_reply, openai_reply
from fakes import ScriptedLlm, wait_until, write_replay, xml_action
from test_sessions import sessions_dir

from toy_agent.cli import main
from toy_agent.messages import LlmResponse, Message, ToolCall, ToolResult, Usage
from toy_agent.sessions import compact_conversation

pytestmark = pytest.mark.slow  # see pyproject's markers


def saved_sessions(home: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sessions_dir(home).glob("*.json"))]


class Tmux:
    """toy-agent in a real terminal emulator: tmux draws what it prints and sends it keys and
    pastes as a terminal does (a bracketed paste only once the program asked for them)."""

    count = itertools.count()

    def __init__(self, tmp_path: Path, args: list[str], env: dict[str, str]):
        if shutil.which("tmux") is None:
            pytest.skip("tmux is not installed (apt-get install tmux): the prompt's paste, "
                        "history and Ctrl-C tests need a real terminal emulator")  # fmt: skip
        self.socket = str(tmp_path / f"tmux-{next(Tmux.count)}.sock")  # one server each
        # The shell waits for toy-agent and writes its exit code (tmux may be slow to reap
        # it); it only traps Ctrl-C, so toy-agent gets it as from a shell prompt.
        self.status = tmp_path / f"exit-code-{next(Tmux.count)}"
        command = shlex.join(toy_agent(*args))
        self.modes = [tmp_path / f"stty-{n}" for n in ("before", "after")]
        before, after, status = (shlex.quote(str(p)) for p in (*self.modes, self.status))
        script = (f"trap true INT; stty -g > {before}; {command}; code=$?; "
                  f"stty -g > {after}; echo $code > {status}")  # fmt: skip
        environ = {**os.environ, "NO_COLOR": "1", **env}
        environ.pop("TMUX", None)
        environ.pop("PYTHONUNBUFFERED", None)  # as a person's shell starts it: stdout buffered
        # Everything the pane prints is also appended to `printed`: the waits below look at
        # the screen again each time it grows, rather than every so often.
        self.printed = tmp_path / f"printed-{next(Tmux.count)}"
        self.printed.touch()
        self.tmux("new-session", "-d", "-s", "t", "-x", "150", "-y", "50", script, ";",
                  "set-option", "-t", "t", "remain-on-exit", "on", ";",
                  "pipe-pane", "-t", "t", f"cat >> {shlex.quote(str(self.printed))}",
                  env=environ)  # fmt: skip

    def tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True,
                              text=True, timeout=30, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    @property
    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")

    def expect(self, wanted: str, count: int = 1, timeout: float = 30) -> str:
        """Wait until `wanted` shows `count` times on the screen (and its scrollback)."""
        return self._wait(lambda screen: screen.count(wanted) >= count,
                          f"{wanted!r} x{count}", timeout)  # fmt: skip

    def prompt(self, timeout: float = 30) -> str:
        """Wait for an empty prompt on the last line (tmux drops the space after `>`)."""
        return self._wait(lambda screen: screen.rstrip().splitlines()[-1:] == [">"],
                          "an empty prompt", timeout)  # fmt: skip

    def _wait(self, done: Callable[[str], bool], what: str, timeout: float) -> str:
        """The screen once `done(screen)`: read again whenever the pane printed something
        (and every 0.2 s in any case), so a wait ends as soon as what it waits for shows."""
        deadline = time.monotonic() + timeout
        printed, looked = -1, 0.0
        while True:
            now, size = time.monotonic(), self.printed.stat().st_size
            if size != printed or now - looked > 0.2:
                printed, looked = size, now
                if done(screen := self.screen):
                    return screen
                if now > deadline:
                    raise AssertionError(f"never saw {what}; the screen:\n{screen}")
            time.sleep(0.005)

    def keys(self, *keys: str) -> None:
        """tmux key names: Enter, C-c, Escape, Up..."""
        self.tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)

    def enter(self, line: str) -> None:
        """Type `line`, then press Enter."""
        self.tmux("send-keys", "-t", "t", "-l", line, ";", "send-keys", "-t", "t", "Enter")

    def end(self) -> int:
        """At the next empty prompt, Ctrl-D; toy-agent's exit code."""
        self.prompt()
        self.keys("C-d")
        return self.exit_code()

    def paste(self, text: str) -> None:
        self.tmux("set-buffer", "-b", "p", "--", text)
        self.tmux("paste-buffer", "-p", "-b", "p", "-t", "t")

    def exit_code(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while not self.status.exists() or not self.status.read_text().strip():
            if time.monotonic() > deadline:
                raise AssertionError(f"toy-agent did not exit; the screen:\n{self.screen}")
            time.sleep(0.005)
        before, after = (p.read_text() for p in self.modes)
        assert before == after, "toy-agent left the terminal's modes changed"
        return int(self.status.read_text())

    def unread(self) -> int:
        """How many bytes of whole lines typed wait in the terminal for a program to read."""
        tty = self.tmux("display", "-p", "-t", "t", "#{pane_tty}").strip()
        fd = os.open(tty, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        finally:
            os.close(fd)

    @property
    def pid(self) -> int:
        """toy-agent's process id (the pane's process is the shell that waits for it)."""
        shell = self.tmux("display", "-p", "-t", "t", "#{pane_pid}").strip()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):  # a process that just ended
                if stat.read_text().rpartition(")")[2].split()[1] == shell:  # its parent
                    return int(stat.parent.name)
        raise AssertionError(f"no process under the pane's shell; the screen:\n{self.screen}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal(tmp_path):
    opened: list[Tmux] = []

    def start(args: list[str], env: dict[str, str]) -> Tmux:
        opened.append(Tmux(tmp_path, args, env))
        return opened[-1]

    yield start
    for tmux in opened:
        tmux.close()


def quick_done(answer: str) -> Reply:
    """A task's answer from the OpenAI-compatible fake: for terminals where the provider is
    incidental (its SDK starts in half the time of Anthropic's)."""
    return openai_reply(xml_action("task_complete", result=answer))


def no_model(tmp_path: Path) -> list[str]:
    """Flags for a session that asks no model anything: a replay, which starts no SDK."""
    return replaying(tmp_path)


def replaying(tmp_path: Path, *answers: str) -> list[str]:
    """Flags for a session whose model is a replay (which starts no SDK) that completes a task
    with each of `answers` in turn: for terminals where what answers is incidental."""
    replies = [xml_action("task_complete", result=answer) for answer in answers]
    recording = tmp_path / f"replay-{next(Tmux.count)}.json"
    return ["--replay", str(write_replay(recording, *replies))]


# --- the prompt -------------------------------------------------------------------------------


def test_a_pasted_text_of_many_lines_is_one_task(home, repo, terminal):
    pasted = "Fix the greeting in hello.py.\nIt says helo.\n\nThen say what you changed."
    with FakeProvider() as server:
        server.enqueue(quick_done("Pasted task done."))
        term = terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.prompt()
        term.paste(pasted)
        term.expect("Then say what you changed.")
        assert "Pasted task done." not in term.screen  # the paste's lines did not submit it
        term.keys("Enter")
        term.expect("Pasted task done.")
        assert term.end() == 0

    assert len(server.requests) == 1
    assert pasted in server.requests[0].body["messages"][1]["content"]
    [session] = saved_sessions(home)
    assert [run["task"] for run in session["runs"]] == [pasted]


def test_a_paste_larger_than_the_context_budget_is_not_sent(home, repo, terminal, tmp_path):
    pasted = "a log line\n" * 600
    term = terminal(["--repo", str(repo), "--context-budget", "1000", *no_model(tmp_path)], {})
    term.prompt()
    term.paste(pasted)
    term.keys("Enter")
    term.expect("more than the context budget of 1,000 tokens")
    assert "not sent: the task is 7 KB" in term.screen
    assert term.end() == 0
    assert saved_sessions(home) == []  # no task ran


def test_a_trailing_backslash_or_alt_enter_starts_a_new_line(home, repo, terminal, tmp_path):
    term = terminal(["--repo", str(repo), *replaying(tmp_path, "Three lines read.")], {})
    term.prompt()
    term.enter("first line\\")
    term.type("second line")
    term.keys("Escape", "Enter")
    term.enter("third line")
    term.expect("Three lines read.")
    term.prompt()
    term.enter("/exit")
    assert term.exit_code() == 0

    [session] = saved_sessions(home)
    assert [run["task"] for run in session["runs"]] == ["first line\nsecond line\nthird line"]


def test_up_recalls_the_task_of_an_earlier_session_and_the_history_is_private(
    home, repo, terminal, tmp_path
):
    term = terminal(["--repo", str(repo), *replaying(tmp_path, "First.")], {})
    term.prompt()
    term.enter("count the lines of hello.py")
    term.expect("First.")
    assert term.end() == 0
    term.close()

    term = terminal(["--repo", str(repo), *replaying(tmp_path, "Again.")], {})
    term.prompt()
    term.keys("Up")
    term.expect("count the lines of hello.py")
    term.keys("Enter")
    term.expect("Again.")
    assert term.end() == 0

    history = home / "state" / "toy-agent" / "history"
    assert history.stat().st_mode & 0o777 == 0o600
    first, second = saved_sessions(home)
    assert first["runs"][0]["task"] == second["runs"][0]["task"] == "count the lines of hello.py"


def test_ctrl_c_cancels_a_task_and_what_is_typed_next_runs(home, repo, terminal):
    with FakeProvider() as server:
        server.enqueue(Reply(delay=30, body=openai_reply("late").body), quick_done("Quick one."))
        term = terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.prompt()
        term.enter("a slow task")
        wait_until(lambda: server.requests, "the task's first request")
        term.keys("C-c")
        term.expect("cancelled")
        term.enter("/cost")
        term.expect("this session: 1 task")
        term.enter("a quick task")
        term.expect("Quick one.")
        term.prompt()
        term.type("half a line")
        term.expect("> half a line")
        term.keys("C-c")  # at the prompt: clears the line, the session goes on
        assert term.end() == 0

    [session] = saved_sessions(home)
    assert [(r["task"], r["outcome"]) for r in session["runs"]] == [
        ("a slow task", "cancelled"), ("a quick task", "completed")]  # fmt: skip


def test_sigterm_at_the_prompt_ends_the_session_with_143_and_restores_the_terminal(
    home, repo, terminal, tmp_path
):
    term = terminal(["--repo", str(repo), *no_model(tmp_path)], {})
    term.prompt()
    term.type("half a task")
    term.expect("> half a task")
    os.kill(term.pid, signal.SIGTERM)
    assert term.exit_code() == 143  # and the modes are as before (exit_code checks)


class HoldingFirstReply(FakeProvider):
    """Answers its first request only once `release` is set (or 30 s passed): a task that
    runs for exactly as long as the test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def reply_to(self, request):
        reply = super().reply_to(request)
        if len(self.requests) == 1:
            self.release.wait(30)
        return reply


def test_what_is_typed_while_a_task_runs_is_the_next_task_and_not_echoed_onto_its_live_line(
    home, repo, terminal
):
    with HoldingFirstReply() as server:
        server.enqueue(quick_done("Slow one."), quick_done("Typed ahead."))
        term = terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.prompt()
        term.enter("a slow task")
        wait_until(lambda: server.requests, "the task's first request")
        tty = term.tmux("display", "-p", "-t", "t", "#{pane_tty}").strip()
        modes = subprocess.run(["stty", "-F", tty, "-a"], capture_output=True, text=True,
                               timeout=30).stdout.split()  # fmt: skip
        assert "-echo" in modes and "icanon" in modes  # not shown, yet kept line by line
        term.enter("typed while it ran")
        # the keys wait in the terminal, unread, for the next prompt
        wait_until(lambda: term.unread() == len("typed while it ran\n"), "the keys to arrive")
        assert "Slow one." not in term.screen  # the keys came while the task ran
        server.release.set()
        term.expect("Typed ahead.")  # what was typed is the next task
        assert term.end() == 0  # and the terminal's modes are as before

    [session] = saved_sessions(home)
    assert [r["task"] for r in session["runs"]] == ["a slow task", "typed while it ran"]


# --- the commands -----------------------------------------------------------------------------


def test_help_lists_every_command_and_an_unknown_one_names_them(home, repo, terminal, tmp_path):
    term = terminal(["--repo", str(repo), *no_model(tmp_path)], {})
    term.prompt()
    term.enter("/help")
    screen = term.expect("/exit")
    for command in ("/diff", "/undo", "/cost", "/model NAME", "/compact", "/sessions",
                    "/clear", "/help"):  # fmt: skip
        assert f"\n  {command} " in screen
    term.prompt()
    term.enter("/frobnicate")
    screen = term.expect("unknown command /frobnicate: the commands are /diff, /undo")
    assert "/sessions, /clear, /help, /exit" in screen
    assert term.end() == 0
    assert saved_sessions(home) == []  # no command reached the model as a task


def test_a_bang_line_runs_as_run_command_would_and_its_output_can_join_the_next_task(
    home, repo, terminal
):
    with FakeProvider() as server:
        server.enqueue(quick_done("Seen."))
        term = terminal(["--repo", str(repo), "--allow-commands", "--sandbox", "off",
                         "--deny-command", "rm*"], quickest_provider_env(server))  # fmt: skip
        term.prompt()
        term.enter("!rm hello.py")
        term.expect("! refused: the command `rm hello.py` matches the user's deny rule `rm*`")
        term.prompt()
        term.enter("!echo made > made.txt; cat hello.py made.txt")
        term.expect("add this to the conversation for the next task? [y/N]")
        screen = term.screen
        assert "[exit code 0" in screen and "print('helo')\nmade" in screen
        term.enter("y")
        term.expect("added: the next task comes with it")
        term.prompt()
        term.enter("!ls")
        term.expect("add this to the conversation for the next task? [y/N]", count=2)
        term.enter("n")
        term.prompt()
        term.enter("what did the command print?")
        term.expect("Seen.")
        assert term.end() == 0

    assert (repo / "hello.py").exists() and (repo / "made.txt").read_text() == "made\n"
    assert len(server.requests) == 1  # no ! line went to the model
    task = server.requests[0].body["messages"][1]["content"]
    assert "(The user ran a shell command; what it printed:)\n$ echo made > made.txt" in task
    assert "print('helo')\nmade" in task and task.endswith("what did the command print?")
    assert "$ ls" not in task  # declined
    [session] = saved_sessions(home)
    [run] = session["runs"]  # one task: the ! lines were not tasks
    assert run["note"] + "\n\n" + run["task"] == task  # the task as typed, the note apart


def test_plan_plans_read_only_then_carries_the_plan_out_in_the_mode_picked(home, repo, terminal):
    plan = "1. fix helo in hello.py"
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(xml_action("write_file", path="hello.py", content="x")),
            quick_done(plan),
            openai_reply(
                xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello")
            ),  # fmt: skip
            quick_done("Fixed."),
        )
        term = terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.prompt()
        term.enter("/plan fix the greeting")
        term.expect("Carry out this plan? edits, auto or ask")
        assert (repo / "hello.py").read_text() == "print('helo')\n"  # planning changed nothing
        term.enter("edits")
        term.expect("Fixed.")
        assert term.end() == 0

    assert (repo / "hello.py").read_text() == "print('hello')\n"
    assert "this run is read-only (--permission-mode plan)" in json.dumps(
        server.requests[1].body["messages"]
    )
    [plan_file] = (home / "state" / "toy-agent" / "plans").glob("*.md")
    assert plan_file.read_text() == plan + "\n"
    carry_out = server.requests[2].body["messages"][-1]["content"]
    assert f"The user approved your plan (saved in {plan_file})" in carry_out


def test_cost_adds_up_the_tokens_and_dollars_of_the_session(home, repo, terminal):
    usage = Usage(1000, 200)
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(xml_action("read_file", path="hello.py"), usage=usage),
            openai_reply(xml_action("task_complete", result="Read it."), usage=usage),
        )
        term = terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.prompt()
        term.enter("/cost")
        term.expect("this session: 0 tasks, 0 in, 0 out tokens, $0")
        term.enter("read hello.py")
        term.expect("Read it.")
        term.prompt()
        term.enter("/cost")
        # gpt-5-mini: $0.25 per million input tokens, $2 per million output tokens
        term.expect("this session: 1 task, 2,000 in, 400 out tokens, $0.0013 "
                    "(model gpt-5-mini)")  # fmt: skip
        assert term.end() == 0


def test_model_switches_the_next_tasks_to_a_model_and_the_provider_its_name_implies(
    home, repo, terminal
):
    with FakeProvider() as openai, FakeProvider() as gemini:
        openai.enqueue(quick_done("From GPT."))
        gemini.enqueue(gemini_reply(xml_action("task_complete", result="From Gemini.")))
        env = {**quickest_provider_env(openai), **gemini.env("gemini")}
        term = terminal(["--repo", str(repo), "--max-cost", "5"], env)
        term.prompt()
        term.enter("first task")
        term.expect("From GPT.")
        for typed, said in [
            ("/model claude-sonnet-5-5", "/model claude-sonnet-5-5: ANTHROPIC_API_KEY is not "
             "set: export it or put it in .env, or pick a gemini model (its key is set); "
             "still openai"),
            ("/model rm -rf", "/model rm -rf: not a model name"),
            ("/model llama3.2", "/model llama3.2: no price is known for it, and this session "
             "has a cost limit to keep: pick a model with a known price; still openai"),
            ("/model", "model gpt-5-mini (openai)"),
            ("/model gemini-2.5-pro", "model gemini-2.5-pro (gemini) for the next tasks"),
        ]:  # fmt: skip
            term.prompt()
            term.enter(typed)
            term.expect(said)
        term.prompt()
        term.enter("second task")
        term.expect("From Gemini.")
        assert term.end() == 0

    assert len(openai.requests) == 1
    [request] = gemini.requests
    assert "/models/gemini-2.5-pro:" in request.path
    assert "first task" in json.dumps(request.body)  # the conversation went along
    [session] = saved_sessions(home)
    assert session["settings"]["model"] == "gemini-2.5-pro"


def test_compact_replaces_the_older_steps_by_the_models_summary(home, repo, terminal):
    (repo / "big.py").write_text("x = 1\n" * 2000)  # 12,000 characters read three times
    summary = "Read big.py three times: it sets x = 1, 2000 times."
    with FakeProvider() as server:
        server.enqueue(
            *[openai_reply(xml_action("read_file", path="big.py")) for _ in range(3)],
            quick_done("Read it thrice."),
            openai_reply(summary),
            quick_done("Still here."),
        )
        term = terminal(["--repo", str(repo)], quickest_provider_env(server))
        term.prompt()
        term.enter("read big.py three times")
        term.expect("Read it thrice.")
        term.prompt()
        term.enter("/compact")
        screen = term.expect("saved")
        term.prompt()
        term.enter("go on")
        term.expect("Still here.")
        assert term.end() == 0

    assert "compacted 8 messages into 6" in screen
    summary_request = server.requests[4].body
    assert summary_request["messages"][0]["role"] == "system"
    assert "summarise" in summary_request["messages"][0]["content"]
    assert "read big.py three times" in json.dumps(summary_request["messages"])
    after = json.dumps(server.requests[5].body["messages"])
    assert summary in after and "read big.py three times" in after
    assert after.count("x = 1") < 2 * 2000  # the first read went into the summary
    [session] = saved_sessions(home)
    [record] = session["compactions"]
    assert record["messages_before"] == 8 and record["messages_after"] == 6
    saved = record["tokens_before"] - record["tokens_after"]
    assert saved > 1000 and f"{saved:,} saved" in screen
    assert record["usage"] == Usage(10, 5).to_dict()
    assert session["usage"]["input_tokens"] == 6 * 10  # the summary's call counts too


def test_sessions_lists_the_recent_sessions(home, repo, terminal, tmp_path):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    for task in ("an earlier task\nwith a second line", "the latest task"):
        assert main(["--repo", str(repo), "--replay", str(replay), "--task", task]) == 0
    term = terminal(["--repo", str(repo), *no_model(tmp_path)], {})
    term.prompt()
    term.enter("/sessions")
    screen = term.expect("an earlier task")
    assert term.end() == 0
    listing = screen[screen.index("/sessions") :]
    assert listing.index("the latest task") < listing.index("an earlier task")
    assert "with a second line" not in listing
    assert listing.count("completed") == 2
    ids = [s["id"] for s in saved_sessions(home) if s["runs"]]
    assert len(ids) == 2 and all(i in listing for i in ids)


# --- finding a session again ------------------------------------------------------------------


def two_sessions(home: Path, tmp_path: Path, repo: Path) -> list[dict]:
    """A session in another repository, then one in `repo`: their saved files, oldest first."""
    other = tmp_path / "other"
    other.mkdir()
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    for where, task in ((other, "tidy the other repository"), (repo, "fix the greeting")):
        assert main(["--repo", str(where), "--replay", str(replay), "--task", task]) == 0
        time.sleep(0.05)  # distinct file times: the listing is newest first
    return sorted(saved_sessions(home), key=lambda s: s["repo"] == str(repo.resolve()))


def test_resume_without_an_id_picks_a_session_from_a_list_on_a_terminal(
    home, repo, tmp_path, terminal
):
    sessions = two_sessions(home, tmp_path, repo)
    other = next(s for s in sessions if s["repo"] != str(repo))
    term = terminal(["--resume", *no_model(tmp_path)], {})
    screen = term.expect("resume which session? 1-2 (Enter: none):")
    assert screen.index("fix the greeting") < screen.index("tidy the other repository")
    term.enter("7")
    term.expect("type a number from 1 to 2")
    term.enter("2")
    term.expect(f"session {other['id']} (2 messages so far)")
    assert term.end() == 0
    resumed = next(s for s in saved_sessions(home) if s["id"] == other["id"])
    assert len(resumed["runs"]) == 1  # no task ran: picking asked the model nothing


def test_resume_without_an_id_and_without_a_terminal_lists_the_sessions_and_exits_2(
    home, repo, tmp_path
):
    sessions = two_sessions(home, tmp_path, repo)
    proc = run_cli("--resume")
    assert proc.returncode == 2 and proc.stdout == ""
    for session in sessions:
        assert session["id"] in proc.stderr
    assert "tidy the other repository" in proc.stderr and "completed" in proc.stderr
    assert proc.stderr.strip().endswith("pass --resume ID, with an id from the list above")
    mine = run_cli("--resume", "--repo", str(repo))  # --repo: only its sessions
    assert mine.returncode == 2 and "fix the greeting" in mine.stderr
    assert "tidy the other" not in mine.stderr


def test_the_sessions_command_lists_shows_and_deletes(home, repo, tmp_path, capsys):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_main(capsys, *args)  # `sessions` only reads and deletes files

    older, newer = two_sessions(home, tmp_path, repo)
    listed = run("sessions")
    assert listed.returncode == 0 and listed.stderr == ""
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["id", "updated", "outcome", "repository", "task"]
    assert newer["id"] in lines[1] and older["id"] in lines[2]
    as_json = [json.loads(line) for line in run("sessions", "list", "--json").stdout.splitlines()]
    assert [s["id"] for s in as_json] == [newer["id"], older["id"]]
    assert as_json[0] | {"updated_at": ""} == {
        "id": newer["id"], "updated_at": "", "repo": str(repo.resolve()),
        "task": "fix the greeting", "tasks": 1, "outcome": "completed"}  # fmt: skip

    shown = run("sessions", "show", newer["id"])
    assert shown.returncode == 0
    assert f"repo      {repo.resolve()}" in shown.stdout
    assert "task 1: [completed] fix the greeting" in shown.stdout
    assert json.loads(run("sessions", "show", newer["id"], "--json").stdout)["id"] == newer["id"]

    (sessions_dir(home) / "undo").mkdir(exist_ok=True)
    undo = sessions_dir(home) / "undo" / f"{newer['id']}.json"
    undo.write_text("{}")
    deleted = run("sessions", "delete", newer["id"], "no-such-session")
    assert deleted.returncode == 2
    assert deleted.stdout == f"deleted {newer['id']}\n"
    assert (
        deleted.stderr == f"toy-agent: error: no session no-such-session in {sessions_dir(home)}\n"
    )
    assert not undo.exists()
    assert [s["id"] for s in saved_sessions(home)] == [older["id"]]

    for bad in (["sessions", "show", "../../etc/passwd"], ["sessions", "frob"]):
        proc = run(*bad)
        assert proc.returncode == 2 and proc.stderr.startswith("toy-agent: error: ")
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_old_sessions_are_pruned_with_their_undo_data_by_the_configured_rule(home, repo, tmp_path):
    store = sessions_dir(home)
    (store / "undo").mkdir(parents=True)
    day = 86400
    ages = {"a-recent": 0.5 * day, "b-old": 3 * day, "c-older": 4 * day, "d-oldest": 5 * day}
    for name, age in ages.items():
        for path in (store / f"{name}.json", store / "undo" / f"{name}.json"):
            path.write_text("{}")
            os.utime(path, (time.time() - age, time.time() - age))
    config = home / "config" / "toy-agent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("sessions_keep = 2\nsessions_keep_days = 3.5\n")
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    assert main(["--repo", str(repo), "--replay", str(replay), "--task", "anything"]) == 0

    # kept: the newest two (the new session and a-recent), and any saved in the last 3.5 days
    [new] = [s["id"] for s in saved_sessions(home) if s != {}]
    assert {p.stem for p in store.glob("*.json")} == {new, "a-recent", "b-old"}
    assert {p.stem for p in (store / "undo").glob("*.json")} == {"a-recent", "b-old"}


# --- /compact's cut, through the LlmClient seam -----------------------------------------------


def native_conversation(steps: int) -> list[Message]:
    """A native-tool-calling conversation: the task, then `steps` call/result pairs."""
    messages = [Message("user", "the task")]
    for i in range(steps):
        call = ToolCall("read_file", {"path": f"f{i}.py"}, f"call_{i}")
        messages += [Message("assistant", f"step {i}", tool_calls=(call,)),
                     Message("user", "", tool_results=(ToolResult(call.id, call.name,
                                                                  "x" * 4000),))]  # fmt: skip
    return messages


@pytest.mark.parametrize("steps", [3, 4, 7])
def test_compact_keeps_the_task_and_whole_latest_steps_so_no_result_loses_its_call(steps):
    llm = ScriptedLlm("The summary.")
    messages = native_conversation(steps)
    compacted = compact_conversation(messages, llm, budget_tokens=100_000)
    assert compacted is not None
    head, *kept = compacted.messages
    assert head.role == "user" and head.content.startswith("the task\n\n")
    assert head.content.endswith("The summary.")
    assert kept == messages[len(messages) - len(kept) :]  # the latest steps, untouched
    assert kept[0].role == "assistant" and len(kept) >= 4
    roles = [m.role for m in compacted.messages]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # roles alternate
    calls = {c.id for m in kept for c in m.tool_calls}
    assert all(r.call_id in calls for m in kept for r in m.tool_results)
    [request] = llm.requests
    assert request["tools"] is None and "step 0" in request["messages"][0].content
    assert compacted.saved == compacted.tokens_before - compacted.tokens_after > 0


def test_a_conversation_of_the_task_and_its_latest_steps_has_nothing_to_compact():
    llm = ScriptedLlm()  # asking it anything would fail the test
    assert compact_conversation(native_conversation(2), llm, budget_tokens=100_000) is None
    assert llm.requests == []


def test_a_summary_no_shorter_is_dropped_but_its_call_is_recorded(tmp_path, repo):
    from toy_agent.sessions import Session, SessionRecorder, SessionStore
    from toy_agent.tools import CodeRepositoryTools

    store = SessionStore(tmp_path / "sessions")
    messages = native_conversation(4)
    session = Session("s1", str(repo), messages=[m.to_dict() for m in messages])
    recorder = SessionRecorder(store, session, CodeRepositoryTools(repo), lambda: messages)
    llm = ScriptedLlm(LlmResponse("y" * 100_000, usage=Usage(700, 900)))
    assert recorder.compact(llm, 100_000) is None
    saved = json.loads(store.path(session).read_text())
    assert saved["messages"] == [m.to_dict() for m in messages]  # unchanged
    [record] = saved["compactions"]
    assert record["applied"] is False and record["usage"]["output_tokens"] == 900
    assert saved["usage"] == Usage(700, 900).to_dict()
