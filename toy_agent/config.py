"""Settings from outside the command line, and the project's instructions for the model.

Defaults for any long flag come from `$XDG_CONFIG_HOME/toy-agent/config.toml` (default
`~/.config/toy-agent/config.toml`) and from `TOY_AGENT_<FLAG>` variables; the precedence is
flags > environment > config file > built-in defaults. Every value is checked with its flag's
own type and choices (the argparse actions themselves), so `max_iterations = 0` fails exactly
as `--max-iterations 0` does, naming the key or the variable.

The target repository is untrusted: a config file inside it is never read (unless the user
names it with --config), and `TOY_AGENT_*` lines of a `.env` inside it or above it are
ignored; a hostile repository must not turn on commands, switch the sandbox off or start an
MCP server. Hooks (`TOY_AGENT_HOOK`) are never taken from any `.env`, the user's own
included: they run outside the sandbox, and a `.env` is often a project's.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toy_agent.environment import OWN_PREFIX, load_dotenv_file
from toy_agent.files import open_regular
from toy_agent.tools import CodeRepositoryTools, ToolError

# Flags that are not settings: actions, or what only makes sense for one command.
NOT_SETTINGS = frozenset(
    {"help", "version", "config", "task", "continue_session", "resume", "undo", "list_tools"}
)
PATH_METAVARS = frozenset({"FILE", "PATH", "DIR", "TASKS.jsonl", "ID_OR_FILE"})
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
HOOK_VARIABLES = f"{OWN_PREFIX}HOOK"  # TOY_AGENT_HOOK and TOY_AGENT_HOOK_TIMEOUT: never a .env's
INSTRUCTIONS_FILE = "AGENTS.md"
MAX_INSTRUCTIONS_BYTES = 32 * 1024


class ConfigError(Exception):
    """A bad config file or TOY_AGENT_ variable: one line naming it (exit code 2)."""


@dataclass
class Settings:
    args: argparse.Namespace
    given: frozenset[str]  # the destinations set on the command line itself
    warnings: list[str] = field(default_factory=list)


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "toy-agent" / "config.toml"


def load_settings(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    environ: Mapping[str, str] | None = None,
    dotenv: Path | None = None,
) -> Settings:
    """The command line, with the environment's and the config file's defaults under it.
    `dotenv` is the `.env` whose TOY_AGENT_ lines count as environment (unless it is not the
    user's own: see toy_agent.environment.dotenv_distrust). Raises ConfigError."""
    environ = os.environ if environ is None else environ
    args = parser.parse_args(argv)
    given = _given(parser, argv)
    settings = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    warnings: list[str] = []
    env = {k: v for k, v in environ.items() if k.startswith(OWN_PREFIX)}
    repo = _resolved(args.repo if "repo" in given else env.get(f"{OWN_PREFIX}REPO", args.repo))
    env = {**_dotenv_settings(dotenv, repo, environ, warnings), **env}

    values: dict[str, Any] = {}
    config = args.config if "config" in given else env.get(f"{OWN_PREFIX}CONFIG")
    path = Path(config).expanduser() if config else config_path(environ)
    if config and not path.is_file():
        raise ConfigError(f"config file {path} not found")
    if not config and path.is_file() and _is_inside(path, repo):
        warnings.append(f"ignoring {path}: a config file inside the repository being worked "
                        "on is never read (pass it with --config FILE to use it)")  # fmt: skip
    elif path.is_file():
        for key, value in _read_toml(path).items():
            action = _setting(settings, key.replace("-", "_"), f"key {key!r} in {path}")
            values[action.dest] = _converted(action, value, f"{path}: {key}")
    for name, text in sorted(env.items()):
        if name == f"{OWN_PREFIX}CONFIG":
            continue
        dest = name.removeprefix(OWN_PREFIX).lower()
        action = _setting(settings, dest, f"variable {name}")
        values[action.dest] = _converted(action, text, name, from_text=True)
    for dest, value in values.items():
        if dest not in given:
            setattr(args, dest, value)
    return Settings(args, given, warnings)


def _given(parser: argparse.ArgumentParser, argv: list[str] | None) -> frozenset[str]:
    """Which destinations the command line sets: a parse with every default suppressed."""
    defaults = {action: action.default for action in parser._actions}
    try:
        for action in defaults:
            action.default = argparse.SUPPRESS
        return frozenset(vars(parser.parse_args(argv)))
    finally:
        for action, default in defaults.items():
            action.default = default


def _setting(settings: dict[str, argparse.Action], dest: str, name: str) -> argparse.Action:
    """The flag a config key or variable (`name`, for the message) sets."""
    action = settings.get(dest)
    if action is None:
        raise ConfigError(f"unknown {name}: the names are the long flags, e.g. "
                          "max_iterations = 30 or TOY_AGENT_MAX_ITERATIONS=30")  # fmt: skip
    if dest in NOT_SETTINGS:
        raise ConfigError(f"{name}: {action.option_strings[-1]} is not a setting; pass it on "
                          "the command line")  # fmt: skip
    return action


def _converted(action: argparse.Action, value: Any, where: str, from_text: bool = False) -> Any:
    """`value` as the flag itself would have it, checked with its type and choices."""
    flag = action.option_strings[-1]
    if isinstance(action, argparse._StoreTrueAction):
        if from_text and isinstance(value, str) and value.strip().lower() in TRUE_WORDS:
            return True
        if from_text and isinstance(value, str) and value.strip().lower() in FALSE_WORDS:
            return False
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: {flag} is on or off: use true or false")
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_converted_one(action, item, where) for item in items]
    return _converted_one(action, value, where)


def _converted_one(action: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: expected a value for {action.option_strings[-1]}, "
                          f"got {value!r}")  # fmt: skip
    text = str(value)
    if action.metavar in PATH_METAVARS or action.dest == "repo":
        text = os.path.expanduser(text)
    try:
        converted = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{where}: invalid value {text!r}: {exc}") from None
    except (TypeError, ValueError) as exc:  # not a number at all: say what is wanted
        wants = getattr(action.type, "wants", None) or f"another value ({exc})"
        raise ConfigError(f"{where}: invalid value {text!r}: "
                          f"{action.option_strings[-1]} wants {wants}") from None  # fmt: skip
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{where}: invalid choice {text!r} (choose from {choices})")
    return converted


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _dotenv_settings(
    dotenv: Path | None, repo: Path, environ: Mapping[str, str], warnings: list[str]
) -> dict[str, str]:
    """The TOY_AGENT_ lines of `dotenv` that are not exported already; none from a .env that
    is not the user's own (see toy_agent.environment.dotenv_distrust), which one warning names."""
    if dotenv is None:
        return {}
    taken = load_dotenv_file(dotenv, repo, environ, warnings)
    hooks = sorted(name for name in taken if name.startswith(HOOK_VARIABLES))
    if hooks:  # a .env is often a project's: it must not name commands run outside the sandbox
        warnings.append(f"ignoring {', '.join(hooks)} from {dotenv}: hooks come only from "
                        "--hook, your config file or your exported environment")  # fmt: skip
    return {k: v for k, v in taken.items() if k.startswith(OWN_PREFIX) and k not in hooks}


def _resolved(path: str) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return Path(path).absolute()


def _is_inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder)
    except (OSError, RuntimeError):
        return False


# --- the project's instructions -----------------------------------------------------------


@dataclass(frozen=True)
class Instructions:
    text: str = ""  # what ends the system prompt
    source: str = ""  # for the view's first line: "AGENTS.md" or "AGENTS.md (cut at 32 KB)"


def load_instructions(
    tools: CodeRepositoryTools, append: str | None = None, redact: Callable[[str], str] = str
) -> Instructions:
    """AGENTS.md at the repository root (its first 32 KB; the prompt says when it was cut),
    then the user's own instructions (--append-system-prompt). A link out of the repository,
    a FIFO or a folder named AGENTS.md is ignored."""
    parts, source = [], ""
    found = _read_agents_md(tools)
    if found is not None:
        text, size = found
        cut = size > MAX_INSTRUCTIONS_BYTES
        source = f"{INSTRUCTIONS_FILE} (cut at 32 KB)" if cut else INSTRUCTIONS_FILE
        parts.append(
            f"# Project instructions ({INSTRUCTIONS_FILE})\nThe repository's {INSTRUCTIONS_FILE}, "
            "written by its maintainers for coding agents. Follow it where it applies to the "
            f"task.\n\n{redact(text).strip()}"
        )
        if cut:
            parts[-1] += (f"\n\n[{INSTRUCTIONS_FILE} was cut here: only its first 32 KB of "
                          f"{size:,} bytes are shown; read_file {INSTRUCTIONS_FILE} for the "
                          "rest.]")  # fmt: skip
    if append and append.strip():
        parts.append(f"# The user's instructions\n{redact(append).strip()}")
    return Instructions("\n\n".join(parts), source)


def _read_agents_md(tools: CodeRepositoryTools) -> tuple[str, int] | None:
    """(the first MAX_INSTRUCTIONS_BYTES as text, the file's size), or None."""
    try:
        rel = tools.relative(INSTRUCTIONS_FILE)  # follows a link only inside the repository
        with open_regular(tools.repo_path, tuple(rel.split("/")), tools.links.check) as f:
            st = os.fstat(f.fileno())
            data = f.read(MAX_INSTRUCTIONS_BYTES)
    except (ToolError, OSError):  # not a regular file, hard-linked from outside, unreadable
        return None
    text = data.decode("utf-8", "replace")
    if st.st_size > MAX_INSTRUCTIONS_BYTES:
        text = text.rstrip("\ufffd")  # a character the cut split in two
    return text, st.st_size
