"""Running one shell command for run_command and batch checks, leaving nothing behind.

No stdin, no pager, only allow-listed variables; only the head and tail of the output are
kept, and the command's whole process group is killed when it ends.
"""

from __future__ import annotations

import os
import subprocess
import threading
import typing
from collections.abc import Mapping
from pathlib import Path

from toy_agent import cuts
from toy_agent.environment import child_environment
from toy_agent.sandbox import SandboxPolicy, owned_process_group, sandbox_environment

OUTPUT_HEAD_BYTES = 8_000
OUTPUT_TAIL_BYTES = 8_000
_COMMAND_ENV = {
    "PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "NO_COLOR": "1", "CLICOLOR": "0",
    "GIT_TERMINAL_PROMPT": "0", "DEBIAN_FRONTEND": "noninteractive",
}  # fmt: skip


def run_shell(
    command: str,
    cwd: Path,
    timeout: int,
    *,
    policy: SandboxPolicy | None = None,
    named: Mapping[str, str] | None = None,
) -> tuple[int, str, bool]:
    """(exit code, head+tail of the output, timed out). No stdin, no pager, no colour; the
    environment is the allow-listed one plus the variables the user `named` (see
    toy_agent.environment.child_environment). The command leads its own session, and the whole
    group is killed when it ends, times out or is interrupted (KeyboardInterrupt: Ctrl-C, or
    SIGTERM through the CLI); in bwrap's PID namespace that includes what escaped the group."""
    argv, env = ["/bin/sh", "-c", command], child_environment(_COMMAND_ENV, named=named)
    if policy is not None:
        argv, env = policy.argv() + argv, sandbox_environment(env, policy)
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    with owned_process_group(proc):
        assert proc.stdout is not None  # stdout=PIPE
        capture = _OutputCapture(proc.stdout)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
    capture.join(timeout=2)  # a process that left the group (setsid) may still hold the pipe
    return proc.returncode, capture.text(), timed_out


class _OutputCapture(threading.Thread):
    """Reads a pipe to the end keeping only its head and tail, so endless output is cheap."""

    def __init__(self, stream: typing.IO[bytes]):
        super().__init__(daemon=True)
        self.stream = stream
        self.head, self.tail = bytearray(), bytearray()
        self.total_bytes = self.total_lines = 0
        self.start()

    def run(self) -> None:
        fd = self.stream.fileno()
        while chunk := os.read(fd, 65536):
            self.total_bytes += len(chunk)
            self.total_lines += chunk.count(b"\n")
            room = OUTPUT_HEAD_BYTES - len(self.head)
            self.head += chunk[:room]
            self.tail += chunk[room:] if room > 0 else chunk
            del self.tail[:-OUTPUT_TAIL_BYTES]
        self.stream.close()

    def text(self) -> str:
        head, tail = bytes(self.head), bytes(self.tail)
        dropped = self.total_bytes - len(head) - len(tail)
        if dropped <= 0:
            return (head + tail).decode("utf-8", "replace")
        head, tail = head[: cuts.utf8_head(head)], tail[cuts.utf8_tail(tail) :]  # whole chars
        dropped = self.total_bytes - len(head) - len(tail)
        dropped_lines = self.total_lines - head.count(b"\n") - tail.count(b"\n")
        what = f"{cuts.amount(dropped, 'byte')} ({cuts.amount(dropped_lines, 'line')})"
        return (
            head.decode("utf-8", "replace")
            + f"\n{cuts.note(what, cuts.how_to_see_more('run_command'))}\n"
            + tail.decode("utf-8", "replace")
        )
