"""Time building the sandbox policy (what a sandboxed command sees) on a realistic home folder,
this version against an earlier one, side by side.

    python bench/bench_sandbox_policy.py                   # 2,000 programs in ~/.local/bin
    python bench/bench_sandbox_policy.py --programs 10000
    python bench/bench_sandbox_policy.py --against REV     # sandbox.py at git REV (66ceecb)
    python bench/bench_sandbox_policy.py --against OLD.py  # or another sandbox.py file

The home holds pyenv with 6 Pythons, nvm with 3 Nodes, cargo and rustup, miniforge with 4
environments, a uv Python, and `--programs` programs in ~/.local/bin (a third links into 10
tools uv installed, a third scripts with a `#!` line, a third links to /usr/bin), on PATH.
The policy is built once per `CodeRepositoryTools`, before the first command; every command
then pays for its mounts (bwrap reads the mount table again for each), so the bench also
times `true` in the sandbox. "toolchains" is toolchain_folders alone, the policy's biggest
part; "policy" is all of sandbox_policy (with GitGuard on a repository without git, where
`git config` runs once). Each figure is the median of `--runs` after a warm-up (the page
cache is hot for all), the versions interleaved; then the same on this machine's own home
and PATH. The default `--against` is 66ceecb, the last version that tested containment with
pathlib and globbed each pattern whole; the bench says whether both expose the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def load(against: str) -> ModuleType | None:
    """sandbox.py from the file `against`, or as it was at git revision `against` (None
    without git history: an unpacked sdist)."""
    path = Path(against)
    if path.is_file():
        source = path.read_text()
    else:
        done = subprocess.run(["git", "show", f"{against}:toy_agent/sandbox.py"], cwd=ROOT,
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            return None
        source = done.stdout
    module = ModuleType(f"sandbox_{path.stem if path.is_file() else against}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{against}:sandbox.py", "exec"), module.__dict__)
    return module


def median_ms(times: list[float]) -> float:
    return statistics.median(times[1:]) * 1000  # the first is the warm-up


def compare(
    versions: dict[str, ModuleType], repo: Path, environ: Mapping[str, str],
    homes: list[Path] | None, runs: int, commands: bool,
) -> dict[str, tuple[object, object]]:  # fmt: skip
    """Each version's times and policy, interleaved; prints a row for each."""
    hidden = versions["this"]._hidden_folders(False, homes, environ)
    folders: dict[str, list[float]] = {name: [] for name in versions}
    builds: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(runs + 1):
        for name, module in versions.items():
            started = time.perf_counter()
            module.toolchain_folders(environ, hidden, repo)
            folders[name].append(time.perf_counter() - started)
            started = time.perf_counter()
            module.sandbox_policy(repo, environ=environ, homes=homes)
            builds[name].append(time.perf_counter() - started)
    policies = {name: module.sandbox_policy(repo, environ=environ, homes=homes)
                for name, module in versions.items()}  # fmt: skip
    true: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(runs + 1 if commands else 0):
        for name, policy in policies.items():
            argv = [*policy.argv(), "/bin/true"]  # type: ignore[attr-defined]
            started = time.perf_counter()
            subprocess.run(argv, check=True)
            true[name].append(time.perf_counter() - started)
    for name, policy in policies.items():
        exposed = len(policy.exposed)  # type: ignore[attr-defined]
        run = f"{median_ms(true[name]):13.1f} ms" if true[name] else "(no bwrap)"
        print(f"{name:<16} {median_ms(folders[name]):7.1f} ms {median_ms(builds[name]):7.1f} ms"
              f"   {exposed:6d}   {run:>16}")  # fmt: skip
    return {name: (p.exposed, p.masked) for name, p in policies.items()}  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--against", default="66ceecb", help="a git revision or a sandbox.py")
    args = parser.parse_args()
    versions: dict[str, ModuleType] = {"this": sandbox}
    if (other := load(args.against)) is not None:
        versions[args.against] = other
    else:
        print(f"(no {args.against} to compare with: not a file, and no git history)")
    commands = sandbox.bwrap_problem() is None
    header = (
        f"{'':<16} {'toolchains':>10} {'policy':>10}   {'mounts':>6}   {'a command (true)':>16}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch).resolve() / "home"
        environ = make_home(home, args.programs)
        repo = home / "src" / "project"
        repo.mkdir(parents=True)
        print(f"{args.programs:,} programs in ~/.local/bin; medians of {args.runs} runs")
        print(header)
        found = compare(versions, repo, environ, [home], args.runs, commands)
        print(f"this machine's home ({os.environ.get('HOME')}) and PATH:")
        print(header)
        found_here = compare(versions, repo, os.environ, None, args.runs, False)
    same = all(len(set(each.values())) == 1 for each in (found, found_here))
    print(f"the same folders exposed and files covered by each version: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
