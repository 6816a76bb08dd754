"""The package as users get it: a wheel that runs the demo from any folder, an sdist that
carries its own tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # see pyproject's markers

ROOT = Path(__file__).resolve().parents[1]


def build(kind: str, out: Path) -> Path:
    """Build the wheel or the sdist offline (no isolation: the dev extra brings setuptools)."""
    out.mkdir(parents=True, exist_ok=True)
    backend = f"from setuptools import build_meta; build_meta.build_{kind}({str(out)!r})"
    subprocess.run([sys.executable, "-c", backend], cwd=ROOT, check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    return next(out.glob("*.whl" if kind == "wheel" else "*.tar.gz"))


def test_the_installed_wheel_runs_the_demo_from_any_folder(tmp_path):
    wheel = build("wheel", tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target_site = next((venv / "lib").glob("python*/site-packages"))
    # the dependencies come from this environment; the package itself only from the wheel
    (target_site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
                    str(wheel)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}  # its session
    done = subprocess.run([str(venv / "bin" / "toy-agent"), "--demo", "--output", "json"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          env=state)  # fmt: skip
    result = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert result["outcome"] == "completed"
    assert result["files_changed"] == [{"path": "stats.py", "added": 1, "removed": 1}]
    assert "The demo ran on a copy in" in done.stderr
    assert list(elsewhere.iterdir()) == []  # nothing written where it was run
    # the report's templates ship as package data
    page = tmp_path / "demo.html"
    done = subprocess.run([str(venv / "bin" / "toy-agent"), "report",
                           str(ROOT / "toy_agent" / "demo" / "trajectory.json"), "-o", str(page)],
                          cwd=elsewhere, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Fix median() in stats.py" in page.read_text()


def test_the_version_is_written_once():
    from toy_agent import __version__

    out = subprocess.run([sys.executable, str(ROOT / "main.py"), "--version"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.stdout.strip() == f"toy-agent {__version__}"
    assert (
        "version ="
        not in (ROOT / "pyproject.toml").read_text().split("[project]")[1].split("\n[", 1)[0]
    )


def test_the_sdist_carries_its_tests_and_their_fixtures(tmp_path):
    sdist = build("sdist", tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("main.py", "tests/conftest.py", "tests/fakes.py", "tests/fake_providers.py",
                   "tests/mcp_servers/demo_server.py", "toy_agent/demo/trajectory.json",
                   "toy_agent/demo/repo/stats.py", "toy_agent/templates/report.html.j2",
                   "toy_agent/templates/report.js", "LICENSE", "pyproject.toml"):  # fmt: skip
        assert needed in names, needed
