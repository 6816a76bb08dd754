"""The command line: parse flags, build the objects, run it (runs.py), return its exit code.

Heavy modules (the agent, the provider SDKs, mcp) are imported only after the flags are
parsed, so `--help` and `--version` are instant.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import logging
import math
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from toy_agent import __version__, providers
from toy_agent.runs import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    _list_tools,
    _load_session,
    _recorded_task,
    _refuse_single_run_flags,
    _run_agent,
    _run_batch,
    _undo,
    _use_demo,
)

if TYPE_CHECKING:  # imported for real only where used, so --help stays instant
    from toy_agent.hooks import Hooks
    from toy_agent.llm import LlmClient
    from toy_agent.mcp_tools import McpTools
    from toy_agent.permissions import Permissions
    from toy_agent.redaction import Redactor
    from toy_agent.sessions import Session
    from toy_agent.settings import RunSettings
    from toy_agent.tools import CodeRepositoryTools
    from toy_agent.view import TerminalView

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
RESUME_PICK = "\0pick"  # --resume without an id: pick one from a list

# `toy-agent NAME ...` with NAME first runs "module:function"(the rest of argv) -> exit code;
# the function prints its own one-line errors. A one-word task with such a name needs --task.
SUBCOMMANDS = {
    "report": "toy_agent.report:main",
    "sessions": "toy_agent.sessions:sessions_command",
    "export-preds": "toy_agent.batch.swebench:export_command",
}


_EPILOG = """\
examples:
  toy-agent "fix the failing test"                    # in the current folder, with Claude
  toy-agent -r ~/src/app -m gpt-5-mini "add type hints" # the provider follows the model
  toy-agent --task - < task.md --output json          # scripted: one JSON object on stdout
  toy-agent --replay run.json --repo /tmp/copy        # replay a recorded run, offline
  toy-agent report runs/out -o report.html            # an HTML page of a run or a batch
  toy-agent                                           # on a terminal: an interactive session

environment:
{variables}
  TOY_AGENT_<FLAG>   a default for any long flag, e.g. TOY_AGENT_MAX_ITERATIONS=30
  NO_COLOR           no colour on the terminal
  a .env in the current folder may set these (never a base URL from inside --repo)"""


def provider_for_model(model: str | None) -> str:
    """The provider a model name belongs to, by the rows' model names (claude-* -> claude,
    gemini-* -> gemini, gpt-* and o1/o3/o4-style names -> openai); anything else (or no
    model) -> claude."""
    row = providers.provider_for_model(model)
    return row.name if row else providers.DEFAULT_PROVIDER


def _epilog() -> str:
    """The examples and the environment variables, the providers' from their rows."""
    rows = providers.PROVIDERS.values()
    keys = ", ".join(row.key_names() for row in rows)
    urls = ", ".join(providers.base_url_variables())
    width = max(len(keys), len(urls)) + 3
    variables = f"  {keys:<{width}}provider keys\n  {urls:<{width}}base URLs"
    return _EPILOG.format(variables=variables)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (and a "did you mean" for a mistyped flag)
    instead of the usage dump, through the same UsageError as every other mistake."""

    @property
    def flags(self) -> list[str]:
        """Every flag it accepts, -h included, in --help's order (argparse keeps no public
        list; docs/cli.md's flag table is checked against this one)."""
        return [o for a in self._actions for o in a.option_strings]

    def error(self, message: str) -> NoReturn:
        invalid = re.search(r"invalid (\w+) value: ('.*')$", message)
        wants = {getattr(a.type, "__name__", ""): getattr(a.type, "wants", "")
                 for a in self._actions}  # fmt: skip
        if invalid and wants.get(invalid[1]):  # not "invalid _positive_int value"
            said = f"invalid value {invalid[2]}: it wants {wants[invalid[1]]}"
            message = message[: invalid.start()] + said
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown:
            close = difflib.get_close_matches(unknown[1].split("=")[0], self.flags, n=1)
            if close:
                message += f" (did you mean {close[0]}?)"
        raise UsageError(message)


def build_parser() -> _Parser:
    """The flags. Their defaults are the settings' (toy_agent.settings), read from there."""
    from toy_agent.batch.executors import EXECUTORS
    from toy_agent.hooks import DEFAULT_HOOK_TIMEOUT
    from toy_agent.parsing import FORMAT_NAMES
    from toy_agent.permissions import PERMISSION_MODES
    from toy_agent.sandbox import SANDBOX_MODES
    from toy_agent.settings import AgentSettings, BatchSettings, ModelSettings, ToolSettings
    from toy_agent.variables import command_env_item

    model, tools, agent = ModelSettings, ToolSettings, AgentSettings  # their defaults

    rows = providers.PROVIDERS.values()
    models = ", ".join(f"{row.name}: {row.default_model}" for row in rows)
    aliases = providers.aliases()
    parser = _Parser(
        prog="toy-agent",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A ReAct coding agent: it thinks, calls a tool, observes, until the task\n"
        "is complete. Exit codes: 0 completed, 1 not completed, 2 usage or configuration\n"
        "error, 3 LLM provider failure, 130 interrupted (143 SIGTERM, 129 SIGHUP, 141\n"
        "closed stdout).",
    )
    add = parser.add_argument_group(
        "task", "the task (positional TASK or --task) and the repository"
    ).add_argument
    add("task_text", nargs="?", metavar="TASK", help="the task, like --task")
    add("--task", metavar="TEXT", help="the task for the agent; '-' reads it from stdin")
    add("-r", "--repo", default=".", metavar="PATH",
        help="the repository to work on (default: .)")  # fmt: skip
    add(
        "--max-iterations",
        type=_positive_int,
        default=agent.max_iterations,
        metavar="N",
        help=f"maximum THINK/ACT cycles (default: {agent.max_iterations})",
    )
    add = parser.add_argument_group(
        "provider", "the LLM provider and how it is called"
    ).add_argument
    add(
        "--llm-provider",
        choices=(*providers.PROVIDERS, *aliases, providers.REPLAY),
        help=f"the LLM provider (default: from --model's name, else {providers.DEFAULT_PROVIDER}; "
        f"replay when --replay is given); {' and '.join(aliases)} are aliases; replay re-runs a "
        "--trajectory file offline",
    )
    add("-m", "--model", metavar="NAME", help=f"model name (defaults: {models})")
    add(
        "--base-url",
        metavar="URL",
        help="API base URL, e.g. http://localhost:11434/v1 for Ollama "
        f"(default: the SDK's, or {' / '.join(providers.base_url_variables())})",
    )
    add(
        "--replay",
        metavar="FILE",
        help="trajectory whose LLM responses --llm-provider replay plays back",
    )
    add(
        "--replay-lenient",
        action="store_true",
        help="keep replaying when the tools answer "
        "differently from the recording (default: stop with outcome replay_diverged, exit 1)",
    )
    add(
        "--max-retries",
        type=_non_negative_int,
        default=model.max_retries,
        metavar="N",
        help=f"retries of transient provider failures (default: {model.max_retries})",
    )
    add(
        "--timeout",
        type=_positive_float,
        default=model.timeout,
        metavar="SECONDS",
        help=f"seconds for one whole LLM response, streaming included (default: {model.timeout:g})",
    )
    add(
        "--effort",
        choices=providers.EFFORTS,
        help="how hard the model thinks: Claude's effort (or thinking budget), Gemini's "
        "thinking level (or budget), OpenAI's reasoning_effort (default: the model's own)",
    )
    add(
        "--model-option",
        action="append",
        default=[],
        type=_model_option_item,
        metavar="KEY=VALUE",
        help="a request field for the provider, e.g. temperature=0.2 or max_tokens=16000 "
        "(the value as JSON if it reads as JSON); repeatable",
    )
    add(
        "--openai-api",
        choices=("chat", "responses"),
        default=model.openai_api,
        help="the API of --llm-provider openai: chat (Chat Completions, the default; what local "
        "servers speak) or responses (OpenAI's Responses API: reasoning kept between turns)",
    )
    add(
        "--show-thinking",
        choices=("auto", "on", "off"),
        default="auto",
        help="ask for the model's thinking (summarised) where it is hidden by default "
        "(default auto: on with the live view)",
    )
    add = parser.add_argument_group("tools", "the tools and how actions are written").add_argument
    add(
        "--tool-format",
        choices=FORMAT_NAMES,
        default=agent.tool_format,
        help="how the LLM writes actions: xml tags (default), react text, or the provider's "
        "native tool calls",
    )
    add(
        "--context-budget",
        type=_positive_int,
        default=agent.context_budget,
        metavar="TOKENS",
        help=f"token budget for what is sent to the LLM (default: {agent.context_budget})",
    )
    add(
        "--allow-commands",
        action="store_true",
        help="offer the run_command tool (shell commands in the repository)",
    )
    add(
        "--sandbox",
        choices=SANDBOX_MODES,
        default=tools.sandbox,
        help="where run_command runs: bwrap (bubblewrap: writes only in the repository and "
        "/tmp, home hidden, no network, no surviving processes), off, or auto: bwrap when it "
        "works, else off with a warning (default: auto)",
    )
    add(
        "--sandbox-read",
        action="append",
        default=[],
        metavar="PATH",
        help="a folder or file sandboxed commands may read (repeatable); your home is hidden "
        "except what the programs on your PATH need to run",
    )
    add(
        "--sandbox-network",
        action="store_true",
        help="let sandboxed commands use the network (default: no network at all)",
    )
    add(
        "--command-env",
        action="append",
        default=[],
        type=command_env_item,
        metavar="NAME[=VALUE]",
        help="pass this variable to commands (repeatable; NAME takes its value from your "
        "environment, CI_* several); commands get only PATH, HOME, the locale, the terminal, "
        "the temporary folder and your toolchains' variables otherwise",
    )
    add(
        "--confirm",
        action="store_true",
        help="ask before each write_file, edit_file or run_command (= --permission-mode ask)",
    )
    add(
        "--permission-mode",
        choices=PERMISSION_MODES,
        help="read-only: only tools that change nothing; plan: read-only, ending with a plan "
        "you approve, then carried out in the mode you pick; ask: confirm every change and "
        "command; edits: file changes run, commands ask; auto: everything the sandbox allows "
        "runs (default: auto, or ask with --confirm)",
    )
    add(
        "--allow-command",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run_command lines whose every command matches a PATTERN (a prefix like "
        "'npm test', or a glob like 'pytest*') run without asking (repeatable)",
    )
    add(
        "--deny-command",
        action="append",
        default=[],
        metavar="PATTERN",
        help="refuse any run_command line with a command matching PATTERN; wins over "
        "--allow-command (repeatable)",
    )
    add(
        "--lint",
        choices=("off", "on", "strict"),
        default=tools.lint,
        help="after each file edit, tell the model the syntax errors it introduced (on); "
        "strict: refuse such an edit and leave the file as it was; off: no check (default: on)",
    )
    add(
        "--lint-cmd",
        action="append",
        default=[],
        metavar="[GLOB=]CMD",
        help="your linter, run in the sandbox on each edited file matching GLOB ({file} is "
        "its path), e.g. '*.py=ruff check {file}'; only new findings are told (repeatable)",
    )
    add(
        "--check",
        metavar="CMD",
        help="a shell command that decides whether the task is done (e.g. 'pytest -q'): run "
        "in the sandbox when the model calls task_complete; if it fails the model is shown "
        "why and goes on; exit 0 only if it passed",
    )
    add(
        "--check-retries",
        type=_non_negative_int,
        default=agent.check_retries,
        metavar="N",
        help=f"times the model may try again after a failed --check (default: "
        f"{agent.check_retries})",
    )
    add(
        "--strict",
        action="store_true",
        help="a run that completes after an action was refused or declined exits 1, not 0",
    )
    add = parser.add_argument_group(
        "hooks",
        "your own commands at points of a run (docs/hooks.md); only from the command "
        "line, your environment or your config file, never from the repository",
    ).add_argument
    add(
        "--hook",
        action="append",
        default=[],
        type=_hook_item,
        metavar="EVENT[:MATCHER]=COMMAND",
        help="run COMMAND (sh, outside the sandbox, the event as JSON on stdin) at EVENT: "
        "pre_tool, post_tool, prompt, run_start or run_stop; MATCHER: tool names, globs "
        "joined by | (repeatable); exit 2 refuses, stdout is a note for the model",
    )
    add(
        "--hook-timeout",
        type=_positive_float,
        default=DEFAULT_HOOK_TIMEOUT,
        metavar="SECONDS",
        help=f"limit for each hook; one that takes longer is killed and ignored "
        f"(default: {DEFAULT_HOOK_TIMEOUT:g})",
    )
    add = parser.add_argument_group("MCP", "MCP servers whose tools are offered too").add_argument
    add(
        "--mcp-server",
        action="append",
        default=[],
        metavar="URL_OR_COMMAND",
        help="an MCP server: an http(s):// URL or a command line (repeatable)",
    )
    add("--mcp-config", metavar="FILE", help='MCP servers in the "mcpServers" JSON format')
    add(
        "--mcp-timeout",
        type=_positive_float,
        default=tools.mcp_timeout,
        metavar="SECONDS",
        help=f"seconds for MCP start-up and for each MCP tool call (default: "
        f"{tools.mcp_timeout:g})",
    )
    add = parser.add_argument_group("output", "what is printed and saved").add_argument
    add("--list-tools", action="store_true", help="print the tools the agent would offer, exit")
    add("--trajectory", metavar="FILE", help="write the whole run as JSON to FILE")
    add(
        "--output",
        choices=("text", "json", "stream-json"),
        default="text",
        help="text summary, one JSON object on stdout, or stream-json: one JSON object per "
        "line as the run goes, the last being the json one (default: text)",
    )
    add("--stream", action="store_true", help="show the LLM's text as it is generated")
    add(
        "-q",
        "--quiet",
        action="store_true",
        help="no live progress view, and only warnings in the log unless --log-level is set",
    )
    add("--show-diff", action="store_true", help="print the full diff of changed files")
    add = parser.add_argument_group("logging").add_argument
    add(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level on stderr (default: INFO; WARNING with the live view or --quiet)",
    )
    add("--log-file", metavar="PATH", help="also write the full log (DEBUG) to this file")
    add("--demo", action="store_true", help="replay the bundled demo (a median() bug fixed "
        "in 7 steps) on a fresh copy of its repository: no key, no network")  # fmt: skip
    add("--version", action="version", version=f"toy-agent {__version__}")
    sessions = parser.add_argument_group(
        "sessions, config and cost",
        "without --task on a terminal: an interactive session. "
        "Every run is saved under ~/.local/state/toy-agent/sessions; flags default to "
        "TOY_AGENT_<FLAG> variables, then to ~/.config/toy-agent/config.toml",
    )
    sadd = sessions.add_argument
    sadd(
        "-c",
        "--continue",
        dest="continue_session",
        action="store_true",
        help="continue the latest session of --repo with this task",
    )
    sadd(
        "--resume",
        metavar="ID_OR_FILE",
        nargs="?",
        const=RESUME_PICK,
        help="continue a saved session: its id, or a session or trajectory file; without "
        "one, pick from the recent sessions",
    )
    sadd(
        "--undo",
        action="store_true",
        help="revert the file changes of the latest run in "
        "--repo and exit (refused if one of the files changed since)",
    )
    sadd(
        "--append-system-prompt",
        metavar="TEXT",
        help="your own instructions, added to the system prompt after the repository's AGENTS.md",
    )
    sadd(
        "--config",
        metavar="FILE",
        help="read defaults from this TOML file instead of ~/.config/toy-agent/config.toml",
    )
    sadd(
        "--max-cost",
        type=_positive_usd,
        metavar="USD",
        help="stop before the LLM call that "
        "would take the spend past USD (outcome cost_limit, exit 1)",
    )
    sadd(
        "--price-input",
        type=_usd,
        metavar="USD",
        help="USD per million input tokens, for a "
        "model the price table does not know (or to override it)",
    )
    sadd("--price-output", type=_usd, metavar="USD", help="USD per million output tokens")
    sadd("--sessions-keep", type=_non_negative_int, default=200, metavar="N",
         help="old sessions are pruned, but the newest N are kept (default: 200)")  # fmt: skip
    sadd("--sessions-keep-days", type=_non_negative_float, default=30.0, metavar="DAYS",
         help="and so is any session saved in the last DAYS days (default: 30)")  # fmt: skip
    batch = parser.add_argument_group(
        "batch runs",
        "every task of a JSONL file, each in its own copy of its repository; the "
        "agent flags above apply to each task",
    )
    badd = batch.add_argument
    badd(
        "--tasks-file",
        metavar="TASKS.jsonl",
        help='one task a line: {"id", "repo", "task", "rev"?, "check"?, "keep"?, "attempts"?, '
        '"max_iterations"?, "setup"?}, or SWE-bench instances (JSON, JSONL)',
    )
    badd(
        "--out",
        metavar="DIR",
        help="where results.jsonl, patches/ and trajectories/ go; a "
        "second run with the same DIR resumes",
    )
    badd(
        "--workers",
        type=_positive_int,
        default=1,
        metavar="N",
        help="tasks run at once (default: 1)",
    )
    badd(
        "--attempts",
        type=_positive_int,
        default=BatchSettings.attempts,
        metavar="N",
        help="independent attempts per task, each in a fresh copy, stopping at the first that "
        f'resolves it (a task\'s "attempts" wins; default: {BatchSettings.attempts})',
    )
    badd("--redo", action="store_true", help="run tasks again that already have a result in DIR")
    badd("--setup", metavar="CMD",
         help="run CMD once in each task's copy before the agent (a virtualenv and an install, "
         "say), like a check; not in the patch (a task's setup wins)")  # fmt: skip
    badd("--env", metavar="ENV",
         help="where each task's commands and checks run: host (default), rootfs:DIR "
         "(bubblewrap in that root), docker:IMAGE or podman:IMAGE ({id}: the task's id, "
         "{image_id}: as SWE-bench's images spell it); "
         "the copy is at /testbed (a task's env wins)")  # fmt: skip
    badd("--task-timeout", type=_positive_float, metavar="SECONDS",
         help="stop a task's agent after SECONDS (outcome timeout; its work is still "
         "checked and recorded)")  # fmt: skip
    badd("--repo-map", action="append", default=[], metavar="OWNER/NAME=PATH",
         help="SWE-bench instances: where the repository OWNER/NAME is (a clone, or a git "
         "URL to clone into --repo-cache); repeatable")  # fmt: skip
    badd(
        "--repo-cache",
        metavar="DIR",
        help="SWE-bench instances: clone each repository into DIR once, for every task",
    )
    badd(
        "--hints",
        action="store_true",
        help="SWE-bench instances: give the agent the instance's hints_text too",
    )
    badd("--filter", metavar="REGEX", help="run only the tasks whose id REGEX finds")
    badd("--slice", metavar="A:B", help="run only tasks A to B (Python's slice, after --filter)")
    badd("--gold", action="store_true",
         help="SWE-bench instances: apply each instance's own patch instead of running the "
         "agent, to prove the environments")  # fmt: skip
    badd(
        "--model-name",
        metavar="NAME",
        help="model_name_or_path in preds.jsonl (default: provider/model)",
    )
    badd(
        "--patch-exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave the files GLOB matches out of preds.jsonl's model_patch; repeatable",
    )
    badd("--test-cmd", metavar="CMD", default="python -m pytest -rA",
         help="SWE-bench instances: the command their tests' node ids are given to "
         "(default: python -m pytest -rA)")  # fmt: skip
    badd("--max-total-cost", type=_positive_float, metavar="USD",
         help="no new task starts once the finished ones cost this much (--max-cost still "
         "limits each task)")  # fmt: skip
    badd(
        "--check-timeout",
        type=_positive_float,
        default=agent.check_timeout,
        metavar="SECONDS",
        help=f"limit for each run of a --check or task check command (default: "
        f"{agent.check_timeout:g})",
    )
    badd(
        "--executor",
        choices=tuple(EXECUTORS),
        default=next(iter(EXECUTORS)),
        help=f"{', or '.join(cls.summary for cls in EXECUTORS.values())} "
        f"(default: {next(iter(EXECUTORS))})",
    )
    badd(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster (default: RAY_ADDRESS, else a "
        "local Ray instance started for the batch)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: this process's own, which then also starts with
    the garbage collector paused, see _collector_paused) and return its exit code."""
    as_process = argv is None
    argv = sys.argv[1:] if argv is None else argv
    debug = "DEBUG" in argv
    stopped_by: list[int] = []
    args = None  # the settings, once read
    with _stop_signals_interrupt(stopped_by), _collector_paused(as_process) as started:
        try:
            if argv[:1] and argv[0] in SUBCOMMANDS:
                return _subcommand(argv[0], argv[1:])
            parser = build_parser()
            parser.parse_args(argv)
            args = _settings(parser, argv)
            args.stopped_by = stopped_by  # the run's JSON says the exit code a signal makes
            debug = args.log_level == "DEBUG"
            code = _run(args, started)
        except UsageError as exc:
            code = _fail(exc, EXIT_USAGE, debug, json_output=_wants_json(argv, args))
        except ModuleNotFoundError as exc:
            package = (exc.name or "").split(".")[0]
            if package not in _DEPENDENCIES | providers.sdk_packages():
                raise  # our own bug
            missing = UsageError(
                f"the {exc.name} package is missing: install toy-agent's dependencies with "
                "`pip install -e .` in its folder (or `pip install toy-agent`), in the "
                "environment you run it from"
            )
            code = _fail(missing, EXIT_USAGE, debug, json_output=_wants_json(argv, args))
        except KeyboardInterrupt:
            print("toy-agent: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
        except BrokenPipeError:  # `| head`: the reader left; stop quietly like other tools
            _silence_stdout()
            code = EXIT_BROKEN_PIPE
    return 128 + stopped_by[-1] if stopped_by else code


def _subcommand(name: str, argv: list[str]) -> int:
    import importlib

    module, _, function = SUBCOMMANDS[name].partition(":")
    code: int = getattr(importlib.import_module(module), function)(argv)
    return code


def _settings(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The flags over TOY_AGENT_ variables over the config file (see toy_agent.config)."""
    from toy_agent.config import ConfigError, load_settings
    from toy_agent.messages import visible

    try:
        settings = load_settings(parser, argv, dotenv=Path.cwd() / ".env")
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    for warning in settings.warnings:  # they may quote a .env or config file
        print(f"toy-agent: warning: {visible(warning)}", file=sys.stderr)
    args = settings.args
    args.hooks = _hooks(args)
    if args.demo:
        _use_demo(args)
    if args.task_text is not None:
        if args.task is not None:
            raise UsageError("give the task once: as TASK or as --task, not both")
        args.task = args.task_text
    if args.task is None and args.replay and args.tasks_file is None:
        if not Path(args.replay).expanduser().is_file():  # not "--task is required"
            raise UsageError(f"replay file not found: {args.replay}")
        args.task = _recorded_task(args.replay)  # `--replay FILE` alone replays its task
    if args.resume == RESUME_PICK:
        args.resume = _pick_session(args, settings.given)
    _resume_repo(args, settings.given)
    args.restored = _restore_session_settings(args, settings.given)
    args.permissions = _permissions(args, settings.given)
    args.llm_provider = args.llm_provider and providers.canonical_name(args.llm_provider)
    args.provider_note = ""
    if args.llm_provider is None:
        args.llm_provider = "replay" if args.replay else _provider_for(args)
    return args


def _resume_repo(args: argparse.Namespace, given: frozenset[str]) -> None:
    """--resume without --repo works in the session's own repository."""
    if args.resume and "repo" not in given:  # the session's own repository
        from toy_agent.sessions import SessionStore

        store = SessionStore()
        recorded = _load_session(args.resume, store).repo
        if recorded and not Path(recorded).is_dir():
            raise UsageError(f"--resume {args.resume}: its repository {recorded} is gone; "
                             "pass --repo PATH")  # fmt: skip
        elsewhere = store.is_elsewhere(args.resume)  # a file anyone could have written
        if recorded and elsewhere and Path(recorded).resolve() != Path.cwd().resolve():
            raise UsageError(
                f"--resume {args.resume}: the file names the repository {recorded}; pass "
                f"--repo {recorded} to work there (a file can come from anyone, so it does not "
                "choose the repository by itself)"
            )
        args.repo = recorded or args.repo


def _resumed_settings(args: argparse.Namespace) -> tuple[str, dict[str, Any]] | None:
    """The id and recorded settings of the session --resume or --continue goes on with; None
    for a new session, or a file from elsewhere (anyone's: it decides no setting)."""
    from toy_agent.sessions import SessionError, SessionStore

    store = SessionStore()
    if args.resume:
        if store.is_elsewhere(args.resume):
            return None
        session: Session | None = _load_session(args.resume, store)
    elif args.continue_session:
        try:
            session = store.latest(Path(args.repo).expanduser().resolve())
        except SessionError as exc:  # the latest cannot be read: not an older one instead
            raise UsageError(str(exc)) from exc
    else:
        session = None
    return (session.id, session.settings) if session else None  # None: the run says so


def _restore_session_settings(args: argparse.Namespace, given: frozenset[str]) -> str:
    """--resume and --continue go on with the session's provider, model, base URL, tool format,
    permission mode and command settings, over the config file and TOY_AGENT_ variables; a flag
    on this command line wins. Keys are never saved, so never restored. Returns what was
    restored, for the banner ("" when nothing)."""
    from toy_agent.permissions import DEFAULT_MODE, PERMISSION_MODES

    found = _resumed_settings(args)
    if found is None:
        return ""
    session_id, recorded = found
    restored: list[str] = []

    def restore(dest: str, value: Any, label: str) -> None:
        if dest not in given and value not in (None, "", []) and getattr(args, dest) != value:
            setattr(args, dest, value)
            restored.append(label)

    provider = str(recorded.get("provider") or "")
    if not args.replay and provider in providers.PROVIDERS:
        named = args.llm_provider if "llm_provider" in given else None
        claimed = providers.provider_for_model(args.model) if "model" in given else None
        same = (named is None or providers.canonical_name(named) == provider) and (
            claimed is None or claimed.name == provider
        )
        if same:
            restore("llm_provider", provider, f"provider {provider}")
            if "model" not in given:
                restore("model", recorded.get("model"), f"model {recorded.get('model')}")
            url, row = recorded.get("base_url"), providers.PROVIDERS[provider]
            now = args.base_url or os.environ.get(row.base_url_variable) or row.default_base_url
            if url != now:
                restore("base_url", url, f"base URL {url}")
    if recorded.get("tool_format"):
        restore("tool_format", recorded["tool_format"], f"tool format {recorded['tool_format']}")
    mode = recorded.get("permission_mode")
    current = args.permission_mode or ("ask" if args.confirm else DEFAULT_MODE)
    if not {"confirm", "permission_mode"} & given and mode in PERMISSION_MODES and mode != current:
        args.permission_mode, args.confirm = mode, False  # the session's, over the config's
        restored.append(f"permission mode {mode}")
    if recorded.get("allow_commands") is True:
        restore("allow_commands", True, "commands")
    rules = recorded.get("command_rules") or {}
    restore("allow_command", list(rules.get("allow") or []), "command rules")
    restore("deny_command", list(rules.get("deny") or []), "command rules")
    if not restored:
        return ""
    return f"restored from {session_id}: {', '.join(dict.fromkeys(restored))}"


def _provider_for(args: argparse.Namespace) -> str:
    """The provider a model name says (claude-*, gemini-*, gpt-*, ...). A name no provider
    claims is a local or proxied model: with a base URL it goes to the OpenAI-compatible
    provider (Ollama, vLLM, llama.cpp all speak its API), or to the one provider whose base-URL
    variable is set; without one it is a usage error naming the choices. No model: the default."""
    row = providers.provider_for_model(args.model)
    if row is not None or not args.model:
        return row.name if row else providers.DEFAULT_PROVIDER
    if args.base_url:
        chosen = next(r for r in providers.PROVIDERS.values() if r.keyless_base_url)
        where = args.base_url
    else:
        dotenv = _dotenv_values(args)
        variables = {**dotenv, **os.environ}
        set_by = [r for r in providers.PROVIDERS.values() if variables.get(r.base_url_variable)]
        if len(set_by) != 1:
            names = "|".join(providers.PROVIDERS)
            raise UsageError(
                f"no provider claims the model name {args.model!r}: pass --llm-provider "
                f"{names}, or --base-url URL for a local OpenAI-compatible server (Ollama, "
                "vLLM, llama.cpp)"
            )
        chosen = set_by[0]
        where = variables[chosen.base_url_variable]
    args.provider_note = (
        f"{chosen.name}-compatible server at {where}: no provider claims {args.model}"
    )
    return chosen.name


def _dotenv_values(args: argparse.Namespace) -> dict[str, str]:
    """What the .env in the current folder would set (read again, as _run applies it)."""
    from toy_agent.variables import load_dotenv_file

    repo = Path(args.repo).expanduser()
    return load_dotenv_file(Path.cwd() / ".env", repo.resolve() if repo.is_dir() else None)


def _permissions(args: argparse.Namespace, given: frozenset[str]) -> Permissions:
    """The permission mode and command rules. --confirm is --permission-mode ask (it wins over
    a mode from the config file or the environment; with another mode on the command line it
    is a contradiction)."""
    from toy_agent.permissions import DEFAULT_MODE, CommandRules, Permissions

    mode = args.permission_mode
    if args.confirm:
        if mode not in (None, "ask") and "permission_mode" in given:
            raise UsageError(f"--confirm is --permission-mode ask: it contradicts "
                             f"--permission-mode {mode}; give one of them")  # fmt: skip
        mode = "ask"
    for pattern in (*args.allow_command, *args.deny_command):
        if not pattern.strip():
            raise UsageError("--allow-command and --deny-command need a non-empty PATTERN")
    rules = CommandRules(tuple(args.allow_command), tuple(args.deny_command))
    unused = {"allow_command", "deny_command"} & given
    checks = args.check or args.tasks_file  # a deny rule refuses a matching check too
    if checks:
        unused.discard("deny_command")
    if unused and not args.allow_commands:
        named = "--allow-command applies" if checks else "--allow-command and --deny-command apply"
        print(f"toy-agent: warning: {named} to run_command, which is off: add --allow-commands "
              "to offer it", file=sys.stderr)  # fmt: skip
    if mode == "read-only" and args.allow_commands:
        print("toy-agent: warning: --permission-mode read-only offers only tools that change "
              "nothing: --allow-commands has no effect (run_command is not offered)",
              file=sys.stderr)  # fmt: skip
    return Permissions(mode or DEFAULT_MODE, rules)


def _hooks(args: argparse.Namespace) -> Hooks:
    from toy_agent.hooks import HookError, Hooks

    try:
        return Hooks.parse(args.hook, args.hook_timeout)
    except HookError as exc:
        raise UsageError(str(exc)) from exc


def _pick_session(args: argparse.Namespace, given: frozenset[str]) -> str:
    """--resume without an id: the recent sessions (of --repo, when given) to pick from on a
    terminal; elsewhere the list, and a usage error asking for an id."""
    from toy_agent.sessions import SessionStore, format_sessions, pick_session, recent_sessions

    store = SessionStore()
    repo = Path(args.repo).expanduser().resolve() if "repo" in given else None
    found = recent_sessions(store, repo)
    if not found:
        raise UsageError(f"no saved session to resume{f' of {repo}' if repo else ''} "
                         f"(sessions: {store.root})")  # fmt: skip
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(format_sessions(found), file=sys.stderr)
        raise UsageError("--resume without an id picks a session on a terminal: pass "
                         "--resume ID, with an id from the list above")  # fmt: skip
    chosen = pick_session(found)
    if chosen is None:
        raise UsageError("--resume: no session chosen")
    return chosen


# Third-party packages toy_agent imports (by module name): one missing is a setup problem.
_DEPENDENCIES = frozenset(
    {"mcp", "mcp_types", "dotenv", "rich", "httpx", "pydantic", "anyio", "tomli", "prompt_toolkit"}
)  # and the providers' SDKs


def _wants_json(argv: list[str], args: argparse.Namespace | None = None) -> str | None:
    """ "json" or "stream-json" when the run asks for it, else None. Once the settings are
    read (`args`), their --output; before that (a bad flag, a bad setting) the raw arguments'
    --output, else TOY_AGENT_OUTPUT or the config file's `output`, read leniently."""
    if args is not None:
        output = args.output
    else:
        from toy_agent.config import lenient_output

        output = _raw_flag(argv, "--output")
        if output is None:
            repo = _raw_flag(argv, "--repo", "-r")
            output = lenient_output(_raw_flag(argv, "--config"), repo, dotenv=Path.cwd() / ".env")
    return output if output in ("json", "stream-json") else None


def _raw_flag(argv: list[str], *names: str) -> str | None:
    """The value a flag is last given in arguments that may not parse, or None."""
    found = None
    for flag, value in zip(argv, [*argv[1:], None], strict=False):
        name, equals, joined = flag.partition("=")
        if name in names and name.startswith("--") and equals:
            found = joined
        elif flag in names and value is not None:
            found = value
    return found


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


@contextlib.contextmanager
def _stop_signals_interrupt(received: list[int]) -> Iterator[None]:
    """SIGTERM and SIGHUP stop the run the way Ctrl-C does (KeyboardInterrupt in the main
    thread: the command running is killed with its processes, the summary and trajectory are
    written); main then returns 128 + the signal number: 143 for SIGTERM, 129 for SIGHUP."""
    names = ("SIGTERM", "SIGHUP")
    signals = [getattr(signal, name) for name in names if hasattr(signal, name)]
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def interrupt(signum: int, frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _collector_paused(pause: bool) -> Iterator[Callable[[], None]]:
    """Start with Python's cyclic garbage collector paused, when `pause`; yields `started`,
    which the run calls once the provider's SDK is loaded (and once its MCP servers are
    connected), to turn it back on.

    Importing an SDK builds hundreds of thousands of objects that all live as long as the
    process, and the collections their allocations trigger find nothing to free: they cost a
    sixth of anthropic's import (bench/bench_startup.py). `started` freezes what exists, so
    later collections skip it too, and the one at the process's exit (half a second of CPU
    for the mcp SDK's objects), then resumes collecting; leaving the block resumes in any
    case. Only for main's own process: a caller's objects are never frozen."""
    paused = pause and gc.isenabled()
    if paused:
        gc.disable()

    def started() -> None:
        if paused:
            gc.freeze()
            gc.enable()

    try:
        yield started
    finally:
        if paused:
            gc.enable()


def _run(args: argparse.Namespace, started: Callable[[], None] = lambda: None) -> int:
    from toy_agent.budget import oversized_task
    from toy_agent.config import HOOK_VARIABLES, load_instructions
    from toy_agent.llm import preload_sdk
    from toy_agent.variables import load_dotenv_file
    from toy_agent.view import COMMAND_TAIL_LINES, TerminalView, run_banner

    if not (args.list_tools or args.undo):
        preload_sdk(args.llm_provider, then=started)

    repo = _repo(args.repo)
    live = args.output == "text" and not args.quiet and sys.stdout.isatty()
    batch = args.tasks_file is not None or args.out is not None
    tail = 20 if args.stream else COMMAND_TAIL_LINES
    view = (
        TerminalView(sys.stdout, tail_lines=tail) if live and not (batch or args.list_tools)
        else None
    )  # fmt: skip
    redactor, handlers = _setup_logging(args, live or batch, view, batch=batch)
    keys = providers.key_variables()
    for name, value in load_dotenv_file(Path.cwd() / ".env", repo).items():
        if name.startswith(HOOK_VARIABLES):
            continue  # never from a .env (toy_agent.config says why), nor for what it starts
        os.environ[name] = value
        if name in keys:
            redactor.add_secret(value)
    mcp = None
    try:
        if batch:
            started()  # the tasks load their SDK in threads of their own
            _refuse_single_run_flags(args)
            return _run_batch(args, live)
        if args.list_tools:
            settings = _run_settings(args, view, redactor)
            tools = _local_tools(settings, repo, redactor)
            mcp = _mcp_tools(settings, redactor)
            started()
            return _list_tools(args, tools, mcp)
        if args.undo:
            return _undo(args, repo)
        task = None if _interactive(args) else _task(args.task)
        if task is not None and (too_big := oversized_task(task, args.context_budget)):
            raise UsageError(f"{too_big}, or raise --context-budget")
        if args.permissions.may_ask(args.allow_commands) and args.task == "-":
            flag = "--confirm" if args.confirm else f"--permission-mode {args.permissions.mode}"
            raise UsageError(
                f"{flag} reads answers from stdin, so the task cannot: pass it as --task TEXT"
            )
        _check_writable(args.trajectory, "--trajectory")
        settings = _run_settings(args, view, redactor)
        tools = _local_tools(settings, repo, redactor)
        instructions = load_instructions(tools, args.append_system_prompt, redactor.redact)
        notes = [note for note in (args.provider_note, args.restored) if note]
        if view is not None:  # at once: the provider's SDK may take seconds to load
            view.start(run_banner(args.llm_provider, args.model, repo, tools, replay=args.replay,
                                  mcp=bool(args.mcp_server or args.mcp_config),
                                  instructions=instructions.source,
                                  permissions=args.permissions), notes)  # fmt: skip
        for note in notes if view is None else ():
            logging.getLogger("toy_agent").info("%s", note)
        llm = _llm_client(settings)  # its SDK still loading: the servers start meanwhile
        mcp = _mcp_tools(settings, redactor)
        if mcp is not None:
            started()  # the mcp SDK's objects frozen too (the provider's, once loaded)
        models = _model_client(settings)
        return _run_agent(args, settings, repo, task, llm, mcp, redactor, view, tools, models,
                          instructions.text)  # fmt: skip
    finally:
        if view is not None:
            view.close()
        if mcp is not None:
            mcp.close()
        for handler in handlers:
            logging.getLogger().removeHandler(handler)
            handler.close()


def _model_client(settings: RunSettings) -> Callable[[str, str], LlmClient]:
    """/model NAME in a session: a client for NAME, built as the first one was (see
    ModelSettings.switched_to for the provider and base URL it gets), its SDK loading while
    the next task is typed. Raises LlmConfigError."""
    from toy_agent.build import build_llm
    from toy_agent.llm import preload_sdk

    def make(name: str, current: str) -> LlmClient:
        switched = settings.llm.switched_to(name, current)
        client = build_llm(switched)
        preload_sdk(switched.provider)
        return client

    return make


def _interactive(args: argparse.Namespace) -> bool:
    """No task on a terminal: an interactive session (text only)."""
    if args.task is not None or not sys.stdin.isatty():
        return False
    if args.output == "json":
        raise UsageError("the interactive session prints text: with --output json give --task")
    return True


def _run_settings(
    args: argparse.Namespace, view: TerminalView | None, redactor: Redactor
) -> RunSettings:
    """The run's settings from the flags (a live view shows the thinking and the stream)."""
    from toy_agent.llm import LlmConfigError
    from toy_agent.mcp_config import McpError
    from toy_agent.settings import RunSettings

    try:
        return RunSettings.from_args(args, live=view is not None)
    except LlmConfigError as exc:
        raise UsageError(str(exc)) from exc
    except McpError as exc:
        raise UsageError(redactor.redact(str(exc))) from exc


def _local_tools(settings: RunSettings, repo: Path, redactor: Redactor) -> CodeRepositoryTools:
    """The repository tools, with the sandbox resolved: `--sandbox bwrap` without a working
    bwrap is a usage error, `auto` without one warns (once, and only when commands run)."""
    from toy_agent.build import build_tools
    from toy_agent.sandbox import SandboxUnavailable

    try:
        return build_tools(settings.tools, repo, redactor)
    except SandboxUnavailable as exc:
        raise UsageError(f"--sandbox bwrap: {exc}, or pass --sandbox off") from exc


def _llm_client(settings: RunSettings) -> LlmClient:
    from toy_agent.build import build_llm
    from toy_agent.llm import LlmConfigError

    try:
        return build_llm(settings.llm)
    except LlmConfigError as exc:
        raise UsageError(str(exc)) from exc


def _mcp_tools(settings: RunSettings, redactor: Redactor) -> McpTools | None:
    from toy_agent.build import open_mcp
    from toy_agent.mcp_tools import McpError

    try:
        return open_mcp(settings.tools, redactor)
    except McpError as exc:
        raise UsageError(redactor.redact(str(exc))) from exc


def _setup_logging(
    args: argparse.Namespace,
    live: bool,
    view: TerminalView | None = None,
    *,
    batch: bool = False,
) -> tuple[Redactor, list[logging.Handler]]:
    """Console at --log-level, --log-file at DEBUG; both redacted. Returns the handlers.
    On the live view's terminal, console records are printed above its live line. In a batch
    each record names its task, and on a terminal first clears the progress line (which is
    drawn again at the batch's next change, or within half a second)."""
    from toy_agent.redaction import RedactingFilter, Redactor
    from toy_agent.view import VisibleFormatter, erase_line

    redactor = Redactor()  # it reads the providers' keys from the environment itself
    quiet = live or args.quiet or args.output != "text"  # scripts read stderr for problems
    level = args.log_level or ("WARNING" if quiet else "INFO")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    console: logging.Handler = logging.StreamHandler(sys.stderr)
    if view is not None and sys.stderr.isatty():
        console = view.log_handler()
    console.setLevel(level)
    clear = (
        str(erase_line()) if batch and live and sys.stdout.isatty() and sys.stderr.isatty() else ""
    )
    console.setFormatter(VisibleFormatter("%(levelname)s %(message)s", lead=clear))
    handlers: list[logging.Handler] = [console]
    if args.log_file:
        try:
            file_handler = _open_log_file(args.log_file)
        except OSError as exc:
            raise UsageError(f"cannot write --log-file {args.log_file}: "
                             f"{exc.strerror or exc}") from None  # fmt: skip
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handlers.append(file_handler)
    for handler in handlers:
        if batch:
            from toy_agent.batch.worker import TaskLogFilter

            handler.addFilter(TaskLogFilter())
        handler.addFilter(RedactingFilter(redactor))
        root.addHandler(handler)
    for noisy in (
        "httpx",
        "httpx2",
        "httpcore",
        "httpcore2",
        "hpack",
        *providers.sdk_loggers(),
        "mcp",
        "asyncio",
        "urllib3",
        "sse_starlette",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return redactor, handlers


def _repo(path: str) -> Path:
    repo = Path(path).expanduser()
    try:
        mode = repo.stat().st_mode
    except FileNotFoundError:
        raise UsageError(f"--repo {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--repo {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISDIR(mode):
        raise UsageError(f"--repo {path} is not a directory")
    if not os.access(repo, os.R_OK | os.X_OK):
        raise UsageError(f"--repo {path} is not readable")
    return repo.resolve()


def _check_writable(path: str | None, flag: str) -> None:
    """Fail before the run, not after it, when its output file cannot be written."""
    if path is None:
        return
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write {flag} {path}: {exc.strerror or exc}") from exc
    if target.is_dir() or not os.access(target if target.exists() else target.parent, os.W_OK):
        raise UsageError(f"cannot write {flag} {path}: not a writable file")


def _task(task: str | None) -> str:
    if task is None:
        raise UsageError(
            "--task is required when stdin is not a terminal (use --task - to "
            "read it from stdin; on a terminal, no --task opens a session)"
        )
    if task == "-":
        task = sys.stdin.read()
    if not task.strip():
        raise UsageError("the task is empty")
    return task.strip()


def _fail(exc: Exception, code: int, debug: bool, *, json_output: str | None = None) -> int:
    """One line on stderr; with --output json also the one JSON object stdout always gets.
    The message may quote a file's content or name (a session's repository, a config value):
    its control characters are shown as escapes."""
    from toy_agent.messages import visible

    if debug:
        logging.getLogger("toy_agent").exception("exiting with code %d", code)
    print(f"toy-agent: error: {visible(str(exc))}", file=sys.stderr)
    if json_output:
        from toy_agent.events import OUTPUT_SCHEMA_VERSION
        from toy_agent.view import to_json

        kind = {"type": "run_finished"} if json_output == "stream-json" else {}
        print(to_json({**kind, "schema_version": OUTPUT_SCHEMA_VERSION, "success": False,
                       "outcome": "usage_error", "error": str(exc),
                       "exit_code": code}))  # fmt: skip
    return code


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _hook_item(text: str) -> str:
    """--hook's argparse type: checked as it is read, so one from the config file or
    TOY_AGENT_HOOK is named by its key and file, or its variable, like any other value."""
    from toy_agent.hooks import HookError, parse_hook

    try:
        parse_hook(text)
    except HookError as exc:  # argparse or the config's message names the flag and value
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--hook {text!r}: ")) from None
    return text


def _model_option_item(text: str) -> str:
    """--model-option's argparse type, checked as it is read (see _hook_item)."""
    from toy_agent.llm import LlmConfigError, parse_model_options

    try:
        parse_model_options([text])
    except LlmConfigError as exc:
        problem = str(exc).removeprefix(f"--model-option {text!r}: ")
        raise argparse.ArgumentTypeError(problem) from None
    return text


def _open_log_file(path: str) -> logging.FileHandler:
    """The --log-file handler, written to once now: a full disk or /dev/full fails here, as
    a usage error, not as logging tracebacks mid-run."""
    handler = logging.FileHandler(path, encoding="utf-8", errors="backslashreplace")
    stream = handler.stream
    assert stream is not None  # FileHandler opens at once unless delay=True
    try:
        stream.write(f"{_now()} toy-agent {__version__} log opened\n")
        stream.flush()
    except OSError:
        with contextlib.suppress(OSError):
            stream.close()
        raise
    return handler


def _now() -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S")


def _number(
    name: str, wants: str, *rules: tuple[Callable[[float], bool], str]
) -> Callable[[str], float]:
    """A float flag's argparse type: a finite number that passes each rule (a test, and the
    message when it fails, where `{text}` is what was given). argparse names the type by its
    `__name__` ("invalid _usd value: 'abc'") when the text is no number at all."""

    def check(text: str) -> float:
        value = float(text)
        for passes, message in rules:
            if not math.isfinite(value) or not passes(value):
                raise argparse.ArgumentTypeError(message.format(text=text))
        return value

    check.__name__ = check.__qualname__ = name
    check.wants = wants  # type: ignore[attr-defined]
    return check


_positive_int.wants = "a whole number, 1 or more"  # type: ignore[attr-defined]
_non_negative_int.wants = "a whole number, 0 or more"  # type: ignore[attr-defined]
_DOLLARS = (lambda value: value >= 0, "must be an amount of US dollars, got {text}")
_non_negative_float = _number(
    "_non_negative_float",
    "a number, 0 or more",
    (lambda v: v >= 0, "must be 0 or more, got {text}"),
)
_positive_float = _number(
    "_positive_float",
    "a number of seconds above 0",
    (lambda v: v > 0, "must be a number of seconds above 0, got {text}"),
)
_usd = _number("_usd", "an amount of US dollars", _DOLLARS)
_positive_usd = _number(
    "_positive_usd",
    "an amount of US dollars above 0",
    _DOLLARS,
    (lambda v: v > 0, "must be above 0"),
)
