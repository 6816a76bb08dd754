"""Where a batch task's commands and checks run: the host, a root filesystem (bubblewrap), or a
container (docker or podman), one per task, with the task's copy at a work folder (/testbed).

The agent's file tools work on the copy on the host; only commands (the agent's `run_command`,
the checks, a setup, the SWE-bench grading) go into the environment.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from toy_agent.sandbox import privilege_options

WORKDIR = "/testbed"
ENGINES = ("docker", "podman")
CONTAINER_PREFIX = "toy-agent-"
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Without CAP_SYS_RESOURCE (a container or CI runner that dropped it), crun cannot set the
# default RLIMIT_NOFILE/NPROC podman asks for ("crun: setrlimit `RLIMIT_NOFILE`: Operation not
# permitted"); limits at or below the host's need no privilege.
LOWER_LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
# The engine client's own settings (which daemon or socket, which context, podman's
# configuration and rootless runtime folder). A command runs with the allow-listed environment,
# but its `docker exec` / `podman exec` must reach the engine that started the container; they
# are given to the client only (an exec passes nothing of its own environment into the
# container).
ENGINE_VARIABLES = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
                    "DOCKER_TLS_VERIFY", "CONTAINER_HOST", "CONTAINER_CONNECTION",
                    "CONTAINER_SSHKEY", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF",
                    "CONTAINERS_REGISTRIES_CONF", "XDG_RUNTIME_DIR")  # fmt: skip


class EnvironmentError_(Exception):
    """The environment cannot be used (a usage error before the batch, or the task's error)."""


def parse_env(spec: str) -> tuple[str, str]:
    """`host`, `rootfs:DIR`, `docker:IMAGE` or `podman:IMAGE` as (kind, target)."""
    kind, _, target = spec.partition(":")
    if kind == "host" and not target:
        return "host", ""
    if kind in ("rootfs", *ENGINES) and target.strip():
        return kind, target.strip()
    raise EnvironmentError_(f"env {spec!r}: use host, rootfs:DIR, docker:IMAGE or podman:IMAGE")


def image_for(target: str, task_id: str) -> str:
    """`target` with the task's id in it: `{id}` as it is, `{image_id}` as SWE-bench's image
    names spell it (lower case, `__` as `_1776_`: `django__django-11099` is in
    `swebench/sweb.eval.x86_64.django_1776_django-11099`)."""
    image_id = task_id.lower().replace("__", "_1776_")
    return target.replace("{image_id}", image_id).replace("{id}", task_id)


@dataclass
class Environment:
    """A task's environment while its copy lives: `wrap` turns a shell argv into one that runs
    in it, at WORKDIR. A container is started by `start` and removed by `stop`."""

    kind: str
    target: str = ""
    network: bool = False
    owner: str = ""  # the batch's process (pid and start time): its stale containers go
    copy: Path | None = None
    container: str | None = field(default=None, repr=False)

    @property
    def shell(self) -> str:
        """bash where the environment has it (a check's `set -o pipefail`), else /bin/sh."""
        if self.kind == "rootfs":
            return "/bin/bash" if (Path(self.target) / "bin" / "bash").exists() else "/bin/sh"
        return "/bin/sh"

    def start(self, copy: Path, task_id: str) -> None:
        self.copy = copy
        if self.kind not in ENGINES:
            return
        engine = _engine(self.kind)
        name = (
            f"{CONTAINER_PREFIX}{re.sub(r'[^A-Za-z0-9_.-]', '-', task_id)}-{uuid.uuid4().hex[:8]}"
        )
        argv = [engine, "run", "--detach", "--name", name, "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--label", "toy-agent=batch",
                "--label", f"toy-agent.owner={self.owner}",
                "--volume", f"{copy}:{WORKDIR}", "--workdir", WORKDIR,
                *(() if self.network else ("--network", "none")),
                *(LOWER_LIMITS if self.kind == "podman" else ()),
                "--entrypoint", "/bin/sh", self.target, "-c", "sleep 2147483647"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            raise EnvironmentError_(f"{self.kind} could not start {self.target}: "
                                    f"{lines[-1] if lines else done.returncode}")  # fmt: skip
        self.container = name

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` (a shell and its command) as it runs in the environment."""
        if self.kind == "rootfs":
            assert self.copy is not None
            bwrap = shutil.which("bwrap") or "bwrap"
            return [bwrap, "--tmpfs", "/", *_root_mounts(Path(self.target)),
                    "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                    "--bind", str(self.copy), WORKDIR, "--remount-ro", "/", "--chdir", WORKDIR,
                    "--unshare-all", *(["--share-net"] if self.network else []),
                    "--setenv", "PATH", STANDARD_PATH, "--setenv", "HOME", "/tmp",
                    *privilege_options(bwrap),
                    "--die-with-parent", "--new-session", "--", *argv]  # fmt: skip
        if self.kind in ENGINES:
            assert self.container is not None
            client = [f"{name}={os.environ[name]}" for name in ENGINE_VARIABLES
                      if name in os.environ]  # fmt: skip
            env = shutil.which("env") or "/usr/bin/env"
            return [*([env, *client] if client else []), _engine(self.kind), "exec",
                    "--workdir", WORKDIR, self.container, *argv]  # fmt: skip
        return argv

    def stop(self) -> None:
        if self.container is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(_remove(_engine(self.kind), [self.container]),
                               capture_output=True, timeout=120)  # fmt: skip
            self.container = None


def _root_mounts(root: Path) -> list[str]:
    """The root filesystem's top entries, read-only, on an empty root (a read-only bind of the
    folder itself as / would leave nowhere to mount /dev, /proc, /tmp and /testbed)."""
    options: list[str] = []
    for entry in sorted(root.iterdir()):
        if entry.name in ("dev", "proc", "tmp", WORKDIR.strip("/")):
            continue
        if entry.is_symlink():
            options += ["--symlink", str(entry.readlink()), f"/{entry.name}"]
        else:
            options += ["--ro-bind", str(entry), f"/{entry.name}"]
    return options


def _engine(kind: str) -> str:
    found = shutil.which(kind)
    if found is None:
        raise EnvironmentError_(f"env {kind}: the {kind} command is not on PATH")
    return found


def _remove(engine: str, names: list[str]) -> list[str]:
    """The command that removes containers now: podman's `rm --force` otherwise waits 10 s for
    the container's shell, which as pid 1 ignores SIGTERM (docker's kills at once)."""
    now = ["--time", "0"] if Path(engine).name == "podman" else []
    return [engine, "rm", "--force", *now, *names]


def remove_stale_containers(kind: str, is_alive: Callable[[str], bool]) -> list[str]:
    """The containers of batches that were killed (labelled toy-agent=batch, with an owner
    `is_alive` says is gone), removed; returns their names."""
    engine = shutil.which(kind)
    if engine is None:
        return []
    try:
        ids = subprocess.run(
            [engine, "ps", "--all", "--quiet", "--filter", "label=toy-agent=batch"],
            capture_output=True, text=True, timeout=60,
        ).stdout.split()  # fmt: skip
        # `inspect` reads a label the same way in docker and podman (their `ps --format` differ)
        listed = subprocess.run(
            [engine, "inspect", "--format", '{{.Name}}|{{index .Config.Labels "toy-agent.owner"}}',
             *ids], capture_output=True, text=True, timeout=60,
        ).stdout if ids else ""  # fmt: skip
        stale = [name.lstrip("/") for name, _, owner in (line.partition("|") for line in
                 listed.splitlines()) if name.strip() and not is_alive(owner.strip())]  # fmt: skip
        if stale:
            subprocess.run(_remove(engine, stale), capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return []
    return stale
