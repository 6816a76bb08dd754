"""Running one shell command for run_command and batch checks, leaving nothing behind.

No stdin, no pager, no secrets (only allow-listed variables in its environment, and,
unsandboxed, none readable from the agent's process either); only the head and tail of the
output are kept, and every process of the command is killed when it ends.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import typing
from collections.abc import Callable, Mapping
from pathlib import Path

from toy_agent import cuts
from toy_agent.sandbox import (
    COMMAND_MARKER,
    SandboxPolicy,
    command_marker,
    owned_process_group,
    sandbox_environment,
)
from toy_agent.variables import child_environment

OUTPUT_HEAD_BYTES = 8_000
OUTPUT_TAIL_BYTES = 8_000
_COMMAND_ENV = {
    "PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "NO_COLOR": "1", "CLICOLOR": "0",
    "GIT_TERMINAL_PROMPT": "0", "DEBIAN_FRONTEND": "noninteractive",
}  # fmt: skip


def check_shell() -> str:
    """The shell checks run in: bash where it is there (`set -o pipefail`, `[[ ]]`, arrays
    work as in a terminal), else /bin/sh."""
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def run_shell(
    command: str,
    cwd: Path,
    timeout: float,
    *,
    policy: SandboxPolicy | None = None,
    named: Mapping[str, str] | None = None,
    shell: str = "/bin/sh",
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> tuple[int, str, bool]:
    """(exit code, head+tail of the output, timed out). No stdin, no pager, no colour; the
    environment is the allow-listed one plus the variables the user `named` (see
    toy_agent.variables.child_environment). The command leads its own session, and all its
    processes are killed when it ends, times out or is interrupted (KeyboardInterrupt: Ctrl-C,
    or SIGTERM through the CLI): in bwrap, its PID namespace; unsandboxed, its group, session
    and tree and the processes carrying its marker (toy_agent.sandbox.kill_command). `shell`
    runs the command; `wrap` puts it in a batch task's environment (a root or a container)."""
    argv, env = [shell, "-c", command], child_environment(_COMMAND_ENV, named=named)
    if wrap is not None:
        argv = wrap(argv)
    marker = None  # sandboxed, bwrap's PID namespace holds every process of the command
    if policy is not None:
        argv, env = policy.argv() + argv, sandbox_environment(env, policy)
    else:
        protect_agent_process()
        marker = command_marker()
        env[COMMAND_MARKER] = marker

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    timed_out = False
    with owned_process_group(start, marker=marker) as proc:
        assert proc.stdout is not None  # stdout=PIPE
        capture = _OutputCapture(proc.stdout)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
    capture.join(timeout=2)  # a process that left the group (setsid) may still hold the pipe
    return proc.returncode, capture.text(), timed_out


_PR_SET_DUMPABLE = 4  # prctl(2)
_ENV_START_FIELD = 50  # /proc/PID/stat's fields (proc(5), counted from 1): the environment block


@functools.cache
def protect_agent_process() -> None:
    """Keep an unsandboxed command, which runs as this user, from reading the agent's secrets
    out of the agent's own process (called before the first such command; once a process).

    The process becomes non-dumpable: its /proc/PID/environ, mem and maps, and ptrace, need
    CAP_SYS_PTRACE then, which only root has. And the variables commands do not get (provider
    keys and other secrets, see child_environment) are blanked with `*` in the environment
    block the kernel shows as /proc/PID/environ (os.environ and C's environ keep them), so
    even root reads no key there; root can still read the process's memory. Linux only."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # only here: most runs start no unsandboxed command

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    _blank_withheld_variables(child_environment())


def _blank_withheld_variables(kept: typing.Mapping[str, str]) -> None:
    """Overwrite the values of the variables not in `kept` in this process's original
    environment block (where the kernel put it at exec, which /proc/PID/environ reads), after
    pointing C's environ at a copy (setenv), so getenv and child processes still see them."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except OSError:
        return
    fields = stat[stat.rfind(b")") + 2 :].split()
    start, end = (int(fields[i - 3]) for i in (_ENV_START_FIELD, _ENV_START_FIELD + 1))
    if not start or end - start != len(block):
        return  # not the block the kernel describes (moved, or rewritten as a process title)
    offset = 0
    for entry in block.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        address = start + offset + len(name) + 1
        offset += len(entry) + 1
        key = os.fsdecode(name)
        if not equals or not value or key in kept:
            continue
        if key in os.environ:
            os.putenv(key, os.environ[key])  # C's environ now points at a copy
        if ctypes.string_at(address, len(value)) == value:
            ctypes.memset(address, ord("*"), len(value))


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
