"""MCP server configuration and naming, pure and quick to test: parsing `--mcp-server`
values and `mcpServers` files, the names tools are exposed under, and tool results as text.
The live connections are in `mcp_tools`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toy_agent.messages import Image, ToolOutput
from toy_agent.redaction import is_secret_variable

# Blobs of these types are text: decoded and shown, not summarised.
_TEXT_MIME = re.compile(
    r"^text/|^application/(json|xml|yaml|x-yaml|toml|javascript|x-sh|sql|graphql|x-python|"
    r"csv)\b|[+/](json|xml|yaml)\b",
    re.IGNORECASE,
)
_NAME_MAX = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_LAUNCHER = re.compile(r"uvx|uv|npx|bunx|pnpx|pnpm|pipx|docker|podman|node|deno|bun|python[\d.]*")
_SUBCOMMAND = re.compile(r"run|tool|dlx|exec|x")
# launcher options that take a value, skipped when naming a server after its package
_VALUE_OPTION = re.compile(r"--(from|with|python|env|volume|name|network|workdir|user)|-[pevwu]")
# a script named like this says nothing: the server is named after its folder (or package)
_GENERIC_SCRIPT = re.compile(r"index|main|server|__main__|cli|app")
_BUILD_FOLDER = re.compile(r"dist|build|lib|src|bin|out|build-\w+")
_SHELL = re.compile(r"sh|bash|dash|zsh|ksh")


class McpError(Exception):
    """A server could not be started, reached or initialised at launch (CLI exit code 2)."""


@dataclass(frozen=True)
class McpServerConfig:
    """One server: a command line (stdio), an http(s) URL (Streamable HTTP, or SSE), or a
    server object run in this process (an SDK `MCPServer`: quick tests, embedded tools)."""

    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    sse: bool = False  # legacy HTTP+SSE transport, only from a config file's "type": "sse"
    server: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if sum(map(bool, (self.command, self.url, self.server is not None))) != 1:
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of command, url or server"
            )

    @property
    def label(self) -> str:
        """How errors name the server: `'git' (uvx mcp-server-git)`; headers never shown."""
        where = shlex.join(self.command) if self.command else self.url or "in-process"
        return f"{self.name!r} ({where})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values of its env and headers that look like secrets, by the rule for
        environment variables (`MY_SERVICE_KEY`, `Authorization`): a server may print them
        (a failing one quotes its key on stderr), so the redactor must know them."""
        pairs = (*self.env.items(), *self.headers.items())
        return tuple(value for name, value in pairs if is_secret_variable(name, value))


def parse_server_arg(arg: str) -> McpServerConfig:
    """Turn a `--mcp-server` value into a config: an http(s) URL, or a command line (stdio)."""
    arg = arg.strip()
    if re.match(r"https?://", arg, re.IGNORECASE):
        return McpServerConfig(name=urlsplit(arg).hostname or "server", url=arg)
    try:
        argv = tuple(shlex.split(arg))
    except ValueError as exc:
        raise McpError(f"--mcp-server {arg!r}: cannot split the command line: {exc}") from None
    if not argv:
        raise McpError("--mcp-server needs a URL or a command line, got an empty value")
    return McpServerConfig(name=_command_name(argv), command=argv)


def _command_name(argv: Sequence[str]) -> str:
    """The package or script a launcher runs (`npx -y @scope/pkg` -> pkg), else the program."""
    program = re.sub(r"\.(exe|cmd|bat)$", "", Path(argv[0]).name, flags=re.IGNORECASE)
    if _SHELL.fullmatch(program) and len(argv) > 2 and argv[1] == "-c":
        return _shell_name(argv[2]) or program
    if not _LAUNCHER.fullmatch(program):
        return program
    args = iter(argv[1:])
    for token in args:
        if token == "-m":
            return next(args, program)
        if _VALUE_OPTION.fullmatch(token):
            next(args, None)
        elif not token.startswith("-") and not _SUBCOMMAND.fullmatch(token):
            return _script_name(token) or program
    return program


def _script_name(token: str) -> str:
    """`@scope/pkg@1.2` -> pkg, `srv.py` -> srv; `.../server-everything/dist/index.js` ->
    server-everything: a generic script name gives way to its folder, build folders skipped."""
    parts = [part for part in token.rstrip("/").split("/") if part]
    if not parts:
        return ""
    base = re.sub(r"(?<=.)[@:].*$", "", parts[-1])  # version or image tag
    base = re.sub(r"\.(py|js|mjs|cjs|ts)$", "", base)
    if _GENERIC_SCRIPT.fullmatch(base) and len(parts) > 1:
        folders = [p for p in parts[:-1] if p not in (".", "..")]
        while folders and _BUILD_FOLDER.fullmatch(folders[-1]):
            folders.pop()
        if folders:
            return folders[-1]
    return base


def _shell_name(script: str) -> str:
    """`sh -c 'echo Starting...; exec node srv.js'` is named after its last command."""
    try:
        words = shlex.split(script)
    except ValueError:
        return ""
    last: list[str] = []
    for word in words:
        last = [] if word in (";", "&&", "||", "|") else [*last, word]
        if word.endswith(";"):
            last = []
    while last and last[0] in ("exec", "command", "nohup"):
        last = last[1:]
    return _command_name(last) if last else ""


def load_mcp_config(path: str | os.PathLike[str]) -> list[McpServerConfig]:
    """Read the `mcpServers` JSON shared by Claude Desktop, Cursor and Claude Code.

    `${VAR}` and `${VAR:-default}` are expanded in commands, args, env, url, headers and cwd,
    so secrets can stay in the environment. Entries with `"disabled": true` are skipped.
    """
    where = f"MCP config {os.fspath(path)}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpError(f"cannot read {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise McpError(f"{where} is not UTF-8 text (a JSON file was expected)") from None
    except json.JSONDecodeError as exc:
        raise McpError(
            f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpError(f'{where}: expected an object with an "mcpServers" object')
    return [
        _server_entry(f"{where}: server {name!r}", name, entry)
        for name, entry in servers.items()
        if not (isinstance(entry, dict) and entry.get("disabled") is True)
    ]


def _server_entry(where: str, name: str, entry: Any) -> McpServerConfig:
    if not isinstance(entry, dict):
        raise McpError(f"{where}: expected an object")
    kind = entry.get("type") or ("stdio" if "command" in entry else "http")
    if kind not in ("stdio", "http", "streamable-http", "streamableHttp", "sse"):
        raise McpError(f"{where}: unknown type {kind!r} (use stdio, http or sse)")
    if ("command" in entry) == ("url" in entry):
        raise McpError(f'{where}: give either "command" (stdio) or "url" (http)')
    expand = _expander(where)
    env = {key: expand(value) for key, value in _str_map(where, entry, "env").items()}
    headers = {key: expand(value) for key, value in _str_map(where, entry, "headers").items()}
    if kind == "stdio":
        command, args = entry.get("command"), entry.get("args", [])
        if not isinstance(command, str) or not command.strip():
            raise McpError(f'{where}: "command" must be a non-empty string')
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpError(f'{where}: "args" must be a list of strings')
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise McpError(f'{where}: "cwd" must be a string')
        argv = tuple(expand(part) for part in [command, *args])
        return McpServerConfig(name, command=argv, env=env, cwd=cwd and expand(cwd))
    url = entry.get("url")
    if not isinstance(url, str) or not re.match(r"https?://", url, re.IGNORECASE):
        raise McpError(f'{where}: "url" must be an http:// or https:// URL')
    return McpServerConfig(name, url=expand(url), headers=headers, sse=kind == "sse")


def _str_map(where: str, entry: dict[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise McpError(f'{where}: "{key}" must be an object of strings')
    return value


def _expander(where: str) -> Callable[[str], str]:
    def expand(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            value = os.environ.get(match[1], match[2])
            if value is None:
                raise McpError(f"{where}: environment variable {match[1]} is not set")
            return value

        return _ENV_REF.sub(one, text)

    return expand


def sanitize(name: str) -> str:
    """A name providers accept: `^[A-Za-z0-9_-]{1,64}$`."""
    return _UNSAFE.sub("_", name)[:_NAME_MAX] or "_"


def unique_name(wanted: str, taken: set[str]) -> str:
    """`wanted` sanitised, with a `_2`, `_3`... suffix while the name is taken."""
    base = sanitize(wanted)
    name, n = base, 2
    while name in taken:
        name, n = f"{base[: _NAME_MAX - len(str(n)) - 1]}_{n}", n + 1
    return name


def assign_names(offers: Sequence[tuple[str, Sequence[str]]]) -> list[list[str]]:
    """Exposed names for each server's tools: its own name, unless another server offers the
    same one, then `server__tool`. (Local tool names are kept free by the route table.)"""
    counts = Counter(sanitize(tool) for _, tools in offers for tool in tools)
    taken: set[str] = set()
    exposed = []
    for server, tools in offers:
        names = []
        for tool in tools:
            wanted = tool if counts[sanitize(tool)] == 1 else f"{sanitize(server)}__{tool}"
            name = unique_name(wanted, taken)
            taken.add(name)
            names.append(name)
        exposed.append(names)
    return exposed


def result_text(result: Any) -> str:
    """A CallToolResult as text (images described, not shown)."""
    return result_output(result).text


def result_output(result: Any, server: str = "", read_with: str = "") -> ToolOutput:
    """A CallToolResult as text and images: text as is, images numbered in the text and
    returned for the model, text blobs decoded, a resource link with how to read it (through
    the tool `read_with` on `server`, when the server serves resources); else structured JSON."""
    parts: list[str] = []
    images: list[Image] = []
    for block in result.content:
        kind = block.type
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            images.append(Image.from_base64(block.data, block.mime_type))
            size = images[-1].size
            parts.append(f"[image {len(images)}: {block.mime_type}, {size:,} bytes{_notes(block)}]")
        elif kind == "audio":
            parts.append(f"[audio: {block.mime_type}, {_b64_size(block.data):,} bytes"
                         f"{_notes(block)}; audio is not passed to you]")  # fmt: skip
        elif kind == "resource_link":
            parts.append(_link_text(block, server, read_with))
        elif kind == "resource":
            parts.append(contents_text(block.resource, images) + _notes(block))
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        return ToolOutput(json.dumps(result.structured_content, ensure_ascii=False))
    return ToolOutput("\n".join(parts), tuple(images))


def contents_text(res: Any, images: list[Image]) -> str:
    """One resource's contents (embedded in a result, or read): its text, a blob of text
    decoded, an image added to `images`, other binary data described."""
    uri, mime = str(res.uri), res.mime_type or "unknown type"
    text = getattr(res, "text", None)
    if text is not None:
        return f"[resource {uri} ({mime})]\n{text.rstrip(chr(10))}"
    blob = getattr(res, "blob", "") or ""
    if mime.startswith("image/"):
        images.append(Image.from_base64(blob, mime))
        return f"[image {len(images)}: resource {uri}, {mime}, {images[-1].size:,} bytes]"
    if _TEXT_MIME.search(mime):
        with contextlib.suppress(ValueError):
            raw = base64.b64decode("".join(blob.split()), validate=True)
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            return f"[resource {uri} ({mime})]\n{text}"
    return f"[resource {uri}: {mime}, {_b64_size(blob):,} bytes of binary data, not shown]"


def _link_text(link: Any, server: str, read_with: str) -> str:
    about = ", ".join(str(x) for x in (link.name, link.mime_type) if x)
    if link.description:
        about += f": {link.description}"
    text = f"[resource link: {link.uri}" + (f" ({about})" if about else "")
    if read_with:
        call = json.dumps({"server": server, "uri": str(link.uri)}, ensure_ascii=False)
        return f"{text}; read it with {read_with} {call}]"
    return f"{text}; its server offers no resources to read]"


def _notes(block: Any) -> str:
    """A block's annotations (who it is for, how important), which the model may weigh."""
    annotations = getattr(block, "annotations", None)
    if annotations is None:
        return ""
    notes = []
    if annotations.audience:
        notes.append("for the " + " and the ".join(annotations.audience))
    if annotations.priority is not None:
        notes.append(f"priority {annotations.priority:g}")
    return "".join(f"; {note}" for note in notes)


def _b64_size(data: str) -> int:
    with contextlib.suppress(ValueError):
        return len(base64.b64decode(data, validate=False))
    return len(data) * 3 // 4
