"""The process environment: what a `.env` file may set, and what child processes get.

A repository the agent works on is untrusted input. Its `.env` must not be able to redirect the
user's key to another server (`ANTHROPIC_BASE_URL`) or run code in our subprocesses
(`LD_PRELOAD`, `PATH`). The processes the tools start (grep, rg, shell commands) get a small
allow-listed environment, not the user's with some names taken out: a credential's name does
not always say so (`DATABASE_URL` holds a password, `PIP_EXTRA_INDEX_URL` a token), and a
command could print any of them in a form redaction misses. The user passes more by name.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import itertools
import logging
import os
import re
from collections.abc import Container, Iterable, Mapping
from pathlib import Path

from toy_agent.providers import endpoint_variables, key_variables
from toy_agent.sandbox import _HOME_DEFAULTS, _TOOL_HOME_VARIABLES

logger = logging.getLogger(__name__)

# The providers' key, base URL and API version variables come from their rows
# (toy_agent.providers); a .env that is not the user's own sets only keys: see load_dotenv_file.
OWN_PREFIX = "TOY_AGENT_"  # this project's own settings

# What a command's environment holds unless the user names more (--command-env): where programs
# and the user's toolchains are, who and where the user is, the locale, the terminal and the
# temporary folder. Nothing whose value could be a credential (a proxy URL may hold a password),
# nothing that loads code (LD_PRELOAD, PYTHONPATH), no agent socket (SSH_AUTH_SOCK: the user's
# keys, by proxy).
COMMAND_VARIABLES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "USERNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
     "COLORTERM", "NO_COLOR", "TMPDIR", "TEMP", "TMP",
     # where the certificates a corporate network needs are (paths, never a secret)
     "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
     "NODE_EXTRA_CA_CERTS",
     # the toolchain variables the sandbox reads (sandbox.py), and their companions
     *_TOOL_HOME_VARIABLES, *_HOME_DEFAULTS.values(), "GOPATH", "GOBIN", "GOCACHE",
     "GOMODCACHE", "CONDA_DEFAULT_ENV", "CONDA_EXE", "CONDA_PYTHON_EXE", "CONDA_SHLVL",
     "PYENV_VERSION", "NVM_BIN", "NVM_INC", "RUSTUP_TOOLCHAIN"}
)  # fmt: skip
COMMAND_VARIABLE_PREFIXES = ("LC_",)  # LC_ALL, LC_CTYPE, ...
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATTERN = re.compile(r"[A-Za-z0-9_*?]+")


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


def command_env_item(text: str) -> str:
    """An argparse type for --command-env: `NAME` (its value from toy_agent's environment; `*`
    and `?` match several, `CI_*`), or `NAME=VALUE`."""
    name, equals, _ = text.partition("=")
    if not (_NAME.fullmatch(name) if equals else _PATTERN.fullmatch(name)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME or NAME=VALUE (a variable name: letters, digits and _, "
            "with * or ? to match several)"
        )
    return text


def named_variables(
    items: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables the user gives commands (--command-env, command_env = [...]): `NAME=VALUE`
    as written, `NAME` (or a pattern) with its value in `environ`; one not set is left out."""
    environ = os.environ if environ is None else environ
    named: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if equals:
            named[name] = value
        elif any(c in name for c in "*?"):
            named |= {k: v for k, v in environ.items() if fnmatch.fnmatchcase(k, name)}
        elif name in environ:
            named[name] = environ[name]
    return named


def child_environment(
    extra: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    named: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for a process a tool starts: the allow-listed variables of `environ`
    (COMMAND_VARIABLES, LC_*), then `extra`, then what the user named (see named_variables)."""
    environ = os.environ if environ is None else environ
    clean = {name: value for name, value in environ.items() if is_command_variable(name)}
    return {**clean, **(extra or {}), **(named or {})}


def describe_command_env(named: Mapping[str, str]) -> str:
    """One line for --list-tools: what commands get. Names only: a value may be a secret."""
    given = f"; and {', '.join(sorted(named))} (--command-env)" if named else ""
    return f"PATH, HOME, USER, locale, terminal, temporary folder, toolchains{given}"


def is_command_variable(name: str) -> bool:
    """Whether a command gets this variable without the user naming it."""
    return name in COMMAND_VARIABLES or name.startswith(COMMAND_VARIABLE_PREFIXES)


# How a program says a variable is missing, on the line that names it.
_MISSING = re.compile(
    r"(?i)KeyError|not set|\bunset\b|undefined|missing|required|environment variable|not defined"
)


def withheld_variables(
    output: str,
    exit_code: int | None,
    passed: Container[str],
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The variables a command seems to have failed for: set for toy_agent, neither allowed
    nor `passed`, and named in the output of a failed command, or in a "not set" line
    (`KeyError: 'X'`, `X is not set`, `environment variable X`). Never a provider's key."""
    environ = os.environ if environ is None else environ
    return [
        name
        for name in sorted(environ)
        if len(name) > 2
        and name in output
        and not is_command_variable(name)
        and name not in passed
        and name not in key_variables()  # the agent's own keys are never suggested
        and _missed(name, output, exit_code)
    ]


def withheld_note(names: list[str]) -> str:
    """The note for the model about `names` (see withheld_variables)."""
    flags = " ".join(f"--command-env {name}" for name in names)
    verb, them = ("is", "it") if len(names) == 1 else ("are", "them")
    return (
        f"[Note: {', '.join(names)} {verb} not passed to commands; the user can pass {them} "
        f"with {flags}]"
    )


def _missed(name: str, output: str, exit_code: int | None) -> bool:
    """Whether `output` names the variable `name` as a word: a failed command's anywhere, a
    command that went on only on a line that says it is missing."""
    lines = [line for line in output.splitlines() if name in line]
    word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
    lines = [line for line in lines if word.search(line)]
    if exit_code not in (0, None):
        return bool(lines)
    return any(_MISSING.search(line) for line in lines)
