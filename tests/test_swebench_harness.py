"""The official SWE-bench harness grades a batch's predictions as toy_agent graded them.

Two instances of six (tests/swebench_helpers.py), one fixed right and one wrong by a scripted
model, run in podman containers of an image named as the harness names an instance's image
(`swebench/sweb.eval.x86_64.benjaminp_1776_six-1`), built by the test from the host's own
python3, git and tools with six's repository at /testbed (no registry is reachable). Then
swebench's own `run_evaluation` grades the batch's preds.jsonl in the same images, through
podman's Docker API (`podman system service` on a socket of the test's own, DOCKER_HOST), the
way it runs against Docker's engine."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import container_helpers as containers
import pytest
import swebench_helpers as helpers
from fakes import ScriptedLlm, wait_until, xml_action

from toy_agent.batch.driver import RunSettings, run_batch
from toy_agent.batch.environments import image_for
from toy_agent.batch.swebench import SweOptions

pytestmark = pytest.mark.slow

IDS = ("benjaminp__six-1", "benjaminp__six-2")  # the right fix, the wrong one
IMAGE = "swebench/sweb.eval.x86_64.{image_id}:latest"


@pytest.fixture(scope="module")
def six_tree(request: pytest.FixtureRequest) -> Path:
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir("swebench-six").parent if cache else helpers.DEFAULT_CACHE
    try:
        return helpers.sdist(root)
    except helpers.Unavailable as exc:
        containers.unavailable(str(exc))
        raise


def fixing(new: str) -> ScriptedLlm:
    return ScriptedLlm(
        xml_action("edit_file", path="six.py", old_str=helpers.BUGGY, new_str=new),
        xml_action("task_complete", result="fixed"),
    )  # fmt: skip


def eval_script(data: dict) -> str:
    """What the harness runs in the container: SWE-bench's eval.sh for a pytest project (the
    test file reset, test_patch applied, exactly the instance's tests, the file reset again),
    with the image's python3 for the dataset's conda environment."""
    base, tests = data["base_commit"], data["FAIL_TO_PASS"] + data["PASS_TO_PASS"]
    return (
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n"
        "git config --global --add safe.directory /testbed\n"
        f"git checkout {base} test_six.py\n"
        f"git apply -v - <<'EOF_114329324912'\n{data['test_patch']}\nEOF_114329324912\n"
        ": '>>>>> Start Test Output'\n"
        f"python3 -m pytest -rA {' '.join(map(shlex.quote, tests))}\n"
        ": '>>>>> End Test Output'\n"
        f"git checkout {base} test_six.py\n"
    )


def build_images(data: dict, tmp_path: Path) -> list[str]:
    """The instances' image: the minimal root, pytest at /opt/pytest, six's repository at
    /testbed at the base commit; one build, one name per instance."""
    testbed = tmp_path / "testbed"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "six"), str(testbed)], check=True)
    subprocess.run(["git", "-C", str(testbed), "checkout", "-q", data["base_commit"]], check=True)
    names = [image_for(IMAGE, instance_id) for instance_id in IDS]
    problem = containers.build_image(
        names[0], tmp_path, {"/testbed": testbed, **containers.pytest_packages()},
        ("ENV PYTHONPATH=/opt/pytest", "WORKDIR /testbed", "STOPSIGNAL SIGKILL"),
    )  # fmt: skip
    if problem:
        containers.unavailable(problem)
    subprocess.run(["podman", "tag", names[0], names[1]], check=True, capture_output=True)
    return names


def run_harness(harness: Path, dataset: Path, preds: Path, conf: Path | None,
                tmp_path: Path) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """swebench's `run_evaluation` against podman's Docker API on a socket of the test's own.
    It lists every container on the engine and inspects each, so no other test's container
    may come or go meanwhile (`engine_held`)."""
    socket = tmp_path / "podman.sock"
    service_env = containers.podman_env(containers.service_conf(conf, tmp_path))
    with containers.engine_held():
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{socket}"],
            cwd=tmp_path, env=service_env, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_until(socket.exists, "podman's Docker API listens")
            return subprocess.run(
                [sys.executable, str(harness), "--dataset_name", str(dataset),
                 "--predictions_path", str(preds), "--run_id", "t", "--max_workers", "2",
                 "--timeout", "300"],
                cwd=tmp_path, env=dict(os.environ, DOCKER_HOST=f"unix://{socket}"),
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
        finally:
            service.terminate()
            service.wait(timeout=60)
            listed = subprocess.run(
                ["podman", "ps", "--all", "--filter", "name=sweb.eval.benjaminp", "--quiet"],
                capture_output=True, text=True,
            ).stdout.split()  # fmt: skip
            if listed:  # the harness stops its containers with the docker command, if any
                subprocess.run(["podman", "rm", "--force", "--time", "0", *listed],
                               capture_output=True)  # fmt: skip


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    """The official harness's module, importable, or a skip saying how to install it."""
    try:
        import docker  # noqa: F401  (the harness's client)
        import swebench.harness.run_evaluation as run_evaluation
    except ImportError as exc:
        pytest.skip(f"the swebench package is not installed ({exc}): pip install -e '.[swebench]'")
    return Path(run_evaluation.__file__)


def test_the_official_harness_grades_a_batch_run_in_containers_as_the_batch_did(
    harness, six_tree, tmp_path, monkeypatch
):
    if subprocess.run(["which", "podman"], capture_output=True).returncode != 0:
        containers.unavailable("podman is not installed")
    data = helpers.make_instance(six_tree, tmp_path)
    images = build_images(data, tmp_path)
    conf, problem = containers.podman_runs(tmp_path, images[0])
    if problem:
        containers.unavailable(problem)
    if conf is not None:
        monkeypatch.setenv("CONTAINERS_CONF", str(conf))

    # toy_agent: the agent's edits, then the grading, in each instance's container
    instances = [dict(data, instance_id=instance_id) for instance_id in IDS]
    scripts = iter([fixing(helpers.RIGHT_FIX), fixing(helpers.WRONG_FIX)])
    settings = RunSettings(make_llm=lambda: next(scripts), env=f"podman:{IMAGE}")
    swe = SweOptions({"benjaminp/six": str(tmp_path / "six")}, test_command="python3 -m pytest -rA")
    out = tmp_path / "out"
    run_batch(instances, out, settings, swe=swe, model_name="scripted/m")
    records = {
        r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())
    }
    assert records[IDS[0]]["resolved"] is True, records[IDS[0]]
    assert records[IDS[1]]["resolved"] is False, records[IDS[1]]

    # the official harness, on the batch's predictions, in the same images
    dataset = tmp_path / "dataset.json"
    harness_fields = {"log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}
    graded = [dict(i, image=name, eval_script=eval_script(i), **harness_fields)
              for i, name in zip(instances, images, strict=True)]  # fmt: skip
    dataset.write_text(json.dumps(graded))
    done = run_harness(harness, dataset, out / "preds.jsonl", conf, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "scripted__m.t.json").read_text())
    assert report["resolved_ids"] == [IDS[0]], done.stdout[-3000:]
    assert report["unresolved_ids"] == [IDS[1]] and report["error_ids"] == []
    logs = tmp_path / "logs" / "run_evaluation" / "t" / "scripted__m"
    tests = json.loads((logs / IDS[1] / "report.json").read_text())[IDS[1]]["tests_status"]
    assert tests["FAIL_TO_PASS"]["failure"] == ["test_six.py::test_int2byte"]
