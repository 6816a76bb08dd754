"""The process environment: what a `.env` file may set, and what child processes get.

A repository the agent works on is untrusted input. Its `.env` must not be able to redirect the
user's key to another server (`ANTHROPIC_BASE_URL`) or run code in our subprocesses
(`LD_PRELOAD`, `PATH`), and the processes the tools start (grep, rg, git, shell commands) must
never hold the user's keys, so no command can print one in a form redaction misses.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from toy_agent.providers import base_url_variables, endpoint_variables, key_variables

logger = logging.getLogger(__name__)

# The providers' key, base URL and API version variables come from their rows
# (toy_agent.providers); a .env that is not the user's own sets only keys: see load_dotenv_file.
OWN_PREFIX = "TOY_AGENT_"  # this project's own settings
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Variables a child keeps even though a part of the name looks secret: sockets and paths.
_SAFE_SECRETISH = frozenset({"SSH_AUTH_SOCK", "XAUTHORITY", "GPG_AGENT_INFO"})
# Variables that change how programs load code or where they look for it.
_LOADER_PREFIXES = ("LD_", "DYLD_")
_LOADER_NAMES = frozenset(
    {"PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5LIB", "PERL5OPT", "RUBYOPT", "RUBYLIB",
     "NODE_OPTIONS", "BASH_ENV", "ENV", "PROMPT_COMMAND", "GIT_CONFIG_PARAMETERS",
     "GIT_EXEC_PATH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "SSH_ASKPASS", "GREP_OPTIONS",
     "RIPGREP_CONFIG_PATH"}
)  # fmt: skip


def is_agent_variable(name: str) -> bool:
    """The variables toy_agent itself reads: the only ones a `.env` file may set."""
    return name in key_variables() or name in endpoint_variables() or name.startswith(OWN_PREFIX)


def load_dotenv_file(
    path: Path,
    repo: Path | None,
    environ: Mapping[str, str] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, str]:
    """The variables to take from the `.env` at `path`: toy_agent's own only, never one that is
    already exported, and only API keys when the file is not the user's own (see
    dotenv_distrust): what it would have set besides is named in one line added to `warnings`.
    Returns what should be set; the caller applies it to os.environ. A missing or unreadable
    file gives nothing."""
    environ = os.environ if environ is None else environ
    try:
        if not path.is_file():
            return {}
        from dotenv import dotenv_values  # only now: most folders have no .env

        values = dotenv_values(path, interpolate=False)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        logger.warning("ignoring %s: %s", path, exc)
        return {}
    distrust = dotenv_distrust(path, repo)
    keys = key_variables()
    taken: dict[str, str] = {}
    dropped: list[str] = []
    for name, value in values.items():
        if value is None or name in environ or not is_agent_variable(name):
            continue
        if distrust and name not in keys:
            dropped.append(name)
            continue
        taken[name] = value
    if dropped and warnings is not None:
        warnings.append(
            f"ignoring {', '.join(sorted(dropped))} from {path}: {distrust}, so it may set API "
            "keys only, never a base URL or a TOY_AGENT_ setting (export them, or use your "
            "config file)"
        )
    return taken


def dotenv_distrust(path: Path, repo: Path | None) -> str | None:
    """Why the `.env` at `path` is not the user's own, or None when it is. It is not when it
    lies in the repository being worked on or in a folder above it (the repository came in that
    folder: a project's top-level `.env` above `--repo backend`, from a clone, a ZIP or a
    tarball alike), anywhere in the git work tree that holds the repository, or when it or its
    folder belongs to another user. Its place is judged both where it is named and where a
    link leads, against the repository both as named and as resolved."""
    places = [path.absolute()]
    with contextlib.suppress(OSError, RuntimeError):
        places.append(path.resolve())
    if repo is not None:
        repos = [repo.absolute()]
        with contextlib.suppress(OSError, RuntimeError):
            repos.append(repo.resolve())
        top = _work_tree_top(repos[0])
        for place, folder in itertools.product(places, repos):
            if place.is_relative_to(folder):
                return "it lies inside the repository being worked on"
            if folder.is_relative_to(place.parent):
                return f"it lies in {place.parent}, a folder above the repository being worked on"
            if top is not None and place.is_relative_to(top):
                return f"it lies in the git work tree that holds the repository ({top})"
    if hasattr(os, "getuid"):
        for place in (places[-1], places[-1].parent):
            with contextlib.suppress(OSError):
                if place.stat().st_uid != os.getuid():
                    return f"{place} is not owned by you"
    return None


def _work_tree_top(repo: Path) -> Path | None:
    """The outermost folder at or above `repo` holding a `.git`: the top of the clone (of the
    superproject, for a submodule) the repository is part of, if any."""
    top = None
    with contextlib.suppress(OSError, RuntimeError):
        real = repo.resolve()
        for folder in (real, *real.parents):
            if os.path.lexists(folder / ".git"):
                top = folder
    return top


def child_environment(
    extra: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a process a tool starts: the user's, less provider keys, anything
    whose name says KEY/TOKEN/SECRET/PASSWORD/CREDENTIAL/AUTH, and loader variables (LD_*,
    PYTHONPATH, ...), plus `extra`."""
    environ = os.environ if environ is None else environ
    clean = {name: value for name, value in environ.items() if not is_unsafe_for_child(name)}
    clean.update(extra or {})
    return clean


def is_unsafe_for_child(name: str) -> bool:
    upper = name.upper()
    if upper.startswith(_LOADER_PREFIXES) or upper in _LOADER_NAMES:
        return True
    if upper in _SAFE_SECRETISH:
        return False
    return (
        name in key_variables()
        or name in base_url_variables()
        or any(part in upper for part in SECRET_NAME_PARTS)
    )

