"""The interactive prompt in a real terminal (tmux): pastes, new lines, history, Ctrl-C; and
its commands (/cost, /model, /compact, /sessions, /help)."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_providers import FakeProvider, Reply, anthropic_reply, openai_reply
from fakes import xml_action

from toy_agent.messages import Usage

ROOT = Path(__file__).resolve().parents[1]
PROVIDER_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GEMINI_API_KEY",
                      "GOOGLE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")  # fmt: skip


@pytest.fixture
def home(tmp_path, monkeypatch):
    """State and config under tmp_path; no provider variables; a working folder of its own."""
    root = tmp_path / "home"
    for name, sub in (("HOME", ""), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(root / sub))
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return root


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "hello.py").write_text("print('helo')\n")
    return root


def sessions_dir(home: Path) -> Path:
    return home / "state" / "toy-agent" / "sessions"


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
        command = shlex.join([sys.executable, str(ROOT / "main.py"), *args])
        environ = {**os.environ, "NO_COLOR": "1", **env}
        environ.pop("TMUX", None)
        self.tmux("new-session", "-d", "-s", "t", "-x", "150", "-y", "50", command, ";",
                  "set-option", "-t", "t", "remain-on-exit", "on", env=environ)  # fmt: skip

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
        deadline = time.monotonic() + timeout
        while (screen := self.screen).count(wanted) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {wanted!r} x{count}; the screen:\n{screen}")
            time.sleep(0.1)
        return screen

    def prompt(self, timeout: float = 30) -> str:
        """Wait for an empty prompt on the last line (tmux drops the space after `>`)."""
        deadline = time.monotonic() + timeout
        while (screen := self.screen).rstrip().splitlines()[-1:] != [">"]:
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw an empty prompt; the screen:\n{screen}")
            time.sleep(0.1)
        return screen

    def keys(self, *keys: str) -> None:
        """tmux key names: Enter, C-c, Escape, Up..."""
        self.tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)

    def paste(self, text: str) -> None:
        self.tmux("set-buffer", "-b", "p", "--", text)
        self.tmux("paste-buffer", "-p", "-b", "p", "-t", "t")

    def exit_code(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}"
            dead, status, signal = self.tmux("display", "-p", "-t", "t", state).strip().split(":")
            assert not signal, f"killed by signal {signal}; the screen:\n{self.screen}"
            if dead == "1" and status:  # the status comes a moment after the end of output
                return int(status)
            time.sleep(0.1)
        raise AssertionError(f"toy-agent did not exit; the screen:\n{self.screen}")

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


def done(answer: str) -> Reply:
    return anthropic_reply(xml_action("task_complete", result=answer))


# --- the prompt -------------------------------------------------------------------------------


def test_a_pasted_text_of_many_lines_is_one_task(home, repo, terminal):
    pasted = "Fix the greeting in hello.py.\nIt says helo.\n\nThen say what you changed."
    with FakeProvider() as server:
        server.enqueue(done("Pasted task done."))
        term = terminal(["--repo", str(repo)], server.env("claude"))
        term.prompt()
        term.paste(pasted)
        term.expect("Then say what you changed.")
        assert "Pasted task done." not in term.screen  # the paste's lines did not submit it
        term.keys("Enter")
        term.expect("Pasted task done.")
        term.prompt()
        term.keys("C-d")
        assert term.exit_code() == 0

    assert len(server.requests) == 1
    assert pasted in server.requests[0].body["messages"][0]["content"][0]["text"]
    [session] = saved_sessions(home)
    assert [run["task"] for run in session["runs"]] == [pasted]


def test_a_trailing_backslash_or_alt_enter_starts_a_new_line(home, repo, terminal):
    with FakeProvider() as server:
        server.enqueue(done("Three lines read."))
        term = terminal(["--repo", str(repo)], server.env("claude"))
        term.prompt()
        term.type("first line\\")
        term.keys("Enter")
        term.type("second line")
        term.keys("Escape", "Enter")
        term.type("third line")
        term.keys("Enter")
        term.expect("Three lines read.")
        term.prompt()
        term.type("/exit")
        term.keys("Enter")
        assert term.exit_code() == 0

    [session] = saved_sessions(home)
    assert [run["task"] for run in session["runs"]] == ["first line\nsecond line\nthird line"]


def test_up_recalls_the_task_of_an_earlier_session_and_the_history_is_private(
    home, repo, terminal
):
    with FakeProvider() as server:
        server.enqueue(done("First."), done("Again."))
        term = terminal(["--repo", str(repo)], server.env("claude"))
        term.prompt()
        term.type("count the lines of hello.py")
        term.keys("Enter")
        term.expect("First.")
        term.prompt()
        term.keys("C-d")
        assert term.exit_code() == 0
        term.close()

        term = terminal(["--repo", str(repo)], server.env("claude"))
        term.prompt()
        term.keys("Up")
        term.expect("count the lines of hello.py")
        term.keys("Enter")
        term.expect("Again.")
        term.prompt()
        term.keys("C-d")
        assert term.exit_code() == 0

    history = home / "state" / "toy-agent" / "history"
    assert history.stat().st_mode & 0o777 == 0o600
    first, second = saved_sessions(home)
    assert first["runs"][0]["task"] == second["runs"][0]["task"] == "count the lines of hello.py"


def test_ctrl_c_cancels_a_task_and_what_is_typed_next_runs(home, repo, terminal):
    with FakeProvider() as server:
        server.enqueue(Reply(delay=30, body=anthropic_reply("late").body), done("Quick one."))
        term = terminal(["--repo", str(repo)], server.env("claude"))
        term.prompt()
        term.type("a slow task")
        term.keys("Enter")
        deadline = time.monotonic() + 30
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        term.keys("C-c")
        term.expect("cancelled")
        term.type("/cost")
        term.keys("Enter")
        term.expect("this session: 1 task")
        term.type("a quick task")
        term.keys("Enter")
        term.expect("Quick one.")
        term.prompt()
        term.type("half a line")
        term.expect("> half a line")
        term.keys("C-c")  # at the prompt: clears the line, the session goes on
        term.prompt()
        term.keys("C-d")
        assert term.exit_code() == 0

    [session] = saved_sessions(home)
    assert [(r["task"], r["outcome"]) for r in session["runs"]] == [
        ("a slow task", "cancelled"), ("a quick task", "completed")]  # fmt: skip


def test_what_is_typed_while_a_task_runs_is_the_next_task(home, repo, terminal):
    with FakeProvider() as server:
        server.enqueue(Reply(delay=3, body=done("Slow one.").body), done("Typed ahead."))
        term = terminal(["--repo", str(repo)], server.env("claude"))
        term.prompt()
        term.type("a slow task")
        term.keys("Enter")
        deadline = time.monotonic() + 30
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        term.type("typed while it ran")
        term.keys("Enter")
        term.expect("Typed ahead.")
        term.prompt()
        term.keys("C-d")
        assert term.exit_code() == 0

    [session] = saved_sessions(home)
    assert [r["task"] for r in session["runs"]] == ["a slow task", "typed while it ran"]
