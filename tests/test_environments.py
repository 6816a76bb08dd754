"""A batch task's environment: its commands and checks run in a root filesystem (bubblewrap)
or a container (podman, docker), with the copy at /testbed, and nothing of the host."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import container_helpers as containers
import pytest
from fakes import ScriptedLlm, folder, wait_until, xml_action

from toy_agent.batch.driver import RunSettings, run_batch
from toy_agent.batch.environments import image_for
from toy_agent.batch.tasks import BatchError

TOOLS = ("/bin/sh", "/bin/bash", "/usr/bin/cat", "/usr/bin/ls", "/usr/bin/test")
LOOK = "ls / > seen.txt; cat a.txt >> seen.txt"
OUTSIDE = "test -f /testbed/seen.txt && test ! -e /work && test ! -e /root/x"
# In a container: its root, its network (loopback only) and its capabilities (none).
IN_CONTAINER = (
    "ls / > seen.txt; cat a.txt >> seen.txt; grep CapEff /proc/self/status >> seen.txt;"
    " python3 -c 'import socket; print(socket.if_nameindex())' >> seen.txt"
)
CONTAINED = (
    f"{OUTSIDE} && grep -q 'CapEff:.0000000000000000' /proc/self/status && python3 -c "
    "'import socket, sys; sys.exit(socket.if_nameindex() != [(1, \"lo\")])'"
)


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


def batch_in(env: str, tmp_path: Path, command: str = LOOK, check: str = OUTSIDE) -> dict:
    repo = folder(tmp_path / "repo", {"a.txt": "a\n"})
    script = ScriptedLlm(
        xml_action("run_command", command=command),
        xml_action("task_complete", result="done"),
    )  # fmt: skip
    task_id = f"{env.partition(':')[0]}-t1"
    tasks = [{"id": task_id, "repo": str(repo), "task": "look", "env": env, "check": check}]
    settings = RunSettings(make_llm=lambda: script, allow_commands=True, check_retries=0)
    summary = run_batch(tasks, tmp_path / "out", settings)
    return summary.records[0] | {"out": tmp_path / "out"}


def added_lines(record: dict) -> list[str]:
    """The lines the task's patch adds (what the agent's command wrote to seen.txt)."""
    patch = (record["out"] / record["patch"]).read_text()
    return [line[1:] for line in patch.splitlines() if line.startswith("+") and "+++" not in line]


@pytest.mark.slow
def test_a_rootfs_environment_runs_commands_and_checks_in_that_root(tmp_path):
    problem = bwrap_works()
    if problem:
        pytest.skip(problem)
    root = small_root(tmp_path / "root")
    record = batch_in(f"rootfs:{root}", tmp_path)
    assert record["success"] is True, record
    # the root's own top folders and the copy at /testbed, nothing else of the host
    seen = added_lines(record)
    assert set(seen) >= {"bin", "lib", "testbed", "usr", "a"} and "work" not in seen


@pytest.fixture(scope="module")
def podman_conf(tmp_path_factory) -> Path | None:
    """The tests' image (the host's python3, sh, bash, coreutils, git: 70 MB, about 2 s)
    imported into podman; the containers.conf podman runs it with here (None: the host's)."""
    if shutil.which("podman") is None:
        containers.unavailable("podman is not installed")
    work = tmp_path_factory.mktemp("podman")
    problem = containers.build_image(containers.IMAGE, work)
    if problem:
        containers.unavailable(problem)
    with containers.engine_held():
        conf, problem = containers.podman_runs(work)
    if problem:
        containers.unavailable(problem)
    return conf


@pytest.fixture
def podman(podman_conf, monkeypatch) -> Iterator[None]:
    if podman_conf is not None:
        monkeypatch.setenv("CONTAINERS_CONF", str(podman_conf))
    with containers.engine_held():
        yield


def container_names(engine: str, task_id: str) -> list[str]:
    listed = subprocess.run([engine, "ps", "--all", "--format", "{{.Names}}"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [name for name in listed.split() if name.startswith(f"toy-agent-{task_id}-")]


def assert_ran_in_a_container(record: dict) -> None:
    assert record["success"] is True, record  # the check: in the container, no network
    seen = added_lines(record)
    assert {"testbed", "usr", "a", "[(1, 'lo')]", "CapEff:\t0000000000000000"} <= set(seen)
    assert "work" not in seen  # nothing of the host but the copy


@pytest.mark.slow
def test_a_podman_environment_runs_one_task_in_its_own_container(podman, tmp_path):
    record = batch_in(f"podman:{containers.IMAGE}", tmp_path, IN_CONTAINER, CONTAINED)
    assert_ran_in_a_container(record)
    assert container_names("podman", "podman-t1") == []  # removed at the end


@pytest.fixture
def docker_on_podman(podman_conf, tmp_path, monkeypatch):
    """The docker command talking to podman's docker-compatible API (`podman system service`
    on a socket of the test's own, DOCKER_HOST pointing at it): the docker client's real
    path, where no docker engine runs."""
    if shutil.which("docker") is None:
        pytest.skip("the docker command is not installed")
    socket = tmp_path / "podman.sock"
    env = containers.podman_env(containers.service_conf(podman_conf, tmp_path))
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"],
                               env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    with containers.engine_held():
        try:
            wait_until(lambda: subprocess.run(["docker", "version"], capture_output=True)
                       .returncode == 0, "podman's API answers the docker client")  # fmt: skip
            yield
        finally:
            service.terminate()
            service.wait(timeout=30)


@pytest.mark.slow
def test_a_docker_environment_runs_one_task_and_removes_a_killed_batchs_container(
    docker_on_podman, tmp_path
):
    stale = subprocess.run(
        ["docker", "run", "--detach", "--name", "toy-agent-docker-t1-stale", "--label",
         "toy-agent=batch", "--label", "toy-agent.owner=999999999 1", "--entrypoint", "/bin/sh",
         containers.IMAGE, "-c", "sleep 600"], capture_output=True, text=True,
    )  # fmt: skip
    assert stale.returncode == 0, stale.stderr
    record = batch_in(f"docker:{containers.IMAGE}", tmp_path, IN_CONTAINER, CONTAINED)
    assert_ran_in_a_container(record)
    assert container_names("docker", "docker-t1") == []  # its own and the killed batch's


def test_a_bad_env_stops_the_batch_before_anything_runs(tmp_path):
    repo = folder(tmp_path / "repo", {"a.txt": "a\n"})
    for env, message in [
        ("vm:x", "use host, rootfs:DIR"),
        (f"rootfs:{tmp_path}/no", "not a folder"),
    ]:
        with pytest.raises(BatchError, match=message):
            run_batch([{"id": "t", "repo": str(repo), "task": "t", "env": env}],
                      tmp_path / "out", RunSettings(make_llm=ScriptedLlm))  # fmt: skip


def test_an_image_names_the_task_by_its_id_or_as_swebench_images_spell_it():
    assert image_for("swebench/sweb.eval.x86_64.{image_id}:latest", "django__django-11099") == (
        "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert image_for("mine/{id}", "Django__x-1") == "mine/Django__x-1"
