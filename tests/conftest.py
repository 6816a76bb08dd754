"""Every run saves a session under $XDG_STATE_HOME and reads $XDG_CONFIG_HOME/toy-agent: no
test may touch the real ~/.local/state or ~/.config.

The variables are set once at import (before any test module snapshots os.environ for its
subprocesses), then per test to a folder of that test's own.
"""

from __future__ import annotations

import atexit
import compileall
import gc
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest
from fakes import folder
from hypothesis import settings

from toy_agent.providers import endpoint_variables, key_variables

# No hypothesis deadline: a property is about what the code does, not how fast; the default
# 200 ms failed by chance on a loaded machine (speed is measured in bench/, never asserted).
settings.register_profile("toy-agent", deadline=None)
settings.load_profile("toy-agent")

if sys.dont_write_bytecode:
    # PYTHONDONTWRITEBYTECODE (set on some machines and images) would make every xdist worker
    # and every process a test starts compile the suite and the package again: about 4 s of
    # CPU a worker and 0.3 s a process. Here they are compiled where Python keeps them, beside
    # the sources (ignored by git), once by the controller and then by the workers as they
    # import; the processes the tests start read them and, keeping the variable, write nothing.
    # (Not a PYTHONPYCACHEPREFIX: under a prefix a process reads nothing compiled elsewhere,
    # so each one compiled the standard library it imports: 0.15 s for `python -c pass`.)
    sys.dont_write_bytecode = False
    if "PYTEST_XDIST_WORKER" not in os.environ:
        for _folder in ("toy_agent", "tests", "bench"):
            compileall.compile_dir(Path(__file__).resolve().parents[1] / _folder, quiet=2)

_SCRATCH = tempfile.mkdtemp(prefix="toy-agent-tests-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
os.environ["XDG_STATE_HOME"] = os.path.join(_SCRATCH, "state")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_SCRATCH, "config")
for _name in [name for name in os.environ if name.startswith("TOY_AGENT_")]:
    del os.environ[_name]  # a developer's own settings must not change what tests see


def _one_certificate_bundle() -> str | None:
    """A CA bundle of one certificate, for SSL_CERT_FILE. No test speaks TLS (every provider
    and server is a local fake over http), yet each SDK client loads the whole bundle when it
    is built: 35 ms of CPU for an openai or anthropic client, three times that for google-genai,
    in this process and in every CLI process a test starts (a sixth of the quick subset)."""
    try:
        import certifi
    except ImportError:
        return None
    bundle = Path(certifi.where()).read_text(encoding="ascii", errors="replace")
    end = "-----END CERTIFICATE-----\n"
    if "-----BEGIN CERTIFICATE-----" not in bundle or end not in bundle:
        return None
    path = Path(_SCRATCH) / "one-certificate.pem"
    path.write_text(bundle[bundle.index("-----BEGIN CERTIFICATE-----") :].split(end)[0] + end)
    return str(path)


if (_bundle := _one_certificate_bundle()) is not None:
    os.environ["SSL_CERT_FILE"] = _bundle
    os.environ.pop("SSL_CERT_DIR", None)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # Started in the background of a script (`pytest &`), which ignores SIGINT: every CLI
    # process a test starts would inherit that and never see the Ctrl-C the test sends it.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (addopts): a worker a core for the quick subset (`-m "not slow"`), which keeps
    the CPU busy; one more for anything else, where much of the time goes to waiting on real
    processes, terminals and servers. Each worker imports and collects the whole suite
    (about 4 s of CPU, 7 s where PYTHONDONTWRITEBYTECODE keeps pytest from caching its
    rewritten test modules), so a worker that would only wait costs more than it brings.
    PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quick = (config.getoption("markexpr") or "").strip() == "not slow"
    return (cores or 1) + (0 if quick else 1)


@pytest.fixture(autouse=True)
def private_state_and_config(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    return home


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No provider key, base URL, API version or Ray address from the developer's shell, and a
    working directory of the test's own (so without a .env file). Returns that directory."""
    for name in (*key_variables(), *endpoint_variables(), "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return workdir


@pytest.fixture
def home(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private home: HOME, XDG_STATE_HOME and XDG_CONFIG_HOME under tmp_path/home, and
    `clean_env`'s environment without provider variables or TOY_AGENT_ settings."""
    root = tmp_path / "home"
    for name, sub in (("HOME", ""), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(root / sub))
    for name in list(os.environ):
        if name.startswith("TOY_AGENT_") or name.endswith(("_API_KEY", "_BASE_URL")):
            monkeypatch.delenv(name)
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A one-file repository: hello.py, which prints a misspelt greeting for tasks to fix."""
    return folder(tmp_path / "repo", {"hello.py": "print('helo')\n"})


# --- the official MCP reference servers (tests/reference_servers.py) --------------------------


@pytest.fixture(scope="session")
def reference_servers(request: pytest.FixtureRequest):
    """The pinned npm reference servers, installed once into the pytest cache. Skips when
    node/npm are missing or the install fails; under CI=true it fails instead."""
    import reference_servers as ref

    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    root = cache.mkdir("mcp-reference-servers").parent if cache else ref.DEFAULT_CACHE
    try:
        return ref.installed(root)
    except ref.Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"MCP reference servers: {exc}")
        pytest.skip(f"MCP reference servers: {exc}")


@pytest.fixture(scope="session")
def everything_http(reference_servers):
    """server-everything over Streamable HTTP; its URL (…/mcp)."""
    import reference_servers as ref

    with ref.http_server(reference_servers, "streamableHttp", "/mcp") as url:
        yield url


@pytest.fixture(scope="session")
def everything_sse(reference_servers):
    """server-everything over the legacy HTTP+SSE transport; its URL (…/sse)."""
    import reference_servers as ref

    with ref.http_server(reference_servers, "sse", "/sse") as url:
        yield url


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The suite is over: the objects it made are freed with the process, not collected. An
    xdist worker's heap (three provider SDKs, the mcp SDK, hypothesis) took the interpreter's
    last garbage collection 1-2 s, which the run waited for before printing its summary."""
    gc.freeze()


_MODULES_FROZEN = [0]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a test that imported a lot (a provider SDK: thousands of modules and classes),
    what is alive is moved out of the garbage collector's sight (`gc.freeze`): those objects
    live as long as the process, yet every full collection walked them again, a second of CPU
    in each xdist worker. Garbage is collected first, so nothing freed by it stays."""
    if len(sys.modules) > _MODULES_FROZEN[0] + 100:
        gc.collect()
        gc.freeze()
        _MODULES_FROZEN[0] = len(sys.modules)
