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
import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toy_agent.files import open_regular
from toy_agent.tools import CodeRepositoryTools, ToolError
from toy_agent.variables import OWN_PREFIX, load_dotenv_file

# Flags that are not settings: actions, or what only makes sense for one command.
NOT_SETTINGS = frozenset(
    {"help", "version", "config", "task", "continue_session", "resume", "undo", "list_tools"}
)
PATH_METAVARS = frozenset({"FILE", "PATH", "DIR", "TASKS.jsonl", "ID_OR_FILE"})
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
HOOK_VARIABLES = f"{OWN_PREFIX}HOOK"  # TOY_AGENT_HOOK and TOY_AGENT_HOOK_TIMEOUT: never a .env's
INSTRUCTIONS_FILE = "AGENTS.md"
INSTRUCTIONS_FILES = (INSTRUCTIONS_FILE, "CLAUDE.md")  # in a folder: the first that is there
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
    user's own: see toy_agent.variables.dotenv_distrust). Raises ConfigError."""
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
    if config and path.is_dir():
        raise ConfigError(f"config file {path} is a folder: name the TOML file in it")
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


def lenient_output(
    config: str | None,
    repo: str | None,
    environ: Mapping[str, str] | None = None,
    dotenv: Path | None = None,
) -> str | None:
    """The `output` TOY_AGENT_OUTPUT or the config file sets, read without checking anything
    else, in load_settings' order: for the one JSON object a usage error still gets when the
    settings themselves could not be read (a bad flag, another key's bad value). `config` and
    `repo` are the command line's --config and --repo (None: not given). A file that cannot
    be read (or a package missing to read it: the error may be that) counts as not setting
    it; the value is returned unchecked."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k.startswith(OWN_PREFIX)}
    where = _resolved(repo or env.get(f"{OWN_PREFIX}REPO", "."))
    with contextlib.suppress(ModuleNotFoundError):
        env = {**_dotenv_settings(dotenv, where, environ, []), **env}
    if f"{OWN_PREFIX}OUTPUT" in env:
        return env[f"{OWN_PREFIX}OUTPUT"].strip()
    config = config or env.get(f"{OWN_PREFIX}CONFIG")
    path = Path(config).expanduser() if config else config_path(environ)
    if not config and _is_inside(path, where):
        return None  # never read (load_settings warns)
    try:
        value = _read_toml(path).get("output")
    except (ConfigError, ModuleNotFoundError):
        return None
    return value if isinstance(value, str) else None


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
    is not the user's own (see toy_agent.variables.dotenv_distrust), which one warning names."""
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
    source: str = ""  # for the view's first line: "AGENTS.md", "AGENTS.md (cut at 32 KB)", ...


@dataclass(frozen=True)
class InstructionsFile:
    name: str  # as the prompt and the view name it: "~/.config/toy-agent/AGENTS.md", "AGENTS.md"
    text: str  # at most MAX_INSTRUCTIONS_BYTES of it
    size: int
    readable: str | None = None  # the path read_file takes for the rest (None: outside --repo)
    own: bool = False  # the user's own file (beside the config file), not the project's


def load_instructions(
    tools: CodeRepositoryTools,
    append: str | None = None,
    redact: Callable[[str], str] = str,
    environ: Mapping[str, str] | None = None,
) -> Instructions:
    """The instruction files (see instruction_files) concatenated in their order within
    MAX_INSTRUCTIONS_BYTES in all (the prompt says where one was cut, and names the ones left
    out), then the user's own instructions (--append-system-prompt)."""
    parts, names, budget, cut = [], [], MAX_INSTRUCTIONS_BYTES, False
    found = instruction_files(tools, environ)
    for index, file in enumerate(found):
        if budget <= 0:
            rest = ", ".join(f.name for f in found[index:])
            parts.append(f"[Left out, over the {MAX_INSTRUCTIONS_BYTES >> 10} KB of "
                         f"instructions: {rest}.]")  # fmt: skip
            break
        data = file.text.encode("utf-8")
        text = data[:budget].decode("utf-8", "ignore")
        budget -= len(data)
        names.append(file.name)
        whose = ("your own instructions for every repository" if file.own else
                 "written by the project's maintainers for coding agents (a file further down "
                 "applies to its folder and wins over the ones before it)")  # fmt: skip
        parts.append(f"# Instructions ({file.name})\n{file.name}, {whose}. Follow it where it "
                     f"applies to the task.\n\n{redact(text).strip()}")  # fmt: skip
        if len(text.encode("utf-8")) < file.size:
            cut = True
            more = f"; read_file {file.readable} for the rest" if file.readable else ""
            parts[-1] += (f"\n\n[{file.name} was cut here: only its first "
                          f"{len(text.encode('utf-8')):,} of {file.size:,} bytes are shown"
                          f"{more}.]")  # fmt: skip
    source = " + ".join(names) + (f" (cut at {MAX_INSTRUCTIONS_BYTES >> 10} KB)" if cut else "")
    if append and append.strip():
        parts.append(f"# The user's instructions\n{redact(append).strip()}")
    return Instructions("\n\n".join(parts), source)


def instruction_files(
    tools: CodeRepositoryTools, environ: Mapping[str, str] | None = None
) -> list[InstructionsFile]:
    """The instruction files, in the order they are read: yours (`AGENTS.md` beside the
    config file, `~/.config/toy-agent/`), then one per folder from the root of the git work
    tree that holds --repo down to --repo itself, as Codex reads them from the project root
    down to the folder it works in (without a git work tree above it: --repo alone). In each
    folder `AGENTS.md`, else `CLAUDE.md`. A link (symbolic, or a hard link from outside the
    repository), a FIFO or a folder by those names is ignored."""
    found = []
    home_folder = config_path(environ).parent
    for name in INSTRUCTIONS_FILES:
        own = _read_own(home_folder / name)
        if own is not None:
            found.append(InstructionsFile(_shown(home_folder / name), *own, own=True))
            break
    repo = tools.repo_path
    top = _work_tree_root(repo)
    for folder in [*reversed((repo.relative_to(top)).parents), repo.relative_to(top)]:
        for name in INSTRUCTIONS_FILES:
            inside = (top / folder).is_relative_to(repo)
            read = _read_in_repo(tools, name) if inside else _read_above(top, folder / name)
            if read is not None:
                shown = os.path.relpath(top / folder / name, repo)  # "../AGENTS.md" above it
                found.append(InstructionsFile(shown, *read, readable=name if inside else None))
                break
    return found


def _work_tree_root(repo: Path) -> Path:
    """The top of the git work tree that holds `repo` (`repo` itself when there is none)."""
    for folder in (repo, *repo.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return repo


def _shown(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if text.startswith(home + os.sep) else text


def _capped(f: Any, size: int) -> tuple[str, int]:
    data = f.read(MAX_INSTRUCTIONS_BYTES)
    text = data.decode("utf-8", "replace")
    if size > MAX_INSTRUCTIONS_BYTES:
        text = text.rstrip("\ufffd")  # a character the cut split in two
    return text, size


def _read_own(path: Path) -> tuple[str, int] | None:
    """Your own file: a regular file (a link to one is fine: it is yours)."""
    try:
        with path.open("rb") as f:
            st = os.fstat(f.fileno())
            return _capped(f, st.st_size) if stat.S_ISREG(st.st_mode) else None
    except OSError:
        return None


def _read_in_repo(tools: CodeRepositoryTools, name: str) -> tuple[str, int] | None:
    """(the first MAX_INSTRUCTIONS_BYTES as text, the file's size), or None."""
    try:
        rel = tools.relative(name)  # follows a link only inside the repository
        with open_regular(tools.repo_path, tuple(rel.split("/")), tools.links.check) as f:
            return _capped(f, os.fstat(f.fileno()).st_size)
    except (ToolError, OSError):  # not a regular file, hard-linked from outside, unreadable
        return None


def _read_above(top: Path, rel: Path) -> tuple[str, int] | None:
    """A file between the work tree's root and --repo: no link of any kind is followed."""

    def no_links(st: os.stat_result, shown: str) -> None:
        if st.st_nlink > 1:
            raise ToolError(f"{shown} is a hard link")

    try:
        with open_regular(top, rel.parts, no_links) as f:
            return _capped(f, os.fstat(f.fileno()).st_size)
    except (ToolError, OSError):
        return None
