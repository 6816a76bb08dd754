"""MCP servers' tools through the official `mcp` SDK, behind a synchronous face.

The agent loop is synchronous; the SDK is async. `McpTools` runs one asyncio event loop in a
background thread and keeps ONE session per server open for the whole run: each server is owned
by one long-lived task that enters its `mcp.Client`, waits until asked to stop, and exits it
(anyio requires contexts to be exited by the task that entered them). Tool calls are submitted
to that loop and waited for with a timeout. `mcp` is imported lazily so `--help` stays instant.

Tool naming (what the LLM sees):
  * a tool keeps its own name when no other server offers it and it is not a local tool's name;
  * otherwise it is exposed as `<server>__<tool>`;
  * names are sanitised to what providers accept, `^[A-Za-z0-9_-]{1,64}$` (other characters
    become `_`, long names are cut at 64); a name still taken gets a `_2`, `_3`... suffix.
Server stderr goes to this module's logger at DEBUG (never straight to the terminal); its last
line is quoted in the error when a server fails to start or dies.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import math
import os
import queue
import re
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toy_agent import cuts
from toy_agent.mcp_config import (
    McpError,
    McpServerConfig,
    assign_names,
    contents_text,
    load_mcp_config,
    parse_server_arg,
    result_output,
    unique_name,
)
from toy_agent.messages import Image, ToolOutput, visible
from toy_agent.redaction import REDACTED
from toy_agent.settings import ToolSettings

if TYPE_CHECKING:
    from mcp_types import LoggingLevel

__all__ = ["McpError", "McpProgress", "McpServerConfig", "McpToolError", "McpTools",
           "load_mcp_config", "parse_server_arg", "reporting_progress"]  # fmt: skip

logger = logging.getLogger(__name__)

_GRACE = 5.0  # beyond `timeout`, for the SDK's own timeout to fire first
# What one server may add to every request: its tools' descriptions and schemas are sent
# with each one, and a server can offer anything.
MCP_TOOLS_MAX = 128  # per server; the rest are not offered
MCP_DESCRIPTION_MAX_CHARS = 2_000  # cut beyond this
MCP_SCHEMA_MAX_CHARS = 20_000  # a tool whose JSON Schema is longer is not offered
# A call is bounded by `timeout` since its last sign of life (the start, or a progress
# notification), and by this many seconds in all (or `timeout`, if longer) however often
# the server reports progress.
MCP_CALL_CEILING = 600.0
MCP_LOG_MAX_CHARS = 2_000  # a server's log record is cut beyond this
RESOURCES_LIST_MAX = 200  # resources a listing shows; the rest are counted
READ_RESOURCE = "read_resource"
_CLOSE_TIMEOUT = 10.0  # the SDK's stdio shutdown takes at most ~6.5s (stdin close, TERM, KILL)
# The SDK's own errors for a closed connection and a timed-out request use codes of JSON-RPC's
# server-error range, which servers use too: they are told apart by their message as well.
_CONNECTION_CLOSED, _REQUEST_TIMEOUT = -32000, -32001  # mcp_types.CONNECTION_CLOSED, ...TIMEOUT
_SDK_CLOSED = re.compile(r"Connection closed")
_SDK_TIMEOUT = re.compile(r"Request '[^']*' timed out")
_SERVER_ERROR_MAX_CHARS = 500  # a server's error message is cut beyond this


class McpToolError(Exception):
    """A tool call failed; the agent shows the message to the LLM as an observation."""


@dataclass(frozen=True)
class McpProgress:
    """A server's `notifications/progress` for the call in flight (its text is untrusted)."""

    progress: float
    total: float | None = None
    message: str = ""


ProgressListener = Callable[[McpProgress], None]
_progress_listener: ContextVar[ProgressListener | None] = ContextVar(
    "mcp_progress_listener", default=None
)


@contextlib.contextmanager
def reporting_progress(listener: ProgressListener) -> Iterator[None]:
    """Within the block, calls made from this thread report their progress to `listener`,
    in this thread, while the call waits (so an event subscriber needs no locking)."""
    token = _progress_listener.set(listener)
    try:
        yield
    finally:
        _progress_listener.reset(token)


# A server's log levels (syslog's, RFC 5424) as ours.
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
               "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
               "alert": logging.CRITICAL, "emergency": logging.CRITICAL}  # fmt: skip
_STRAY_LINE = "Failed to parse JSONRPC message from server"  # mcp.client.stdio's record


class _StrayLineFilter(logging.Filter):
    """Drops the SDK's traceback for a stdout line that is not JSON-RPC: `_Server` reports
    the line itself, in one warning naming the server."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_STRAY_LINE))


def _quiet_stray_line_tracebacks() -> None:
    sdk_logger = logging.getLogger("mcp.client.stdio")
    if not any(isinstance(f, _StrayLineFilter) for f in sdk_logger.filters):
        sdk_logger.addFilter(_StrayLineFilter())


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups, which anyio task groups raise."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


class _StderrLog:
    """A pipe for a stdio server's stderr: lines go to the log at DEBUG, the last few are kept."""

    def __init__(self, name: str, redact: Callable[[str], str]) -> None:
        read_fd, write_fd = os.pipe()
        self.redact = redact
        self.writer = os.fdopen(write_fd, "w")
        self.lines: deque[str] = deque(maxlen=20)
        self._thread = threading.Thread(
            target=self._pump, args=(name, read_fd), daemon=True, name=f"mcp-stderr-{name}"
        )
        self._thread.start()

    def _pump(self, name: str, read_fd: int) -> None:
        with open(read_fd, encoding="utf-8", errors="replace") as reader:
            for line in reader:
                if line.strip():
                    self.lines.append(self.redact(line.rstrip()))
                    logger.debug("[%s stderr] %s", name, self.lines[-1])

    def last_line(self, wait: float = 0.0) -> str:
        self._thread.join(wait)  # the process is gone: let the pump reach EOF first
        return self.lines[-1][:300] if self.lines else ""


class _Server:
    """One server's session, owned start to end by the single task running `run`."""

    def __init__(
        self, config: McpServerConfig, timeout: float, redact: Callable[[str], str]
    ) -> None:
        self.config, self.timeout = config, timeout
        self.redact = _hiding(config.secrets, redact)
        self.tools: list[Any] = []
        self.serves_resources = False  # it has resources (or templates) to read
        self.client: Any = None
        self.dead = ""  # why the session ended mid-run
        self.stderr = _StderrLog(config.name, self.redact) if config.command else None
        self.task: concurrent.futures.Future[None] | None = None
        self.via_sse = config.sse  # a URL that turned out to serve the legacy SSE transport
        self._statuses: list[int] = []  # HTTP statuses of the Streamable HTTP attempt
        self._stray_lines = 0
        self._stop = asyncio.Event()
        self._startup: Any = None  # the anyio cancel scope bounding startup

    async def run(self, ready: concurrent.futures.Future[None]) -> None:
        import anyio

        if self._stop.is_set():  # closed before this task even started
            return
        try:
            deadline = anyio.current_time() + self.timeout
            with anyio.CancelScope(deadline=deadline) as self._startup:
                try:
                    await self._session(ready, self._transport())
                except Exception as exc:
                    if ready.done() or not self._sse_fallback():
                        raise
                    logger.info("MCP server %s: Streamable HTTP answered %d, trying the legacy "
                                "SSE transport", self.config.label, self._statuses[0])  # fmt: skip
                    logger.debug("Streamable HTTP attempt", exc_info=exc)
                    self.via_sse = True
                    await self._session(ready, self._transport())
            if not ready.done():
                raise TimeoutError(f"no answer within {self.timeout:g}s")
        except Exception as exc:
            if not ready.done():
                self._close_writer()
                ready.set_exception(exc)
            else:
                self.dead = _describe(_leaf(exc))
                level = logging.DEBUG if self._stop.is_set() else logging.WARNING
                logger.log(level, "MCP server %s stopped: %s", self.config.label, self.dead)
                logger.debug("MCP server %s failure", self.config.name, exc_info=exc)
        finally:
            self.client = None
            self._close_writer()

    async def _session(self, ready: concurrent.futures.Future[None], transport: Any) -> None:
        """Connect, list the tools, say ready, and hold the session until asked to stop."""
        from mcp import Client

        async with Client(
            transport,
            read_timeout_seconds=self.timeout,
            logging_callback=self._on_log,
            log_level=_mcp_log_level(),
            message_handler=self._on_message,
        ) as client:
            self._close_writer()
            self.tools = await _list_tools(client)
            self.serves_resources = await self._has_resources(client)
            self._startup.deadline = math.inf
            self.client = client
            ready.set_result(None)
            await self._stop.wait()

    def _sse_fallback(self) -> bool:
        """The MCP specification's backwards compatibility: a URL whose Streamable HTTP POST
        was answered with a 4xx may serve the legacy HTTP+SSE transport instead."""
        url = self.config.url
        return bool(url) and not self.via_sse and 400 <= (self._statuses or [0])[0] < 500

    async def _has_resources(self, client: Any) -> bool:
        """Whether the server has resources to read (a failing listing is a warning only)."""
        if client.server_capabilities.resources is None:
            return False
        try:
            resources, templates = await _list_resources(client, pages=1)
        except Exception as exc:
            logger.warning("MCP server %s: cannot list its resources: %s", self.config.label,
                           _describe(_leaf(exc)))  # fmt: skip
            return False
        return bool(resources or templates)

    def _transport(self) -> Any:
        """The SDK transport for this server (an async context manager yielding streams)."""
        config = self.config
        if config.server is not None:
            return config.server  # the SDK's Client runs it in memory
        if config.command:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            params = StdioServerParameters(
                command=config.command[0],
                args=list(config.command[1:]),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            assert self.stderr is not None  # made in __init__ for every command server
            return stdio_client(params, errlog=self.stderr.writer)
        if self.via_sse:
            from mcp.client.sse import sse_client

            return sse_client(config.url, headers=dict(config.headers) or None)
        return _http_transport(config.url, config.headers, self._statuses)

    async def _on_log(self, params: Any) -> None:
        """A server's `notifications/message`: to our log at the matching level, redacted,
        with control characters escaped (a record is one line, and never drives the
        terminal)."""
        data = params.data
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        source = self.config.name + (f" {params.logger}" if params.logger else "")
        text = visible(self.redact(text.replace("\n", "\\n")))
        if len(text) > MCP_LOG_MAX_CHARS:
            text = text[:MCP_LOG_MAX_CHARS] + " … [cut]"
        level = _LOG_LEVELS.get(params.level, logging.INFO)
        logger.log(level, "[%s] %s", visible(self.redact(source))[:200], text)

    async def _on_message(self, message: Any) -> None:
        """Transport faults the SDK does not raise: for a stdio server, a stdout line that
        is not JSON-RPC (a banner, a stray print). The connection goes on; one warning says
        so, later lines are logged at DEBUG."""
        if not isinstance(message, Exception):
            return
        if self.config.command and isinstance(message, ValueError):
            self._stray_lines += 1
            level = logging.WARNING if self._stray_lines == 1 else logging.DEBUG
            line = _stray_line(message, self.redact)
            logger.log(level, "MCP server %r wrote a line that is not JSON-RPC to its stdout "
                       "(ignored): %s", self.config.name, line)  # fmt: skip
        else:
            logger.warning("MCP server %r: %s", self.config.name, _describe(message))
        logger.debug("MCP server %r transport fault", self.config.name, exc_info=message)

    def request_stop(self) -> None:
        """Called in the loop: end a waiting session, or abandon a startup still in progress."""
        self._stop.set()
        if self.client is None and self._startup is not None:
            self._startup.cancel()

    def _close_writer(self) -> None:
        if self.stderr is not None and not self.stderr.writer.closed:
            self.stderr.writer.close()  # the child has its copy; ours would keep the pipe open

    def startup_error(self, exc: BaseException) -> McpError:
        leaf, command = _leaf(exc), self.config.command
        if isinstance(leaf, FileNotFoundError) and command:
            what = (
                "working directory not found"
                if leaf.filename == self.config.cwd
                else "command not found"
            )
            cause = f"{what}: {leaf.filename or command[0]}"
        elif isinstance(leaf, PermissionError) and command:
            cause = f"permission denied: {leaf.filename or command[0]}"
        elif _closed(leaf):
            cause = "the server exited or closed the connection during startup"
        elif _timed_out(leaf) or isinstance(leaf, TimeoutError):
            cause = f"no answer to initialize within {self.timeout:g}s"
        else:
            cause = self.redact(_describe(leaf).split("\n", 1)[0])
        if self.via_sse and not self.config.sse:
            cause = (f"Streamable HTTP answered {self._statuses[0]}, and the legacy SSE "
                     f"transport failed too: {cause}")  # fmt: skip
        stderr = self.stderr.last_line(wait=1.0) if self.stderr else ""
        return McpError(
            f"MCP server {self.config.label}: {cause}" + (f" (stderr: {stderr})" if stderr else "")
        )


def _hiding(secrets: Sequence[str], redact: Callable[[str], str]) -> Callable[[str], str]:
    """`redact`, and the server's own secrets (its config's env and header values) hidden
    first: whoever built `redact` may not have been told them (a Python caller, a batch's
    pre-flight check)."""
    if not secrets:
        return redact

    def scrub(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, REDACTED)
        return redact(text)

    return scrub


def _stray_line(exc: Exception, redact: Callable[[str], str]) -> str:
    """The line a JSON-RPC parse error was about (pydantic keeps it as the error's input: the
    text, or, for a line that is JSON but not JSON-RPC, what it parsed to)."""
    errors = getattr(exc, "errors", None)
    line = errors()[0].get("input") if callable(errors) and errors() else None
    if isinstance(line, dict | list | int | float | bool):
        line = json.dumps(line, ensure_ascii=False, default=str)
    text = line if isinstance(line, str) else str(exc).split("\n", 1)[0]
    return repr(visible(redact(text[:200])))


def _mcp_log_level() -> LoggingLevel:
    """The least severe server log record our log would keep (a server sends none below)."""
    level = logger.getEffectiveLevel()
    if level <= logging.DEBUG:
        return "debug"
    return "info" if level <= logging.INFO else "warning" if level <= logging.WARNING else "error"


@contextlib.asynccontextmanager
async def _http_transport(
    url: str, headers: dict[str, str], statuses: list[int]
) -> AsyncIterator[Any]:
    """Streamable HTTP with our headers: the SDK takes them through its own httpx2 client.
    Each response's status is noted in `statuses` (a 4xx first means: try SSE)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def note(response: Any) -> None:
        statuses.append(response.status_code)

    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults; calls are bounded by ours
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=timeout, event_hooks={"response": [note]}
        ) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


async def _list_tools(client: Any) -> list[Any]:
    tools, cursor = [], None
    for _ in range(100):  # a paginator that never ends must not hang startup
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


async def _list_resources(client: Any, pages: int = 20) -> tuple[list[Any], list[Any]]:
    """The server's resources and resource templates, as many as `pages` pages of each."""
    found: tuple[list[Any], list[Any]] = ([], [])
    listers = (client.list_resources, "resources"), (
        client.list_resource_templates, "resource_templates")  # fmt: skip
    for kept, (lister, field) in zip(found, listers, strict=True):
        cursor = None
        for _ in range(pages):
            page = await lister(cursor=cursor)
            kept.extend(getattr(page, field))
            cursor = page.next_cursor
            if cursor is None or len(kept) > RESOURCES_LIST_MAX:
                break
    return found


def _code(exc: BaseException) -> int | None:
    error = getattr(exc, "error", None)
    return getattr(error, "code", None)


def _message(exc: BaseException) -> str:
    message = getattr(getattr(exc, "error", None), "message", None)
    return message if isinstance(message, str) else ""


def _closed(exc: BaseException) -> bool:
    """The SDK's own error for a connection that closed (not a server's -32000 error)."""
    return _code(exc) == _CONNECTION_CLOSED and bool(_SDK_CLOSED.fullmatch(_message(exc)))


def _timed_out(exc: BaseException) -> bool:
    """The SDK's own error for a request it stopped waiting for (not a server's -32001)."""
    return _code(exc) == _REQUEST_TIMEOUT and bool(_SDK_TIMEOUT.fullmatch(_message(exc)))


def _describe(exc: BaseException) -> str:
    """One line: a closed connection said so; anything else (a server's own error message
    too, whatever its code) as `Type: message`, cut and with control characters escaped."""
    if _closed(exc):
        return "the server closed the connection (it may have crashed)"
    message = _message(exc) or str(exc)
    code = _code(exc)
    if code is not None:
        message = f"{message} (code {code})"
    if len(message) > _SERVER_ERROR_MAX_CHARS:
        message = message[:_SERVER_ERROR_MAX_CHARS] + " … [cut]"
    message = visible(message)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class _LoopThread:
    """An asyncio event loop in a daemon thread, for the SDK's async clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    @property
    def closed(self) -> bool:
        return self.loop.is_closed() or not self._thread.is_alive()

    def stop(self) -> None:
        """Cancel what is left (e.g. an interrupted call), then stop and close the loop."""
        with contextlib.suppress(Exception):
            self.submit(_cancel_other_tasks()).result(_GRACE)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_GRACE)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_other_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_GRACE)


class McpTools:
    """The tools of one or more MCP servers, connected now and kept until `close()`.
    `timeout` and `ceiling` bound the calls made after they are set."""

    def __init__(
        self,
        servers: str | McpServerConfig | Sequence[str | McpServerConfig],
        *,
        timeout: float = ToolSettings.mcp_timeout,
        ceiling: float | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """Connect to every server (startup bounded by `timeout`); on any failure close what
        was opened and raise McpError. `timeout` also bounds each tool call since its last
        progress notification, `ceiling` (MCP_CALL_CEILING, or `timeout` if longer) in all.
        `redact` scrubs the servers' log records and progress messages."""
        self.timeout = timeout
        self.ceiling = max(timeout, MCP_CALL_CEILING if ceiling is None else ceiling)
        self._closed = False
        _quiet_stray_line_tracebacks()
        self._servers = [_Server(c, timeout, redact or (lambda text: text))
                         for c in _unique(_configs(servers))]  # fmt: skip
        self._routes: dict[str, tuple[_Server, str]] = {}
        self._tools: list[dict[str, Any]] = []
        self._resource_tool = ""  # the name read_resource is offered under, if it is
        self._loop = _LoopThread()
        atexit.register(self.close)  # no orphaned servers even if the caller forgets
        try:
            self._connect()
        except BaseException:
            self.close()
            raise
        self._expose()

    def _connect(self) -> None:
        readies = []
        for server in self._servers:
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            server.task = self._loop.submit(server.run(ready))
            readies.append((server, ready))
        for server, ready in readies:
            try:
                ready.result(self.timeout + _GRACE)
            except concurrent.futures.TimeoutError:
                raise McpError(
                    f"MCP server {server.config.label}: no answer to initialize "
                    f"within {self.timeout:g}s"
                ) from None
            except Exception as exc:
                logger.debug("MCP server %s failed to start", server.config.name, exc_info=exc)
                raise server.startup_error(exc) from None
            logger.info(
                "MCP server %s: connected, %d tools", server.config.label, len(server.tools)
            )

    def _expose(self) -> None:
        offered = [_within_limits(s.config.label, _callable(s.config.label, s.tools))
                   for s in self._servers]  # fmt: skip
        offers = [(s.config.name, [t.name for t in tools])
                  for s, tools in zip(self._servers, offered, strict=True)]  # fmt: skip
        names = assign_names(offers)
        for server, tools, given in zip(self._servers, offered, names, strict=True):
            for tool, name in zip(tools, given, strict=True):
                self._routes[name] = (server, tool.name)
                description = tool.description or tool.title or ""
                description = cuts.cut(
                    description, MCP_DESCRIPTION_MAX_CHARS, sep=" ", at_word=True
                )
                self._tools.append(
                    {
                        "name": name,
                        "description": description,
                        "parameters": tool.input_schema,
                        "server": server.config.name,
                        # the server's word that the tool changes nothing (read-only runs)
                        "read_only": _read_only_hint(tool),
                    }
                )
                if name != tool.name:
                    renamed = (tool.name, server.config.name, name)
                    logger.info("MCP tool %r of server %r exposed as %r", *renamed)
        readable = [s.config.name for s in self._servers if s.serves_resources]
        if readable:
            self._resource_tool = unique_name(READ_RESOURCE, set(self._routes))
            self._tools.append(_read_resource_spec(self._resource_tool, readable))
        logger.debug("MCP tools: %s", ", ".join(self._routes))

    def specs(self) -> list[dict[str, Any]]:
        """The Toolbox face (see toy_agent.routes): the same as get_mcp_tools()."""
        return self.get_mcp_tools()

    def call(self, name: str, parameters: dict[str, Any]) -> str | ToolOutput:
        """The Toolbox face: the result as text, with its images when it has some."""
        output = self.call_output(name, parameters)
        return output if output.images else output.text

    def get_mcp_tools(self) -> list[dict[str, Any]]:
        """`{"name", "description", "parameters"}` per tool; parameters is its JSON Schema."""
        return json.loads(json.dumps(self._tools))  # a deep copy the caller may change

    def execute_mcp_tool(self, name: str, parameters: dict[str, Any]) -> str:
        """Call a tool and return its result as text (images described, not passed); any
        failure raises McpToolError."""
        return self.call_output(name, parameters).text

    def call_output(self, name: str, parameters: dict[str, Any]) -> ToolOutput:
        """Call a tool (or read_resource) and return its result as text and images; any
        failure raises McpToolError."""
        if self._resource_tool and name == self._resource_tool:  # never a server's tool name
            if self._closed:
                raise McpToolError("MCP tools are closed")
            return self._read_resource(name, parameters)
        if name not in self._routes:
            raise McpToolError(
                f"Unknown MCP tool {name!r}, should be one of: "
                f"{', '.join(self._routes) or '(none)'}"
            )
        if self._closed:
            raise McpToolError("MCP tools are closed")
        if not isinstance(parameters, dict | None):
            raise McpToolError(f"MCP tool {name!r}: parameters must be a JSON object")
        server, tool = self._routes[name]
        where = f"MCP tool {name!r} (server {server.config.name!r})"
        logger.info("MCP call %s %s", name, json.dumps(parameters, ensure_ascii=False)[:500])
        progress: queue.SimpleQueue[McpProgress | None] = queue.SimpleQueue()
        listener = _progress_listener.get()

        def call(_client: Any) -> Coroutine[Any, Any, Any]:
            return self._call(server, tool, parameters or {}, progress)

        def until_done(future: concurrent.futures.Future[Any]) -> Any:
            future.add_done_callback(lambda _: progress.put(None))
            self._wait(future, progress, listener)
            return future.result(0)

        result = self._request(server, where, call, until_done)
        read_with = self._resource_tool if server.serves_resources else ""
        output = result_output(result, server.config.name, read_with)
        text = output.text
        logger.debug("MCP result of %s: %s", name, text[:2000])
        if result.is_error:
            raise McpToolError(f"{where} reported an error: {text or '(no message)'}")
        return output

    def _request(
        self,
        server: _Server,
        where: str,
        request: Callable[[Any], Coroutine[Any, Any, Any]],
        wait: Callable[[concurrent.futures.Future[Any]], Any] | None = None,
    ) -> Any:
        """`request(client)` run on the server's session, its result as `wait(future)` returns
        it (by default: bounded by the timeout). A failure becomes an McpToolError naming
        `where`; an interrupt cancels the request, then propagates."""
        if server.client is None:
            raise McpToolError(f"{where}: server unavailable: {server.dead or 'not connected'}")
        future = self._loop.submit(request(server.client))
        try:
            if wait is None:
                return future.result(self.timeout + _GRACE)
            return wait(future)
        except BaseException as exc:  # KeyboardInterrupt too: the call must not linger
            future.cancel()
            if not isinstance(exc, Exception):
                raise
            logger.debug("%s failed", where, exc_info=exc)
            raise McpToolError(f"{where}: {self._call_failure(server, exc)}") from None

    def _read_resource(self, name: str, parameters: Any) -> ToolOutput:
        """read_resource: one resource by URI, or (no uri) the list of the server's ones."""
        if not isinstance(parameters, dict | None):
            raise McpToolError(f"{name}: parameters must be a JSON object")
        parameters = parameters or {}
        readable = {s.config.name: s for s in self._servers if s.serves_resources}
        wanted, uri = parameters.get("server"), parameters.get("uri")
        if len(readable) == 1 and wanted is None:
            wanted = next(iter(readable))
        if not isinstance(wanted, str) or wanted not in readable:  # a list is no dict key
            got = json.dumps(wanted, ensure_ascii=False, default=repr)[:200]
            kind = "" if isinstance(wanted, str | None) else ", not a string"
            raise McpToolError(f"{name}: server must be one of: {', '.join(readable)} "
                               f"(got {got}{kind})")  # fmt: skip
        if uri is not None and (not isinstance(uri, str) or not uri.strip()):
            raise McpToolError(f"{name}: uri must be a resource URI string, or left out to list")
        server = readable[str(wanted)]
        where = f"{name} (server {server.config.name!r})"
        if uri is None:
            found = self._request(server, where, _list_resources)
            return ToolOutput(_listing(name, server.config.name, *found))
        logger.info("MCP read_resource %s %s", server.config.name, uri[:500])
        result = self._request(server, where, lambda client: client.read_resource(uri))
        images: list[Image] = []
        texts = [contents_text(contents, images) for contents in result.contents]
        return ToolOutput("\n".join(texts) or f"(the resource {uri} is empty)", tuple(images))

    async def _call(
        self,
        server: _Server,
        tool: str,
        arguments: dict[str, Any],
        progress: queue.SimpleQueue[McpProgress | None],
    ) -> Any:
        """The call, with a progress token: each notification moves the deadline to
        `timeout` from now, never past `ceiling` from the start."""
        import anyio

        client = server.client
        if client is None:  # died between the check and this task
            raise McpToolError(f"server unavailable: {server.dead or 'not connected'}")
        start = anyio.current_time()
        hard = start + self.ceiling
        with anyio.CancelScope(deadline=min(start + self.timeout, hard)) as scope:

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                scope.deadline = min(anyio.current_time() + self.timeout, hard)
                progress.put(McpProgress(done, total, server.redact(message or "")))

            return await client.call_tool(
                tool, arguments, read_timeout_seconds=self.ceiling, progress_callback=on_progress
            )
        seconds = anyio.current_time() - start
        raise TimeoutError(
            f"timed out after {self.timeout:g}s without progress"
            if anyio.current_time() < hard
            else f"stopped after {seconds:.0f}s, the most a call may take however often it "
            "reports progress"
        )

    def _wait(
        self,
        future: concurrent.futures.Future[Any],
        progress: queue.SimpleQueue[McpProgress | None],
        listener: ProgressListener | None,
    ) -> None:
        """Until the call ends, hand its progress to `listener` in this thread. The loop
        bounds the call; this wait only guards against a loop that stopped answering."""
        deadline = time.monotonic() + self.ceiling + _GRACE
        while True:
            try:
                item = progress.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no result after {self.ceiling:g}s") from None
            if item is None:
                return
            logger.debug("MCP progress %s", item)
            if listener is not None:
                listener(item)

    def _call_failure(self, server: _Server, exc: BaseException) -> str:
        leaf = _leaf(exc)
        if isinstance(leaf, TimeoutError | McpToolError) and str(leaf):
            return str(leaf)
        if isinstance(leaf, concurrent.futures.TimeoutError | TimeoutError) or _timed_out(leaf):
            return f"timed out after {self.timeout:g}s"
        cause = server.dead or server.redact(_describe(leaf))
        gone = server.client is None or _closed(leaf)
        stderr = server.stderr.last_line(wait=0.2) if gone and server.stderr else ""
        return cause + (f" (stderr: {stderr})" if stderr else "")

    def close(self) -> None:
        """Stop every server (stdio processes are terminated) and the loop; idempotent.

        The atexit hook stays until the end, so a second Ctrl-C that interrupts this wait
        still gets the servers stopped when the interpreter exits.
        """
        self._closed = True  # no new calls
        if self._loop.closed:
            return
        for server in self._servers:
            self._loop.loop.call_soon_threadsafe(server.request_stop)
        tasks = [s.task for s in self._servers if s.task is not None]
        _, pending = concurrent.futures.wait(tasks, timeout=_CLOSE_TIMEOUT)
        if pending:
            logger.warning("%d MCP server(s) did not shut down in time", len(pending))
        self._loop.stop()
        for server in self._servers:
            server._close_writer()
        atexit.unregister(self.close)

    def __enter__(self) -> McpTools:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _configs(
    servers: str | McpServerConfig | Sequence[str | McpServerConfig],
) -> list[McpServerConfig]:
    if isinstance(servers, str | McpServerConfig):
        servers = [servers]
    return [s if isinstance(s, McpServerConfig) else parse_server_arg(s) for s in servers]


def _unique(configs: list[McpServerConfig]) -> list[McpServerConfig]:
    """Rename repeated server names `name-2`, `name-3`... so clashes stay predictable."""
    seen: Counter[str] = Counter()
    result = []
    for config in configs:
        seen[config.name] += 1
        if seen[config.name] > 1:
            config = dataclasses.replace(config, name=f"{config.name}-{seen[config.name]}")
        result.append(config)
    return result


def _callable(label: str, tools: list[Any]) -> list[Any]:
    """The tools we can call: not those that need a task-augmented call (`execution.
    taskSupport: "required"`, MCP 2025-11-25), which toy_agent does not make. One warning
    names them all."""
    needs_task = [t for t in tools if getattr(t.execution, "task_support", None) == "required"]
    if needs_task:
        names = ", ".join(visible(t.name) for t in needs_task)
        logger.warning("MCP server %s: %d tool(s) not offered, they must be called as tasks "
                       "(taskSupport 'required'), which toy_agent does not do: %s",
                       label, len(needs_task), names)  # fmt: skip
    return [t for t in tools if t not in needs_task]


def _read_resource_spec(name: str, servers: list[str]) -> dict[str, Any]:
    """The tool that reads MCP resources, offered when some server has them."""
    return {
        "name": name,
        "description": "Read a resource of an MCP server by its uri (as a resource link in a "
        "tool result gives it); leave uri out to list the server's resources.",
        "parameters": {
            "type": "object",
            "properties": {"server": {"enum": servers}, "uri": {"type": "string"}},
            "required": ["server"],
        },
    }


def _listing(tool: str, server: str, resources: list[Any], templates: list[Any]) -> str:
    """A server's resources, one a line: `uri  name (mime): description`."""

    def line(uri: str, item: Any) -> str:
        about = ", ".join(str(x) for x in (item.name, item.mime_type) if x)
        described = f": {' '.join(item.description.split())[:200]}" if item.description else ""
        return f"{uri}  {about}{described}"

    lines = [f"Resources of server {server!r} (read one with {tool} "
             f'{{"server": "{server}", "uri": URI}}):']  # fmt: skip
    lines += [line(str(r.uri), r) for r in resources[:RESOURCES_LIST_MAX]]
    if len(resources) > RESOURCES_LIST_MAX:
        hidden = cuts.amount(len(resources) - RESOURCES_LIST_MAX, "resource")
        lines.append(cuts.note(hidden, "the server lists more than are shown here"))
    if not resources:
        lines.append("(none listed)")
    if templates:
        lines.append("Resource templates (fill in the {placeholders} to make a uri):")
        lines += [line(t.uri_template, t) for t in templates[:RESOURCES_LIST_MAX]]
    return "\n".join(lines)


def _within_limits(label: str, tools: list[Any]) -> list[Any]:
    """The tools of one server that are offered to the model: at most MCP_TOOLS_MAX, and none
    whose JSON Schema is over MCP_SCHEMA_MAX_CHARS. Each reason for leaving tools out is one
    warning that counts them and names the first few (a server may offer thousands)."""
    kept: list[Any] = []
    too_big: list[str] = []
    too_many: list[str] = []
    for tool in tools:
        if len(json.dumps(tool.input_schema)) > MCP_SCHEMA_MAX_CHARS:
            too_big.append(tool.name)
        elif len(kept) == MCP_TOOLS_MAX:
            too_many.append(tool.name)
        else:
            kept.append(tool)
    if too_big:
        logger.warning("MCP server %s: %s not offered, a JSON Schema over %d characters: %s",
                       label, cuts.amount(len(too_big), "tool"), MCP_SCHEMA_MAX_CHARS,
                       _first_names(too_big))  # fmt: skip
    if too_many:
        logger.warning("MCP server %s: %s not offered, a server offers at most %d: %s",
                       label, cuts.amount(len(too_many), "tool"), MCP_TOOLS_MAX,
                       _first_names(too_many))  # fmt: skip
    return kept


def _first_names(names: list[str], shown: int = 5) -> str:
    listed = ", ".join(visible(name[:100]) for name in names[:shown])
    return listed + (f", … ({len(names) - shown:,} more)" if len(names) > shown else "")


def _read_only_hint(tool: Any) -> bool:
    """Whether the server annotates the tool readOnlyHint=true. Only a hint (a server can
    lie), but the server is one the user chose to start; unannotated tools count as changing."""
    annotations = getattr(tool, "annotations", None)
    hint = getattr(annotations, "read_only_hint", getattr(annotations, "readOnlyHint", None))
    return hint is True  # the SDK's field (read_only_hint), or readOnlyHint in older ones
