"""The command line: parse flags, build the objects, run, map the outcome to an exit code.

Heavy modules (the agent, the provider SDKs, mcp) are imported only after the flags are
parsed, so `--help` and `--version` are instant.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toy_agent import __version__

if TYPE_CHECKING:  # imported for real only where used, so --help stays instant
    from toy_agent.llm import LlmClient
    from toy_agent.mcp_tools import McpTools
    from toy_agent.redaction import Redactor
    from toy_agent.tools import CodeRepositoryTools

EXIT_COMPLETED, EXIT_NOT_COMPLETED, EXIT_USAGE, EXIT_PROVIDER, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `... | head`
OUTCOME_EXIT_CODES = {
    "completed": EXIT_COMPLETED,
    "max_iterations": EXIT_NOT_COMPLETED,
    "provider_error": EXIT_PROVIDER,
    "cancelled": EXIT_INTERRUPTED,
    "replay_diverged": EXIT_NOT_COMPLETED,
}
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class UsageError(Exception):
    """A mistake in the flags or the environment: one line on stderr, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    from toy_agent.context import DEFAULT_CONTEXT_BUDGET
    from toy_agent.llm import DEFAULT_MODELS, PROVIDER_CLASSES
    from toy_agent.parsing import FORMAT_NAMES
    from toy_agent.sandbox import SANDBOX_MODES

    models = ", ".join(f"{p}: {m}" for p, m in DEFAULT_MODELS.items())
    parser = argparse.ArgumentParser(
        prog="toy-agent",
        description="A ReAct coding agent: it thinks, calls a tool, observes, until the task "
        "is complete. Exit codes: 0 completed, 1 not completed, 2 usage or configuration "
        "error, 3 LLM provider failure, 130 interrupted (143 SIGTERM, 129 SIGHUP).",
    )
    add = parser.add_argument
    add("--task", metavar="TEXT", help="the task for the agent; '-' reads it from stdin")
    add("--repo", default=".", metavar="PATH", help="the repository to work on (default: .)")
    add("--max-iterations", type=_positive_int, default=10, metavar="N",
        help="maximum THINK/ACT cycles (default: 10)")
    add("--llm-provider", choices=(*PROVIDER_CLASSES, "replay"),
        help="the LLM provider (default: claude, or replay when --replay is given); replay "
        "re-runs a --trajectory file offline")
    add("--model", metavar="NAME", help=f"model name (defaults: {models})")
    add("--base-url", metavar="URL", help="API base URL, e.g. http://localhost:11434/v1 for Ollama "
        "(default: the SDK's, or ANTHROPIC_BASE_URL / GOOGLE_GEMINI_BASE_URL / OPENAI_BASE_URL)")
    add("--replay", metavar="FILE", help="trajectory whose LLM responses --llm-provider "
        "replay plays back")
    add("--replay-lenient", action="store_true", help="keep replaying when the tools answer "
        "differently from the recording (default: stop with outcome replay_diverged, exit 1)")
    add("--max-retries", type=_non_negative_int, default=4, metavar="N",
        help="retries of transient provider failures (default: 4)")
    add("--timeout", type=_positive_float, default=120.0, metavar="SECONDS",
        help="seconds to wait for one LLM response (default: 120)")
    add("--tool-format", choices=FORMAT_NAMES, default="xml",
        help="how the LLM writes actions: xml tags (default), react text, or the provider's "
        "native tool calls")
    add("--context-budget", type=_positive_int, default=DEFAULT_CONTEXT_BUDGET, metavar="TOKENS",
        help=f"token budget for what is sent to the LLM (default: {DEFAULT_CONTEXT_BUDGET})")
    add("--allow-commands", action="store_true",
        help="offer the run_command tool (shell commands in the repository)")
    add("--sandbox", choices=SANDBOX_MODES, default="auto",
        help="where run_command runs: bwrap (bubblewrap: writes only in the repository and "
        "/tmp, home hidden, no network, no surviving processes), off, or auto: bwrap when it "
        "works, else off with a warning (default: auto)")
    add("--sandbox-network", action="store_true",
        help="let sandboxed commands use the network (default: no network at all)")
    add("--confirm", action="store_true",
        help="ask before each write_file, edit_file or run_command")
    add("--mcp-server", action="append", default=[], metavar="URL_OR_COMMAND",
        help="an MCP server: an http(s):// URL or a command line (repeatable)")
    add("--mcp-config", metavar="FILE", help='MCP servers in the "mcpServers" JSON format')
    add("--mcp-timeout", type=_positive_float, default=30.0, metavar="SECONDS",
        help="seconds for MCP start-up and for each MCP tool call (default: 30)")
    add("--list-tools", action="store_true", help="print the tools the agent would offer, exit")
    add("--trajectory", metavar="FILE", help="write the whole run as JSON to FILE")
    add("--output", choices=("text", "json"), default="text",
        help="text summary, or one JSON object on stdout (default: text)")
    add("--stream", action="store_true", help="show the LLM's text as it is generated")
    add("--quiet", action="store_true",
        help="no live progress view, and only warnings in the log unless --log-level is set")
    add("--show-diff", action="store_true", help="print the full diff of changed files")
    add("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level on stderr (default: INFO; WARNING with the live view or --quiet)")
    add("--log-file", metavar="PATH", help="also write the full log (DEBUG) to this file")
    add("--version", action="version", version=f"toy-agent {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.llm_provider is None:
        args.llm_provider = "replay" if args.replay else "claude"
    debug = args.log_level == "DEBUG"
    stopped_by: list[int] = []
    with _stop_signals_interrupt(stopped_by):
        try:
            code = _run(args)
        except UsageError as exc:
            code = _fail(exc, EXIT_USAGE, debug)
        except KeyboardInterrupt:
            print("toy-agent: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
        except BrokenPipeError:  # `| head`: the reader left; stop quietly like other tools
            _silence_stdout()
            code = EXIT_BROKEN_PIPE
    return 128 + stopped_by[-1] if stopped_by else code


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


def _run(args: argparse.Namespace) -> int:
    from toy_agent.environment import KEY_VARIABLES, load_dotenv_file

    repo = _repo(args.repo)
    live = args.output == "text" and not args.quiet and sys.stdout.isatty()
    redactor, handlers = _setup_logging(args, live)
    for name, value in load_dotenv_file(Path.cwd() / ".env", repo).items():
        os.environ[name] = value
        if name in KEY_VARIABLES:
            redactor.add_secret(value)
    mcp = None
    try:
        if args.list_tools:
            tools = _local_tools(args, repo, redactor)
            mcp = _mcp_tools(args, redactor)
            return _list_tools(args, tools, mcp)
        task = _task(args.task)
        if args.confirm and args.task == "-":
            raise UsageError("--confirm reads answers from stdin, so the task cannot: "
                             "pass it as --task TEXT")
        _check_writable(args.trajectory, "--trajectory")
        tools = _local_tools(args, repo, redactor)
        llm = _llm_client(args)
        mcp = _mcp_tools(args, redactor)
        return _run_agent(args, repo, task, llm, mcp, redactor, live, tools)
    finally:
        if mcp is not None:
            mcp.close()
        for handler in handlers:
            logging.getLogger().removeHandler(handler)
            handler.close()


def _run_agent(
    args: argparse.Namespace,
    repo: Path,
    task: str,
    llm: LlmClient,
    mcp: McpTools | None,
    redactor: Redactor,
    live: bool,
    tools: CodeRepositoryTools,
) -> int:
    from toy_agent.agent import ReactAgent
    from toy_agent.events import TrajectoryRecorder
    from toy_agent.view import TerminalView, format_summary, make_confirm, to_json, use_color

    subscribers: list[Any] = []
    if live:
        subscribers.append(TerminalView(sys.stdout))
    recorder = None
    if args.trajectory:
        recorder = TrajectoryRecorder(Path(args.trajectory), redactor.redact_obj)
        subscribers.append(recorder)
    confirm = make_confirm(tools, _ask, sys.stderr) if args.confirm else None
    agent = ReactAgent(
        llm, repo, args.max_iterations, tools=tools, mcp_tools=mcp, tool_format=args.tool_format,
        context_budget=args.context_budget, allow_commands=args.allow_commands,
        redactor=redactor, on_event=subscribers, confirm=confirm, stream=args.stream and live,
    )
    outcome = agent.run_result(task)
    result = {**redactor.redact_obj(outcome.to_dict()), "sandbox": tools.sandbox}
    if args.output == "json":
        print(to_json(result))
    else:
        diffs = redactor.redact_obj(outcome.diffs)
        print(format_summary(result, diffs, show_diff=args.show_diff,
                             color=use_color(sys.stdout)))
    sys.stdout.flush()
    if recorder is not None and recorder.error:
        print(f"toy-agent: error: {recorder.error}", file=sys.stderr)
    return OUTCOME_EXIT_CODES[result["outcome"]]


def _list_tools(
    args: argparse.Namespace, tools: CodeRepositoryTools, mcp: McpTools | None
) -> int:
    import json

    from toy_agent.routes import RouteTable

    specs = RouteTable.build(tools, [mcp] if mcp else []).specs
    if args.output == "json":
        print(json.dumps(specs, indent=2))
        return EXIT_COMPLETED
    for spec in specs:
        schema = spec.get("parameters") or {}
        required = set(schema.get("required", []))
        params = ", ".join(p if p in required else f"{p}?" for p in schema.get("properties", {}))
        description = (spec.get("description") or "").strip()
        print(f"{spec['name']}({params})")
        print(f"    {description.splitlines()[0] if description else ''}")
    print(f"sandbox: {tools.sandbox}")
    return EXIT_COMPLETED


def _local_tools(
    args: argparse.Namespace, repo: Path, redactor: Redactor
) -> CodeRepositoryTools:
    """The repository tools, with the sandbox resolved: `--sandbox bwrap` without a working
    bwrap is a usage error, `auto` without one warns (once, and only when commands run)."""
    from toy_agent.sandbox import SandboxUnavailable
    from toy_agent.tools import CodeRepositoryTools

    try:
        return CodeRepositoryTools(repo, allow_commands=args.allow_commands, redactor=redactor,
                                   sandbox=args.sandbox, sandbox_network=args.sandbox_network)
    except SandboxUnavailable as exc:
        raise UsageError(f"--sandbox bwrap: {exc}, or pass --sandbox off") from exc


def _llm_client(args: argparse.Namespace) -> LlmClient:
    from toy_agent.llm import LlmConfigError, ReplayLlmClient, create_llm_client

    try:
        if args.llm_provider == "replay":
            if not args.replay:
                raise UsageError("--llm-provider replay needs --replay FILE (a trajectory)")
            return ReplayLlmClient(args.replay, lenient=args.replay_lenient)
        if args.replay:
            raise UsageError(f"--replay is for --llm-provider replay, not {args.llm_provider}")
        return create_llm_client(args.llm_provider, model=args.model, base_url=args.base_url,
                                 max_retries=args.max_retries, timeout=args.timeout)
    except LlmConfigError as exc:
        raise UsageError(str(exc)) from exc


def _mcp_tools(args: argparse.Namespace, redactor: Redactor) -> McpTools | None:
    if not args.mcp_server and not args.mcp_config:
        return None
    from toy_agent.mcp_tools import McpError, McpTools, load_mcp_config, parse_server_arg

    try:
        servers = [parse_server_arg(arg) for arg in args.mcp_server]
        if args.mcp_config:
            servers += load_mcp_config(args.mcp_config)
        return McpTools(servers, timeout=args.mcp_timeout)
    except McpError as exc:
        raise UsageError(redactor.redact(str(exc))) from exc


def _setup_logging(
    args: argparse.Namespace, live: bool
) -> tuple[Redactor, list[logging.Handler]]:
    """Console at --log-level, --log-file at DEBUG; both redacted. Returns the handlers."""
    from toy_agent.environment import KEY_VARIABLES
    from toy_agent.redaction import RedactingFilter, Redactor
    from toy_agent.view import VisibleFormatter

    redactor = Redactor(secrets=[os.environ[k] for k in KEY_VARIABLES if os.environ.get(k)])
    level = args.log_level or ("WARNING" if live or args.quiet else "INFO")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(level)
    console.setFormatter(VisibleFormatter("%(levelname)s %(message)s"))
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
        handler.addFilter(RedactingFilter(redactor))
        root.addHandler(handler)
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "hpack", "anthropic", "openai",
                  "google_genai", "google", "mcp", "asyncio", "urllib3", "sse_starlette"):
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
        raise UsageError("--task is required (use --task - to read it from stdin)")
    if task == "-":
        task = sys.stdin.read()
    if not task.strip():
        raise UsageError("the task is empty")
    return task.strip()


def _ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def _fail(exc: Exception, code: int, debug: bool) -> int:
    if debug:
        logging.getLogger("toy_agent").exception("exiting with code %d", code)
    print(f"toy-agent: error: {exc}", file=sys.stderr)
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


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value
