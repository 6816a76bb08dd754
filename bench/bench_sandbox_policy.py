"""Time building the sandbox policy (what a sandboxed command sees) on a realistic home folder.

    python bench/bench_sandbox_policy.py                   # 2,000 programs in ~/.local/bin
    python bench/bench_sandbox_policy.py --programs 10000
    python bench/bench_sandbox_policy.py --against OLD.py  # and another sandbox.py, in turn

The home holds pyenv with 6 Pythons, nvm with 3 Nodes, cargo and rustup, miniforge with 4
environments, a uv Python, and `--programs` programs in ~/.local/bin (a third links into 10
tools uv installed, a third scripts with a `#!` line, a third links to /usr/bin), on PATH.
The policy is built once per `CodeRepositoryTools`, before the first command; every command
then pays for its mounts (bwrap reads the mount table again for each), so the bench also
times `true` in the sandbox. Each figure is the median of `--runs` after a warm-up (the page
cache is hot for all). `--against` loads another version of toy_agent/sandbox.py (`git show
main:toy_agent/sandbox.py > /tmp/old.py`) and times it on the same home, runs interleaved.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toy_agent import sandbox  # noqa: E402


def script(path: Path, body: str, interpreter: str = "/bin/sh") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{interpreter}\n{body}\n")
    path.chmod(0o755)


def link(path: Path, target: Path | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def make_home(home: Path, programs: int) -> dict[str, str]:
    """The home folder's toolchains; returns the environment a shell there would have."""
    for v in ("3.8.18", "3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0"):
        prefix = home / ".pyenv" / "versions" / v
        script(prefix / "bin" / f"python{v[:4]}", "exit 0")
        for sub in ("lib/python3/os.py", "include/python3/Python.h", "share/man/x.1"):
            (prefix / sub).parent.mkdir(parents=True, exist_ok=True)
            (prefix / sub).write_text("x\n")
    script(home / ".pyenv" / "shims" / "python", "exit 0")
    (home / ".pyenv" / "version").write_text("3.12.1\n")
    for v in ("v18.20.0", "v20.11.1", "v22.1.0"):
        script(home / ".nvm" / "versions" / "node" / v / "bin" / "node", "exit 0")
        (home / ".nvm" / "versions" / "node" / v / "lib" / "node_modules").mkdir(parents=True)
    script(home / ".cargo" / "bin" / "rustup", "exit 0")
    link(home / ".cargo" / "bin" / "cargo", "rustup")
    toolchain = home / ".rustup" / "toolchains" / "stable-x86_64-unknown-linux-gnu"
    script(toolchain / "bin" / "cargo", "exit 0")
    (home / ".rustup" / "settings.toml").write_text('default_toolchain = "stable"\n')
    for env in ("", "envs/a", "envs/b", "envs/c", "envs/d"):
        prefix = home / "miniforge3" / env
        script(prefix / "bin" / "python", "exit 0")
        (prefix / "conda-meta").mkdir(parents=True)
        (prefix / "conda-meta" / "history").write_text("==> x <==\n")
    uv = home / ".local" / "share" / "uv"
    script(uv / "python" / "cpython-3.12.5-linux-x86_64-gnu" / "bin" / "python3.12", "exit 0")
    local_bin = home / ".local" / "bin"
    local_bin.mkdir(parents=True)
    for i in range(programs):
        name = f"tool{i:05d}"
        if i % 3 == 0:  # 10 tools, each with its programs
            tool = uv / "tools" / f"pkg{i % 10}"
            script(tool / "bin" / name, "exit 0")
            (tool / "lib" / "python3.12" / "site-packages").mkdir(parents=True, exist_ok=True)
            (tool / "pyvenv.cfg").write_text("home = /usr/bin\n")
            (tool / "uv-receipt.toml").write_text("[tool]\n")
            link(local_bin / name, tool / "bin" / name)
        elif i % 3 == 1:
            script(local_bin / name, "import sys\n", "/usr/bin/python3")
        else:
            link(local_bin / name, "/usr/bin/env")
    path = [home / ".pyenv" / "shims", home / ".nvm" / "versions" / "node" / "v20.11.1" / "bin",
            home / ".cargo" / "bin", home / "miniforge3" / "envs" / "a" / "bin",
            home / "miniforge3" / "condabin", local_bin]  # fmt: skip
    return {"HOME": str(home), "PATH": ":".join([*map(str, path), "/usr/bin:/bin"]),
            "CONDA_PREFIX": str(home / "miniforge3" / "envs" / "a")}  # fmt: skip


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("other_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--against", type=Path, help="another version of sandbox.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch).resolve() / "home"
        environ = make_home(home, args.programs)
        repo = home / "src" / "project"
        repo.mkdir(parents=True)
        versions: dict[str, Callable[..., object]] = {"this": sandbox.sandbox_policy}
        if args.against:
            versions[args.against.name] = load(args.against).sandbox_policy
        times: dict[str, list[float]] = {name: [] for name in versions}
        for _ in range(args.runs + 1):  # the first is the warm-up
            for name, build in versions.items():
                started = time.perf_counter()
                policy = build(repo, environ=environ, homes=[home])
                times[name].append(time.perf_counter() - started)
        policies = {
            name: build(repo, environ=environ, homes=[home]) for name, build in versions.items()
        }
        commands: dict[str, list[float]] = {name: [] for name in versions}
        for _ in range(args.runs + 1 if sandbox.bwrap_problem() is None else 0):
            for name, policy in policies.items():
                argv = [*policy.argv(), "/bin/true"]  # type: ignore[attr-defined]
                started = time.perf_counter()
                subprocess.run(argv, check=True)
                commands[name].append(time.perf_counter() - started)
        print(f"{args.programs:,} programs in ~/.local/bin; medians of {args.runs} runs")
        print(f"{'':<16} {'build':>9}   {'mounts':>6}   {'a command (true)':>16}")
        for name, policy in policies.items():
            exposed = len(policy.exposed)  # type: ignore[attr-defined]
            build = statistics.median(times[name][1:]) * 1000
            run = (
                f"{statistics.median(commands[name][1:]) * 1000:13.1f} ms"
                if commands[name]
                else "(no bwrap)"
            )
            print(f"{name:<16} {build:6.1f} ms   {exposed:6d}   {run:>16}")


if __name__ == "__main__":
    main()
