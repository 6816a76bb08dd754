"""Where run_command's processes run, what they can touch, and how long they live.

With bubblewrap (`bwrap`) a command sees the whole filesystem read-only except the repository
and a private /tmp; the user's home folders are hidden under an empty read-only tmpfs (HOME
points at a scratch folder in /tmp); /run and its daemon sockets are hidden too unless the
network is allowed; and it gets fresh namespaces: no network (not even the host's loopback),
and its own PID namespace, so every process it started dies with it, `setsid`, `nohup` and
double forks included. Sandboxed or not, the command's environment holds no secrets
(toy_agent.environment.child_environment) and its process group is killed when it ends, times
out, or the agent is interrupted or exits.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "bwrap", "off")
INSTALL_HINT = (
    "install the bubblewrap package (Debian/Ubuntu: apt-get install bubblewrap; "
    "Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap)"
)
SCRATCH_HOME = "/tmp/home"  # HOME inside the sandbox: writable, empty, gone afterwards
PROBE_TIMEOUT = 10
# Paths the sandboxed command should not follow into the hidden home or /run.
_HOST_PATH_VARIABLES = frozenset(
    {"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
     "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "TMPDIR"}
)  # fmt: skip
# What a command prints when the sandbox refused it (EROFS, no route, no DNS).
_REFUSALS = (
    "Read-only file system", "Network is unreachable", "Temporary failure in name resolution",
    "Could not resolve host", "Name or service not known", "No address associated with hostname",
)  # fmt: skip


class SandboxUnavailable(Exception):
    """bubblewrap was required but is missing or cannot create its namespaces here."""


# ------------------------------------------------------------------------------- availability
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox commands here, or None when it works."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap (bwrap) is not on PATH: {INSTALL_HINT}"
    return _probe(bwrap)


@functools.cache
def _probe(bwrap: str) -> str | None:
    """Run a trivial command with the namespaces run_command uses, once per bwrap binary:
    bwrap is often installed where user namespaces are disabled (containers, hardened
    kernels, Ubuntu 24.04's AppArmor rule)."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
            "--die-with-parent", "--", "/bin/sh", "-c", ":"]  # fmt: skip
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PROBE_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} could not be run: {exc}"
    if done.returncode == 0:
        return None
    detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return (
        f"{bwrap} cannot create its namespaces here ({detail}): unprivileged user namespaces "
        "are probably disabled (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ "
        "kernel.apparmor_restrict_unprivileged_userns=0)"
    )


def resolve_sandbox(mode: str, *, warn: bool = True) -> str:
    """The sandbox in force for `mode`: "bwrap" or "off". "bwrap" raises SandboxUnavailable
    when bubblewrap does not work; "auto" then falls back to "off" with one warning."""
    if mode not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}: {mode!r}")
    if mode == "off":
        return "off"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if mode == "bwrap":
        raise SandboxUnavailable(problem)
    if warn:
        logger.warning(
            "run_command is NOT sandboxed (it can write anywhere you can, read your "
            "home folder and use the network): %s",
            problem,
        )
    return "off"


# ------------------------------------------------------------------------------- the sandbox
def bwrap_argv(
    repo: Path, *, network: bool = False, homes: Iterable[Path] | None = None
) -> list[str]:
    """bwrap and its options, up to the `--` before the command.

    Mounts are made parents first, so a repository inside the home folder or inside /tmp is
    bound on top of the tmpfs that hides its parent; the hiding tmpfs are then made read-only
    (not recursively: the repository below stays writable)."""
    repo = repo.resolve()
    hidden = [p for p in _hidden_folders(network, homes) if p != repo]
    mounts = [(p, ["--tmpfs", str(p)]) for p in [Path("/tmp"), *hidden]]
    mounts.append((repo, ["--bind", str(repo), str(repo)]))
    git_dir = linked_git_dir(repo)
    if git_dir is not None and not git_dir.is_relative_to(repo):
        mounts.append((git_dir, ["--ro-bind", str(git_dir), str(git_dir)]))
    argv = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc"]  # fmt: skip
    for _, options in sorted(mounts, key=lambda mount: len(mount[0].parts)):
        argv += options
    argv += ["--dir", SCRATCH_HOME]
    for path in hidden:
        argv += ["--remount-ro", str(path)]
    argv += ["--unshare-all", *(["--share-net"] if network else [])]
    return [*argv, "--die-with-parent", "--new-session", "--chdir", str(repo), "--"]


def linked_git_dir(repo: Path) -> Path | None:
    """The git folder a worktree's `.git` file points to, through its `commondir`: a batch
    copy's history lives in the source repository, often under the hidden home or /tmp. It is
    mounted read-only, so git commands in the copy read it and cannot change the source."""
    try:
        text = (repo / ".git").read_text(encoding="utf-8", errors="replace")
    except OSError:  # no .git, or a .git folder: nothing outside to mount
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = (repo / text[7:].strip()).resolve()
    try:
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    except OSError:
        common = gitdir
    return common if common.is_dir() else None


def _hidden_folders(network: bool, homes: Iterable[Path] | None) -> list[Path]:
    """The user's home folders ($HOME and the password database's), /run/user (session bus,
    agents' sockets) and, without network, all of /run (Docker's, databases' and the system
    bus's sockets: a Unix socket is reachable through a read-only mount)."""
    if homes is None:
        homes = [Path(h) for h in (os.environ.get("HOME"), _passwd_home()) if h]
    folders = [*homes, Path("/run/user"), *([] if network else [Path("/run")])]
    found: set[Path] = set()
    for folder in folders:
        with contextlib.suppress(OSError):
            real = folder.resolve()
            if real != Path("/") and real.is_dir():
                found.add(real)
    # A folder inside another hidden one is hidden already.
    return sorted(p for p in found if not any(p != q and p.is_relative_to(q) for q in found))


def _passwd_home() -> str | None:
    try:
        import pwd  # POSIX only, like bwrap

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return None


def sandbox_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a command inside the sandbox: HOME and TMPDIR in the private /tmp, and no
    variable pointing into the hidden home or /run (XDG folders, agent sockets)."""
    kept = {k: v for k, v in env.items() if k not in _HOST_PATH_VARIABLES}
    return {**kept, "HOME": SCRATCH_HOME, "TMPDIR": "/tmp"}


def refusal_note(output: str, *, network: bool) -> str | None:
    """A note for the model when `output` shows the sandbox refusing something, else None."""
    if not any(refusal in output for refusal in _REFUSALS):
        return None
    limits = "only the repository and /tmp are writable, the home folder is hidden (HOME is an "
    limits += "empty scratch folder)" + ("" if network else ", there is no network at all")
    return (
        f"[Note: commands run in a bubblewrap sandbox set by the user: {limits}, and "
        "background processes end with the command. This is not a fault to work around; "
        "do the task within these limits.]"
    )


# ------------------------------------------------------------------------------- lifetime
_live_groups: set[int] = set()  # process groups of commands still running
_live_lock = threading.Lock()


@contextlib.contextmanager
def owned_process_group(proc: subprocess.Popen) -> Iterator[None]:
    """Kill the process group `proc` leads when the block ends, however it ends (the command
    finished, timed out, Ctrl-C or SIGTERM raised KeyboardInterrupt), and at interpreter exit
    if the block never ends (a command running in a daemon thread)."""
    _register_atexit()
    with _live_lock:
        _live_groups.add(proc.pid)
    try:
        yield
    finally:
        kill_process_group(proc)
        proc.wait()
        with _live_lock:
            _live_groups.discard(proc.pid)


def kill_process_group(proc: subprocess.Popen) -> None:
    """SIGKILL the group `proc` leads. Sandboxed, that is the outer bwrap; `--die-with-parent`
    then takes the sandbox's init down, and the kernel every process in its PID namespace."""
    if not hasattr(os, "killpg"):
        proc.kill()
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@functools.cache
def _register_atexit() -> None:
    atexit.register(kill_live_groups)


def kill_live_groups() -> None:
    with _live_lock:
        groups = list(_live_groups) if hasattr(os, "killpg") else []
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
