"""A batch task's environment: its commands and checks run in a root filesystem (bubblewrap)
or a container (podman, docker), with the copy at /testbed, and nothing of the host."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fakes import ScriptedLlm, folder, xml_action

from toy_agent.batch import RunSettings, run_batch
from toy_agent.tasks import BatchError

TOOLS = ("/bin/sh", "/bin/bash", "/usr/bin/cat", "/usr/bin/ls", "/usr/bin/test")


def small_root(root: Path) -> Path:
    """A root filesystem of a few of the host's programs and the libraries they load."""
    for program in TOOLS:
        files = {program}
        listed = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
        files |= {word for word in listed.split() if word.startswith("/")}
        for name in files:
            target = root / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(name).resolve(), target)
    return root


def bwrap_works() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    done = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"],
                          capture_output=True, text=True)  # fmt: skip
    return None if done.returncode == 0 else f"bwrap does not run here: {done.stderr.strip()}"


def batch_in(env: str, tmp_path: Path) -> dict:
    repo = folder(tmp_path / "repo", {"a.txt": "a\n"})
    script = ScriptedLlm(
        xml_action("run_command", command="ls / > seen.txt; cat a.txt >> seen.txt"),
        xml_action("task_complete", result="done"),
    )  # fmt: skip
    tasks = [
        {
            "id": "t1",
            "repo": str(repo),
            "task": "look",
            "env": env,
            "check": "test -f /testbed/seen.txt && test ! -e /work && test ! -e /root/x",
        }
    ]
    settings = RunSettings(make_llm=lambda: script, allow_commands=True, check_retries=0)
    summary = run_batch(tasks, tmp_path / "out", settings)
    return summary.records[0] | {"out": tmp_path / "out"}


@pytest.mark.slow
def test_a_rootfs_environment_runs_commands_and_checks_in_that_root(tmp_path):
    problem = bwrap_works()
    if problem:
        pytest.skip(problem)
    root = small_root(tmp_path / "root")
    record = batch_in(f"rootfs:{root}", tmp_path)
    assert record["success"] is True, record
    patch = (record["out"] / record["patch"]).read_text()
    # the root's own top folders and the copy at /testbed, nothing else of the host
    seen = [line[1:] for line in patch.splitlines() if line.startswith("+") and "+++" not in line]
    assert set(seen) >= {"bin", "lib", "testbed", "usr", "a"} and "work" not in seen


def podman_problem(tmp_path: Path) -> str | None:
    """Why podman cannot run a container here (None when it can), with a small image made of
    the host's own programs (no registry is reachable)."""
    if shutil.which("podman") is None:
        return "podman is not installed"
    root = small_root(tmp_path / "image")
    tar = tmp_path / "image.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    done = subprocess.run(["podman", "import", str(tar), "toy-agent-test:small"],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        return f"podman import failed: {done.stderr.strip().splitlines()[-1:]}"
    done = subprocess.run(["podman", "run", "--rm", "--ulimit", "nofile=1024:1024",
                           "--ulimit", "nproc=4096:4096", "toy-agent-test:small", "/bin/sh",
                           "-c", "true"], capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        return f"podman cannot run a container here: {done.stderr.strip().splitlines()[-1:]}"
    return None


@pytest.mark.slow
def test_a_podman_environment_runs_one_task_in_its_own_container(tmp_path):
    problem = podman_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    record = batch_in("podman:toy-agent-test:small", tmp_path)
    assert record["success"] is True, record
    names = subprocess.run(
        ["podman", "ps", "--all", "--filter", "label=toy-agent=batch", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
    ).stdout
    assert names.strip() == ""  # removed at the end


def test_a_bad_env_stops_the_batch_before_anything_runs(tmp_path):
    repo = folder(tmp_path / "repo", {"a.txt": "a\n"})
    for env, message in [
        ("vm:x", "use host, rootfs:DIR"),
        (f"rootfs:{tmp_path}/no", "not a folder"),
    ]:
        with pytest.raises(BatchError, match=message):
            run_batch([{"id": "t", "repo": str(repo), "task": "t", "env": env}],
                      tmp_path / "out", RunSettings(make_llm=ScriptedLlm))  # fmt: skip
