"""Container images for the tests, made from the host's own programs (no registry is reachable
from the build machines), and a podman that runs them.

`podman_runs(tmp)` finds how podman runs a container here: with the host's configuration, or
else with runc picked in a private containers.conf (crun refuses hosts whose cgroup v2 keeps a
controller while v1 holds the others: "cgroups in hybrid mode not supported"). `CONTAINERS_CONF`
pointing at that file is all a test (and a `podman system service`) needs.

    python tests/container_helpers.py    # build the image now and say how podman runs it
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

IMAGE = "localhost/toy-agent-test:python"
PROGRAMS = ("sh", "bash", "cat", "ls", "test", "sleep", "echo", "mkdir", "rm", "cp", "mv",
            "env", "head", "tail", "wc", "touch", "chmod", "pwd", "true", "false", "grep",
            "sed", "git", "id")  # fmt: skip
STDLIB_LEFT_OUT = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                   "site-packages", "dist-packages", "__pycache__"}  # fmt: skip
RUNTIMES = ("", "runc")  # the host's own choice first
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")  # as toy_agent's
FROM_LABEL = "toy-agent-test.root"  # an image's label: the sha256 of the root and changes


def unavailable(reason: str) -> None:
    """Skip saying why; under CI=true, which installs podman and runc, fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _entries(path: str, seen: set[str]) -> list[str]:
    """`path` and, where it is a symlink, what it points at, each with its folders resolved
    (so /bin/sh is stored as usr/bin/sh beside the image's own bin -> usr/bin link)."""
    entry = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    if entry in seen or not os.path.lexists(entry):
        return []
    seen.add(entry)
    if os.path.islink(entry):
        target = os.path.join(os.path.dirname(entry), os.readlink(entry))
        return [entry, *_entries(target, seen)]
    return [entry]


def _libraries(files: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for name in files:
        listed = subprocess.run(["ldd", name], capture_output=True, text=True).stdout
        found |= {word for word in listed.split() if word.startswith("/")}
    return found


def python_interpreter() -> tuple[str, str]:
    """The host's Python and its standard library folder: /usr/bin/python3 where there is
    one, else (a real file) the one running the tests."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        return os.path.realpath(sys._base_executable), sysconfig.get_paths()["stdlib"]
    stdlib = subprocess.run([python, "-c", "import sysconfig; "
                             "print(sysconfig.get_paths()['stdlib'])"],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    return python, os.path.realpath(stdlib)


def root_tar(tar_path: Path, extra: dict[str, Path] | None = None) -> Path:
    """A tar of a minimal root: sh, bash, coreutils, grep, sed, git, python3 and its standard
    library with the libraries they load; `extra` maps image paths to host folders or files
    to add (a package, a script)."""
    python, stdlib = python_interpreter()
    programs = [found for name in PROGRAMS if (found := shutil.which(name, path="/usr/bin:/bin"))]
    dynload = [str(p) for p in Path(stdlib, "lib-dynload").glob("*.so")]
    seen: set[str] = set()
    files: list[str] = []
    for name in [*programs, python, *dynload, *_libraries([*programs, python, *dynload])]:
        files += _entries(name, seen)

    def leave_out(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if Path(info.name).name in STDLIB_LEFT_OUT else info

    with tarfile.open(tar_path, "w") as tar:
        for top in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{top}"):
                tar.add(f"/{top}", top)
        for folder, mode in (("tmp", 0o1777), ("dev", 0o755), ("proc", 0o555), ("sys", 0o555),
                             ("etc", 0o755), ("root", 0o700), ("run", 0o755)):  # fmt: skip
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                            "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"),
                           ("etc/group", "root:x:0:\nnogroup:x:65534:\n")):  # fmt: skip
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, fileobj=__import__("io").BytesIO(data))
        for name in files:
            if not name.startswith(stdlib + "/"):  # added whole below
                tar.add(name, name.lstrip("/"), recursive=False)
        tar.add(stdlib, stdlib.lstrip("/"), filter=leave_out)
        if not python.startswith(("/usr/bin/", "/bin/")):
            info = tarfile.TarInfo("usr/local/bin/python3")
            info.type, info.linkname = tarfile.SYMTYPE, python
            tar.addfile(info)
        for image_path, host_path in (extra or {}).items():
            tar.add(host_path, image_path.lstrip("/"), filter=leave_out)
    return tar_path


_HELD = [0]  # how deep this process holds the engine's lock


@contextlib.contextmanager
def engine_held() -> Iterator[None]:
    """The container engine for this test alone, across the xdist workers: a test that makes
    containers, or reads all of them, runs inside it. The official harness lists every
    container on the engine and inspects each, so a container another test removes in
    between fails its report with "no such container". Reentrant within a process."""
    if _HELD[0]:
        _HELD[0] += 1
        try:
            yield
        finally:
            _HELD[0] -= 1
        return
    with open(Path(tempfile.gettempdir()) / "toy-agent-tests-engine.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _HELD[0] = 1
        try:
            yield
        finally:
            _HELD[0] = 0
            fcntl.flock(lock, fcntl.LOCK_UN)


def conf_for(runtime: str, folder: Path) -> Path | None:
    """A containers.conf that picks `runtime` (None: the host's own configuration)."""
    if not runtime:
        return None
    conf = folder / f"containers-{runtime}.conf"
    conf.write_text(f'[engine]\nruntime = "{runtime}"\n', encoding="utf-8")
    return conf


def service_conf(conf: Path | None, folder: Path) -> Path:
    """`conf` plus the limits toy_agent's `podman run` asks for, as defaults: for containers
    created through podman's docker-compatible API, where the docker client asks for none."""
    text = conf.read_text(encoding="utf-8") if conf is not None else ""
    service = folder / "containers-service.conf"
    service.write_text(f'{text}[containers]\ndefault_ulimits = ["{LIMITS[1]}", "{LIMITS[3]}"]\n',
                       encoding="utf-8")  # fmt: skip
    return service


def podman_env(conf: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if conf is not None:
        env["CONTAINERS_CONF"] = str(conf)
    return env


def pytest_packages(folder: str = "/opt/pytest") -> dict[str, Path]:
    """The tests' own pytest and the distributions it requires (pure Python), as image paths
    under `folder` (to add with PYTHONPATH set to it) to host paths."""
    from importlib import metadata

    from packaging.requirements import Requirement

    found: dict[str, Path] = {}
    todo, seen = ["pytest"], set()
    while todo:
        dist = metadata.distribution(todo.pop())
        if dist.metadata["Name"] in seen:
            continue
        seen.add(dist.metadata["Name"])
        for line in dist.requires or []:
            wanted = Requirement(line)
            if wanted.marker is None or wanted.marker.evaluate({"extra": ""}):
                todo.append(wanted.name)
        for file in dist.files or []:
            top = file.parts[0]
            if not top.endswith(".pth") and top not in ("..", "__pycache__"):  # dist-info too
                found[f"{folder}/{top}"] = Path(str(dist.locate_file(top)))
    return found


def build_image(name: str, folder: Path, extra: dict[str, Path] | None = None,
                changes: tuple[str, ...] = ()) -> str | None:  # fmt: skip
    """`podman import` of the minimal root as `name` (with `changes`, Dockerfile lines such as
    `ENV PYTHONPATH=/opt/pytest`); None, or why it failed. An image of that name made from
    the same root and changes (its label says so) is kept as it is: importing 70 MB again
    takes seconds."""
    tar = root_tar(folder / "root.tar", extra)
    digest = hashlib.sha256(tar.read_bytes())
    digest.update("\n".join(changes).encode())
    made_from = f"{FROM_LABEL}={digest.hexdigest()}"
    options = [word for change in (*changes, f"LABEL {made_from}") for word in ("--change", change)]
    before = subprocess.run(["podman", "image", "inspect", "--format",
                             f'{{{{.Id}}}} {FROM_LABEL}={{{{index .Labels "{FROM_LABEL}"}}}}',
                             name], capture_output=True, text=True).stdout.split()  # fmt: skip
    if before[1:] == [made_from]:
        tar.unlink()
        return None
    done = subprocess.run(["podman", "import", *options, str(tar), name],
                          capture_output=True, text=True)  # fmt: skip
    tar.unlink()
    if done.returncode != 0:
        return f"podman import failed: {done.stderr.strip().splitlines()[-1:]}"
    if before and before[0] not in done.stdout:  # the older build, unless a container uses it
        subprocess.run(["podman", "rmi", before[0]], capture_output=True)
    return None


def podman_runs(folder: Path, image: str = IMAGE) -> tuple[Path | None, str | None]:
    """How podman runs `image` here: (the containers.conf to use, None), or (None, why not)
    naming each runtime's failure."""
    if shutil.which("podman") is None:
        return None, "podman is not installed"
    failures = []
    for runtime in RUNTIMES:
        if runtime and shutil.which(runtime) is None:
            failures.append(f"{runtime} is not installed")
            continue
        conf = conf_for(runtime, folder)
        done = subprocess.run(["podman", "run", "--rm", "--pull", "never", *LIMITS, image,
                               "/bin/sh", "-c", "true"],
                              capture_output=True, text=True, env=podman_env(conf))  # fmt: skip
        if done.returncode == 0:
            return conf, None
        lines = done.stderr.strip().splitlines()
        failures.append(f"{runtime or 'the default runtime'}: {lines[-1] if lines else '?'}")
    return None, "podman cannot run a container here: " + "; ".join(failures)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        problem = build_image(IMAGE, Path(tmp))
        print(problem or f"{IMAGE} built in {time.monotonic() - started:.1f} s")
        conf, problem = podman_runs(Path(tmp))
        print(problem or f"podman runs it with {conf or 'the host configuration'}")
