"""The official MCP reference servers from npm, pinned, for tests against servers nobody here
wrote. Installed once into a cache folder keyed by the pinned versions (a file lock keeps
pytest-xdist's workers from installing twice), and run with `node` directly.

    python tests/reference_servers.py    # install into the cache now (.ci/run does this)

The fixtures in conftest.py use `installed()`; without node or npm, or when the install
fails, they skip saying why, except under CI=true, where they fail (CI always has node).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EVERYTHING = "@modelcontextprotocol/server-everything"
MEMORY = "@modelcontextprotocol/server-memory"
PINNED = {EVERYTHING: "2026.8.31", MEMORY: "2026.8.31"}
# pytest's own cache folder (the fixtures use config.cache, which is this by default)
DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".pytest_cache" / "d"
INSTALL_TIMEOUT = 300.0


class Unavailable(Exception):
    """The reference servers cannot be used here; the message says why."""


@dataclass(frozen=True)
class ReferenceServers:
    """An npm prefix holding the pinned packages."""

    prefix: Path

    def script(self, package: str) -> Path:
        """The package's executable script (its package.json "bin")."""
        folder = self.prefix / "node_modules" / package
        manifest = json.loads((folder / "package.json").read_text(encoding="utf-8"))
        binaries = manifest["bin"]
        relative = binaries if isinstance(binaries, str) else next(iter(binaries.values()))
        return folder / relative

    def command(self, package: str, *args: str) -> tuple[str, ...]:
        node = shutil.which("node")
        assert node is not None  # installed() checked
        return (node, str(self.script(package)), *args)


def cache_folder(cache_root: Path) -> Path:
    """The install folder for exactly these pins, under `cache_root`."""
    spec = json.dumps(PINNED, sort_keys=True)
    return cache_root / "mcp-reference-servers" / hashlib.sha256(spec.encode()).hexdigest()[:16]


def installed(cache_root: Path = DEFAULT_CACHE) -> ReferenceServers:
    """The pinned servers, installed now unless they already are. Raises Unavailable."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise Unavailable("node and npm are needed to run them "
                          "(apt-get install nodejs npm; .ci/run installs them)")  # fmt: skip
    folder = cache_folder(cache_root)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another xdist worker may be installing
        if not (folder / "installed").exists():
            _install(npm, folder)
    return ReferenceServers(folder)


def _install(npm: str, folder: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    packages = [f"{name}@{version}" for name, version in PINNED.items()]
    command = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
               "--ignore-scripts", "--loglevel=error", *packages]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        raise Unavailable(
            f"npm install {' '.join(packages)} took over {INSTALL_TIMEOUT:g}s"
        ) from None
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        raise Unavailable(f"npm install {' '.join(packages)} failed: {tail}")
    (staging / "installed").write_text(json.dumps(PINNED))
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(staging, folder)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def http_server(servers: ReferenceServers, mode: str, path: str) -> Iterator[str]:
    """server-everything in `mode` (`streamableHttp` or `sse`) on a free port; yields its
    URL ending in `path`. It listens on $PORT (its own default is 3001)."""
    port = free_port()
    proc = subprocess.Popen(
        servers.command(EVERYTHING, mode),
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(proc, port)
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        proc.kill()
        proc.wait(10)


def wait_listening(proc: subprocess.Popen[bytes], port: int, seconds: float = 30) -> None:
    """Until the server started as `proc` accepts connections on `port`."""
    deadline = time.monotonic() + seconds
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{proc.args!r} did not listen on port {port}")
        time.sleep(0.05)


if __name__ == "__main__":
    try:
        where = installed().prefix
    except Unavailable as exc:
        sys.exit(f"reference servers: {exc}")
    print(f"MCP reference servers {', '.join(f'{k}@{v}' for k, v in PINNED.items())} in {where}")
