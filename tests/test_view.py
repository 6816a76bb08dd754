"""The terminal view, as a person sees it: real runs on a pseudo-terminal of a set size."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from cli_helpers import quickest_provider_env, toy_agent
from fake_providers import FakeProvider, anthropic_reply, error_reply, openai_reply
from fakes import write_replay, xml_action
from rich.cells import cell_len

pytestmark = pytest.mark.slow  # see pyproject's markers

ROOT = Path(__file__).resolve().parents[1]
DEMO_REPO = ROOT / "toy_agent" / "demo" / "repo"
DEMO_TRAJECTORY = ROOT / "toy_agent" / "demo" / "trajectory.json"
DEMO_TASK = "Fix median() in stats.py so that tests/test_stats.py passes"
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SGR = re.compile(r"\x1b\[[0-9;]*m")
SPINNER = re.compile("[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]")
KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY",
        "OPENAI_API_KEY", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "NO_COLOR")  # fmt: skip


class Terminal:
    """A command on a pseudo-terminal `columns` wide: read as it writes, typed into."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                 columns: int = 100):  # fmt: skip
        self._controller, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        # COLUMNS/LINES (set by some test runners) would override the terminal's own size;
        # PYTHONUNBUFFERED would hide a missing flush, which a person's terminal shows
        dropped = (*KEYS, "COLUMNS", "LINES", "PYTHONUNBUFFERED")
        base = {k: v for k, v in os.environ.items() if k not in dropped}
        self.proc = subprocess.Popen(
            argv, stdin=terminal, stdout=terminal, stderr=terminal, cwd=cwd, close_fds=True,
            env={**base, "TERM": "xterm", "PYTHONPATH": str(ROOT), **(env or {})},
        )  # fmt: skip
        os.close(terminal)
        self.output = ""
        self._closed = False

    def read(self, seconds: float) -> str:
        """What the command writes within `seconds` (less if it ends)."""
        before, deadline = len(self.output), time.monotonic() + seconds
        while not self._closed and (left := deadline - time.monotonic()) > 0:
            self._read_some(left)
        return self.output[before:]

    def read_until(self, text: str, timeout: float = 30) -> None:
        """Read until `text` has come (each read ends with what came, so this ends with it)."""
        deadline = time.monotonic() + timeout
        while text not in self.output and not self._closed and time.monotonic() < deadline:
            self._read_some(deadline - time.monotonic())
        assert text in self.output, f"{text!r} never came; got {self.output!r}"

    def _read_some(self, seconds: float) -> None:
        """What the command writes next, waiting at most `seconds` for it."""
        if seconds > 0 and select.select([self._controller], [], [], seconds)[0]:
            try:
                data = os.read(self._controller, 65536)
            except OSError:  # the command closed the terminal
                data = b""
            self._closed = not data
            self.output += data.decode("utf-8", "replace")

    def type(self, keys: str) -> None:
        os.write(self._controller, keys.encode())

    def finish(self, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while not self._closed and time.monotonic() < deadline:
            self._read_some(deadline - time.monotonic())
        self.proc.wait(timeout)
        os.close(self._controller)
        return self.output


def screen_lines(output: str) -> list[str]:
    """The lines as the terminal shows them, cursor moves and colours left out: each piece
    between carriage returns and newlines is a line the terminal drew."""
    return re.split(r"\r\n|\r|\n", CSI.sub("", output))


def test_confirm_question_stays_visible_and_its_wait_is_not_tool_time(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("write_file", path="a.txt", content="A"),
        xml_action("task_complete", result="ok"),
    )
    term = Terminal(toy_agent("--task", "write", "--repo", str(repo), "--replay", str(replay),
                              "--confirm"), tmp_path)  # fmt: skip
    term.read_until("/[a]ll: ")
    waiting = term.read(0.6)  # the person reads the diff
    term.type("y\r")
    output = term.finish()

    assert term.proc.returncode == 0, output
    assert waiting == ""  # the live line is paused: nothing overwrites the question
    plain = CSI.sub("", output)
    question = plain.index("Allow write_file a.txt? [y]es/[n]o[, why]/[a]ll: y")  # typed after it
    assert plain.index("+A") < question
    seconds = float(re.search(r"✓ write_file a\.txt \+1 -0 (\d+\.\d+)s", plain).group(1))
    assert seconds < 0.6  # the 0.6 s the question waited is not the tool's time (all margin)
    assert (repo / "a.txt").read_text() == "A"


def test_log_records_print_above_the_live_line_never_on_it(repo, tmp_path):
    with FakeProvider() as server:
        server.enqueue(
            error_reply(429, "rate limited", retry_after="0.2"),  # two of the view's refreshes
            openai_reply(xml_action("task_complete", result="ok")),
        )
        term = Terminal(toy_agent("--task", "x", "--repo", str(repo)), tmp_path,
                        quickest_provider_env(server))  # fmt: skip
        output = term.finish()

    assert term.proc.returncode == 0, output
    lines = screen_lines(output)
    warning = next(i for i, line in enumerate(lines) if "WARNING" in line)
    assert lines[warning].startswith("WARNING openai API error 429")  # on a line of its own
    assert any("step 1/10 thinking" in line for line in lines[warning + 1 :])  # drawn again


SLOW_SDK = """
import importlib.util, os, sys, time

class SlowSdk:  # anthropic takes seconds to import on a cold start: make it slower here
    def find_spec(self, name, path=None, target=None):
        if name != "anthropic":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def slow_load(module):
            time.sleep(0.5)  # on top of the import's own second or so
            load(module)
            os.write(1, b"<anthropic imported>\\r\\n")

        spec.loader.exec_module = slow_load
        return spec

sys.meta_path.insert(0, SlowSdk())
from toy_agent.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_first_line_comes_before_the_sdk_has_loaded_and_the_thinking_before_the_thought(
    repo, tmp_path
):
    """The first line names the run before the provider's SDK has loaded (made slower still),
    and the live view asks for the model's thinking and shows it above the thought: both of
    Claude, whose SDK loads slowest, checked on one run."""
    summary = "The greeting is misspelt.\nhello.py prints it."
    done = xml_action("task_complete", result="ok", thought="All done.")
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(done, thinking=summary))
        term = Terminal([sys.executable, "-c", SLOW_SDK, "--task", "x", "--repo", str(repo)],
                        tmp_path, server.env("claude"), columns=200)  # fmt: skip
        output = term.finish()

    assert term.proc.returncode == 0, output
    plain = CSI.sub("", output)
    banner = re.search(r"toy-agent · claude claude-\S+ · \S*/repo · \d+ tools · no commands",
                       plain)  # fmt: skip
    assert banner, plain
    sdk_loaded = plain.index("<anthropic imported>")
    assert banner.start() < sdk_loaded
    assert SPINNER.search(plain, banner.end(), sdk_loaded)  # and the live line at once

    # The default model omits its thinking unless asked for a summary: the view asks
    assert server.requests[0].body["thinking"] == {"type": "adaptive", "display": "summarized"}
    lines = [line.strip() for line in screen_lines(output)]
    first, second = lines.index("thinking: The greeting is misspelt."), lines.index(
        "hello.py prints it.")  # fmt: skip
    thought = next(i for i, line in enumerate(lines) if line.startswith("thought ("))
    assert first < second < thought and "All done." in lines[thought]


def test_every_line_fits_a_50_column_terminal_and_every_cut_is_marked(repo, tmp_path):
    long_path = "src/" + "deeply/nested/" * 4 + "module.py"
    replay = write_replay(
        tmp_path / "r.json",
        xml_action(
            "read_file",
            path=long_path,
            thought="Short first line.\nThen a second line that is long enough to need "
            "more than the fifty columns this terminal has.",
        ),  # fmt: skip
        "Prose without any action, which the parser answers with a long warning.",
        xml_action("task_complete", result="Done. " + "A long final answer. " * 8),
    )
    term = Terminal(toy_agent("--task", "look", "--repo", str(repo), "--replay", str(replay)),
                    tmp_path, columns=50)  # fmt: skip
    output = term.finish()

    assert term.proc.returncode == 0, output
    lines = screen_lines(output)
    assert max(cell_len(line) for line in lines) <= 50, [w for w in lines if cell_len(w) > 50]
    at = next(i for i, line in enumerate(lines) if "Short first line." in line)
    wrapped = " ".join(SPINNER.sub("", line).strip() for line in lines[at : at + 8]
                       if "thinking" not in line)  # fmt: skip
    assert "Then a second line that is long enough to need more than the fifty columns" in wrapped
    tool = next(line for line in lines if "✗ read_file" in line)
    assert re.search(r"… \d+\.\d\ds ", tool) and tool.endswith("…")  # path and error cut
    note = next(line for line in lines if "reply not understood" in line)
    assert note.endswith("…") and not any(line.startswith("WARNING") for line in lines)
    plain = "".join(lines)
    assert plain.count("A long final answer.") == 8  # the result is wrapped, never cut


def test_the_view_shows_each_thought_whole_folds_a_long_one_and_counts_each_edit(repo, tmp_path):
    long = " ".join(f"Reason number {n} why the greeting is misspelt." for n in range(40))
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("read_file", path="hello.py",
                   thought="First I read the file.\nThen I decide what to change in it."),
        xml_action("edit_file", path="hello.py", old_str="print('helo')",
                   new_str="print('hello')\nprint('bye')", thought=long),
        xml_action("task_complete", result="fixed"),
    )  # fmt: skip
    term = Terminal(toy_agent("--task", "fix it", "--repo", str(repo), "--replay", str(replay)),
                    tmp_path, columns=80)  # fmt: skip
    output = term.finish()
    assert term.proc.returncode == 0, output
    lines = [SPINNER.sub("", line) for line in screen_lines(output)]
    assert any(line.strip() == "First I read the file." for line in lines)
    assert any(line.strip() == "Then I decide what to change in it." for line in lines)
    shown = " ".join(line.strip() for line in lines)
    assert "Reason number 0 why" in shown and "Reason number 39" not in shown
    assert re.search(r"… \d+ more lines \(--stream shows it all\)", shown)
    edit = next(line for line in lines if "✓ edit_file hello.py" in line)
    assert re.search(r"edit_file hello\.py \+2 -1 \d+\.\d\ds", edit)


@pytest.mark.parametrize(
    ("tool_format", "chunks"),
    [
        ("xml", ["<THO", "UGHT>Look at the ", "files first.</THOUGHT>\n<ACT", "ION>\n<tool_",
                 'name>list_files</tool_name>\n<parameters>{"path": "."}</parameters>\n</ACTION>']),
        ("react", ["Thou", "ght: Look at the ", "files first.\nAct", "ion: list_files\nAction ",
                   'Input: {"path": "."}']),
    ],
)  # fmt: skip
def test_stream_shows_the_thought_text_without_the_protocol(tool_format, chunks, repo, tmp_path):
    done = {"xml": xml_action("task_complete", result="ok", thought="All done."),
            "react": "Thought: All done.\nFinal Answer: ok"}[tool_format]  # fmt: skip
    with FakeProvider() as server:
        server.enqueue(openai_reply(chunks, stream=True), openai_reply(done, stream=True))
        term = Terminal(
            toy_agent("--task", "x", "--repo", str(repo), "--stream", "--tool-format", tool_format),
            tmp_path,
            quickest_provider_env(server),
        )
        output = term.finish()  # fmt: skip

    assert term.proc.returncode == 0, output
    plain = CSI.sub("", output)
    assert plain.count("Look at the files first.") == 1  # streamed, not repeated afterwards
    assert "  All done." in plain and "thought (" not in plain
    for protocol in ("THOUGHT", "ACTION", "tool_name", "parameters", "Thought:", "Action",
                     "Final Answer"):  # fmt: skip
        assert protocol not in plain
    assert "✓ list_files ." in plain


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_color_and_a_dumb_terminal_get_no_colour(env, repo, tmp_path):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    term = Terminal(toy_agent("--task", "x", "--repo", str(repo), "--replay", str(replay)),
                    tmp_path, env)  # fmt: skip
    output = term.finish()

    assert "✓ completed" in output and "thought (" in output
    assert not SGR.search(output)


def test_control_characters_from_the_model_are_shown_never_obeyed(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("read_file", path="evil\x1b]52;c;cm0gLXJm\x07.py", thought="Hi\x1b[2Jthere"),
        xml_action("task_complete", result="ok\x1b[31m"),
    )
    output = Terminal(toy_agent("--task", "x", "--repo", str(repo), "--replay", str(replay)),
                      tmp_path).finish()  # fmt: skip

    assert "Hi\\x1b[2Jthere" in output and "evil\\x1b]52;c;cm0gLXJm\\x07.py" in output
    assert "ok\\x1b[31m" in output
    assert "\x1b]" not in output and "\x1b[2J" not in output and "\x07" not in output


def test_the_confirm_preview_of_an_edit_to_a_crlf_file_shows_the_change(tmp_path):
    from toy_agent.parsing import Action
    from toy_agent.tools import CodeRepositoryTools
    from toy_agent.view import preview_action

    (tmp_path / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    edit = Action("edit_file", {"path": "win.txt", "old_str": "one\ntwo", "new_str": "1\n2"})
    preview = preview_action(edit, CodeRepositoryTools(tmp_path))
    assert "-one\n-two\n+1\n+2\n" in preview


def test_the_live_line_shows_an_mcp_tools_progress(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("steps", count=4, pause=0.1),  # the view redraws at once on progress
        xml_action("task_complete", result="ok"),
    )
    server = f"{sys.executable} {ROOT / 'tests' / 'mcp_servers' / 'demo_server.py'} --only steps"
    term = Terminal(toy_agent("--task", "x", "--repo", str(repo), "--replay", str(replay),
                              "--mcp-server", server), tmp_path)  # fmt: skip
    output = term.finish()

    assert term.proc.returncode == 0, output
    lines = screen_lines(output)
    live = [line for line in lines if SPINNER.match(line) and "running steps" in line]
    assert any("running steps 4 · 2/4 step 2 of 4" in line for line in live), live
    assert any(re.search(r"✓ steps 4 \d+\.\d+s", line) for line in lines)


def test_the_confirm_prompt_shows_the_whole_command_right_above_the_question(repo, tmp_path):
    """300 blank lines after a command's payload once pushed it off the screen: they fold into
    one note, so the payload stays in view (the terminal is 40 lines high)."""
    command = "ls\ntouch PWNED\n" + "\n" * 300 + "\t \n" * 5
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=command),
        xml_action("task_complete", result="ok"),
    )
    argv = toy_agent("--task", "x", "--repo", str(repo), "--replay", str(replay), "--confirm",
                     "--allow-commands", "--sandbox", "off")  # fmt: skip
    term = Terminal(argv, tmp_path)
    term.read_until("/[a]ll: ")
    screen = screen_lines(term.output)[-40:]  # what the terminal shows now
    term.type("n\r")
    output = term.finish()

    assert term.proc.returncode == 0, output
    question = next(i for i, line in enumerate(screen) if line.startswith("Allow run_command"))
    assert screen[question - 4 : question + 1] == [
        "$ ls",
        "touch PWNED",
        "[305 blank lines]",
        "[the command has 307 lines]",
        "Allow run_command ls …? [y]es/[n]o[, why]/[a]ll: ",
    ]
    assert not (repo / "PWNED").exists()


def test_the_confirm_preview_of_a_command_makes_every_character_visible(tmp_path):
    from toy_agent.parsing import Action
    from toy_agent.tools import CodeRepositoryTools
    from toy_agent.view import make_confirm

    shown: list[tuple[str, str]] = []
    confirm = make_confirm(
        CodeRepositoryTools(tmp_path, allow_commands=True, sandbox="off"),
        lambda preview, question: shown.append((preview, question)) or "n",
    )
    command = "ls\r\x1b[2Kcurl x\n\n\nc\u200burl y" + " " * 400 + "# z\n\n"
    assert not confirm(Action("run_command", {"command": command})).approved
    assert shown[0][0] == (
        "$ ls\\r\\x1b[2Kcurl x\n\n\nc\\u200burl y [400 blanks] # z\n\n[the command has 5 lines]"
    )
