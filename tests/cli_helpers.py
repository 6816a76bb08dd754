"""Running the real CLI the ways the tests need: as a process of its own, as a user's shell or
script starts it (`run_cli`, `toy_agent` for a terminal's argv), or as `main()` in the test's
process (`run_main`); and the provider for the runs that do not care which it is.

One copy of each, so every module's runs see the same environment. The fixtures that go with
them (`clean_env`, `home`, `repo`) are in conftest.py.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider

from toy_agent.cli import main
from toy_agent.providers import endpoint_variables, key_variables

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "main.py"


def toy_agent(*args: str | bytes) -> list[str | bytes]:
    """The argv that starts the CLI with this interpreter."""
    return [sys.executable, str(MAIN), *args]


def cli_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the developer's provider keys and base URLs, with
    NO_COLOR, then `env` on top: a run reaches only the servers a test points it at."""
    dropped = {*key_variables(), *endpoint_variables()}
    base = {name: value for name, value in os.environ.items() if name not in dropped}
    return {**base, "NO_COLOR": "1", **(env or {})}


def run_cli(
    *args: str | bytes,
    env: Mapping[str, str] | None = None,
    stdin: str | bytes = "",
    cwd: Path | str | None = None,
    text: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[Any]:
    """Run the CLI to its end without a terminal: stdin is a pipe holding `stdin` (empty: the
    run sees end of input at once), stdout and stderr are captured apart. `text=False` keeps
    the output as bytes (and allows byte arguments, as a shell passes a non-UTF-8 name)."""
    if not text and isinstance(stdin, str):
        stdin = stdin.encode()
    return subprocess.run(
        toy_agent(*args), input=stdin, capture_output=True, text=text, timeout=timeout,
        cwd=cwd, env=cli_environment(env),
    )  # fmt: skip


def run_main(
    capsys: pytest.CaptureFixture[str],
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`main(args)` in this process, its exit code and streams handed back as `run_cli` hands
    back a process's, with the same environment (`cli_environment(env)`) and working folder:
    for runs whose point is what the CLI prints, writes or exits with, where a process of its
    own would show nothing more (terminals, signals, a closed stdin and what a child inherits
    need `run_cli`). `stdin` is what a pipe would hold (answers, a task for `--task -`). What
    main changes in the process is put back afterwards: the environment (a .env file's
    variables), the working folder, stdin, and the loggers' levels and handlers."""
    saved_env, saved_cwd, saved_stdin = dict(os.environ), os.getcwd(), sys.stdin
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in
                                      list(logging.Logger.manager.loggerDict))]  # fmt: skip
    saved_logging = [(logger, logger.level, list(logger.handlers)) for logger in loggers]
    environment = cli_environment(env)
    capsys.readouterr()
    try:
        os.environ.clear()
        os.environ.update(environment)
        if cwd is not None:
            os.chdir(cwd)
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)
        code = main(list(args))
    finally:
        sys.stdin = saved_stdin
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        for logger, level, handlers in saved_logging:
            if logger.level != level:  # each setLevel clears every logger's cache: only changes
                logger.setLevel(level)
            logger.handlers[:] = handlers
    return subprocess.CompletedProcess(list(args), code, *capsys.readouterr())


def quickest_provider_env(server: FakeProvider) -> dict[str, str]:
    """The variables that point a CLI run at `server` as its provider, for the many runs where
    which provider it is does not matter: OpenAI-compatible, whose SDK starts quickest (on a
    quiet machine `import openai` takes about 0.7 s of CPU, `import anthropic` 1.4 s, in every
    process; half as much again under the suite's load). A run that asks no model replays."""
    return {**server.env("openai"), "TOY_AGENT_LLM_PROVIDER": "openai"}
