"""Running code as an unprivileged user, for the sandbox tests that must hold for root (CI runs
as root) and for everyone else alike.

`run_unprivileged` runs Python code as uid and gid 65534 (nobody) with no supplementary
groups, through `setpriv`; `nobody_folder` makes a folder that user can write (pytest's
tmp_path under /tmp/pytest-of-root is mode 700). Both skip the test where this process is not
root, since only root can become another user (the test's run as this user is then the
unprivileged one).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
_SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def can_switch_user() -> str | None:
    """Why this process cannot run code as nobody, or None."""
    if os.geteuid() != 0:
        return "not root: only root can run code as another user"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    if _interpreter() is None:
        return f"no Python {sys.version_info.major}.{sys.version_info.minor} nobody can run"
    return None


def run_unprivileged(
    code: str,
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`python -c code args...` as nobody, in `cwd`, with this checkout's toy_agent and its
    installed dependencies importable and an environment of PATH, LANG, HOME=`cwd` and `env`.
    Skips the test when this process cannot switch users (see can_switch_user)."""
    problem = can_switch_user()
    if problem is not None:
        pytest.skip(problem)
    interpreter = _interpreter()
    assert interpreter is not None
    paths = [str(ROOT), str(ROOT / "tests"), sysconfig.get_paths()["purelib"]]
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
                   "HOME": str(cwd), "PYTHONPATH": os.pathsep.join(paths),
                   "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}  # fmt: skip
    return subprocess.run(
        [*_SETPRIV, interpreter, "-c", code, *args], cwd=cwd, env=environment,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@contextmanager
def nobody_folder() -> Iterator[Path]:
    """A fresh folder in /tmp owned by nobody, removed afterwards."""
    problem = can_switch_user()
    if problem is not None:
        pytest.skip(problem)
    folder = Path(tempfile.mkdtemp(prefix="toy-agent-nobody-", dir="/tmp"))
    try:
        os.chown(folder, NOBODY, NOBODY)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@functools.cache
def _interpreter() -> str | None:
    """This interpreter when nobody can run it, else a system one of the same version (a
    pyenv Python under /root is out of nobody's reach): the venv's packages work in both."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        try:
            done = subprocess.run([*_SETPRIV, candidate, "-c", "pass"], cwd="/",
                                  capture_output=True, timeout=60)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return candidate
    return None
