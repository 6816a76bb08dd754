"""What a command can do to the machine and to the agent's own process, tried for real as root
(CI runs as root) and as an unprivileged user (nobody, through setpriv) in the same suite.

Sandboxed, a command holds no capability whoever started toy_agent: `umount` of the tmpfs that
hides the home, a bind mount, a remount of / read-write and a write outside the repository all
fail, and /proc/self/status shows every capability set empty. Unsandboxed, a command cannot read
the provider key out of the agent's /proc entries (as root, what still holds: the environment
block is blanked; its memory root could read, as docs/safety.md says).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import write_replay, xml_action
from sandbox_helpers import NOBODY, ROOT, nobody_folder, run_unprivileged

from toy_agent.sandbox import UNPRIVILEGED_ID, _probe, bwrap_problem, privilege_options

pytestmark = pytest.mark.slow

BWRAP_PROBLEM = bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
USERS = ["this-user", "nobody"]
CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
KEY = "sk-proj-" + "Zq7" * 16  # a provider key the agent holds in its environment


def place(base: Path, uid: int) -> tuple[Path, Path, Path]:
    """(home, repository, outside) for a run by `uid`: a home holding a credential, a
    repository with a file, and a folder outside both that `uid` may write on the host (in
    /var/tmp: /tmp is private inside the sandbox, so a write there proves nothing)."""
    home, repo = base / "home", base / "repo"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("MARKER-AWS\n")
    repo.mkdir()
    (repo / "existing.txt").write_text("before\n")
    outside = Path(tempfile.mkdtemp(prefix="toy-agent-outside-", dir="/var/tmp"))
    for path in (base, home, home / ".aws", home / ".aws" / "credentials", repo,
                 repo / "existing.txt", outside):  # fmt: skip
        os.chown(path, uid, uid)
    return home, repo, outside


@pytest.fixture(params=USERS)
def user(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Who runs the agent, and a folder that user owns."""
    if request.param == "this-user":
        yield request.param, tmp_path
        return
    with nobody_folder() as folder:
        yield request.param, folder


def run_as(user: str, code: str, *args: str, cwd: Path, env: dict[str, str]) -> str:
    """`code` run by a Python of its own as `user`; its stdout (it must succeed)."""
    if user == "nobody":
        done = run_unprivileged(code, *args, cwd=cwd, env=env)
    else:
        paths = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
                       "PYTHONPATH": paths, **env}  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=environment,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


# ----------------------------------------------------------------------------- sandboxed
RUN_ONE_COMMAND = """
import json, os, sys
from toy_agent.tools import CodeRepositoryTools
repo, command = sys.argv[1:]
tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")
print(json.dumps({"uid": os.getuid(), "output": tools.run_command(command, timeout=60)}))
"""


def attack(home: Path, outside: Path) -> str:
    """What a prompt-injected model would try with root's capabilities, each success printed."""
    return "\n".join([
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status",
        'echo "uid=$(id -u)"',
        f"umount {home} && echo UNMOUNTED; cat {home}/.aws/credentials",
        "mkdir -p m && mount --bind / m && echo BOUND",
        "mount -t tmpfs none m && echo MOUNTED",
        "mount -o remount,bind,rw / && echo REMOUNTED",
        f"touch {outside}/escaped && echo WROTE-OUTSIDE",
        "unshare -Ur true && echo NESTED-NAMESPACE",
        "echo after >> existing.txt && echo made > made.txt && echo WROTE-INSIDE",
    ])  # fmt: skip


@needs_bwrap
def test_a_sandboxed_command_holds_no_capability_whoever_runs_the_agent(
    user: tuple[str, Path],
) -> None:
    who, base = user
    uid = NOBODY if who == "nobody" else os.getuid()
    home, repo, outside = place(base, uid)
    try:
        out = run_as(who, RUN_ONE_COMMAND, str(repo), attack(home, outside), cwd=base,
                     env={"HOME": str(home)})  # fmt: skip
        result = json.loads(out)
        assert result["uid"] == uid
        output = result["output"].split("\n[exit code ", 1)[1]  # what it printed, not the line
        sets = dict(line.split(":\t") for line in output.splitlines() if line.startswith("Cap"))
        assert sets == dict.fromkeys(CAPABILITY_SETS, "0000000000000000"), output
        # As root the command runs as nobody inside; anyone else stays who they are.
        inside = UNPRIVILEGED_ID if uid == 0 else uid
        assert f"uid={inside}" in output
        for success in ("UNMOUNTED", "MARKER-AWS", "BOUND", "MOUNTED", "REMOUNTED",
                        "WROTE-OUTSIDE"):  # fmt: skip
            assert success not in output, output
        if "--disable-userns" in privilege_options(shutil.which("bwrap") or "bwrap"):
            assert "NESTED-NAMESPACE" not in output
        assert not (outside / "escaped").exists()
        # The repository stays writable, and what the command writes is the user's.
        assert "WROTE-INSIDE" in output
        assert (repo / "existing.txt").read_text() == "before\nafter\n"
        assert (repo / "made.txt").stat().st_uid == uid
        assert (repo / "existing.txt").stat().st_uid == uid
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@needs_bwrap
def test_the_policy_and_the_probe_drop_the_same_privileges(tmp_path: Path) -> None:
    from toy_agent.sandbox import sandbox_policy

    bwrap = shutil.which("bwrap") or "bwrap"
    options = privilege_options(bwrap)
    argv = sandbox_policy(tmp_path).argv()
    assert " ".join(options) in " ".join(argv)
    assert "--unshare-user" in options and options[-2:] == ("--cap-drop", "ALL")
    ids = ("--uid", str(UNPRIVILEGED_ID), "--gid", str(UNPRIVILEGED_ID))
    assert (" ".join(ids) in " ".join(options)) == (os.geteuid() == 0)


def test_a_bwrap_that_leaves_capabilities_is_no_sandbox(tmp_path: Path) -> None:
    """The probe checks from inside: a `bwrap` (first on the user's PATH) that runs the
    command as root with its capabilities is refused, with the capabilities it left."""
    if os.geteuid() != 0:
        pytest.skip("only a root command holds capabilities to leave")
    fake = tmp_path / "bwrap"
    fake.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n'
    )
    fake.chmod(0o755)
    problem = _probe(str(fake))
    assert problem is not None and "leaves the command capabilities" in problem
    assert "CapInh" in problem or "CapPrm" in problem


# ----------------------------------------------------------------------------- unsandboxed
RUN_THE_CLI = "from toy_agent.cli import main; raise SystemExit(main())"
READ_THE_AGENT = (
    "cat /proc/$PPID/environ > environ.out 2> environ.err; "
    "head -c 64 /proc/$PPID/mem > mem.out 2> mem.err; "
    "cat /proc/$PPID/maps > maps.out 2> maps.err; echo done"
)


def test_an_unsandboxed_command_cannot_read_the_key_from_the_agents_process(
    user: tuple[str, Path],
) -> None:
    """`--sandbox off`: the command is the agent's child, same user. The agent is
    non-dumpable, so a same-user command reads none of /proc/PPID/environ, mem or maps; root
    (CAP_SYS_PTRACE) can, and finds the key's value blanked in the environment block."""
    who, base = user
    uid = NOBODY if who == "nobody" else os.getuid()
    repo = base / "repo"
    repo.mkdir()
    replay = write_replay(base / "r.json", xml_action("run_command", command=READ_THE_AGENT),
                          xml_action("task_complete", result="done"))  # fmt: skip
    for path in (repo, replay):
        os.chown(path, uid, uid)
    env = {"HOME": str(base), "OPENAI_API_KEY": KEY, "LC_TELEPHONE": "in-the-block",
           "DATABASE_URL": "postgres://app:db-password-in-the-block@db/app"}  # fmt: skip
    run_as(who, RUN_THE_CLI, "--task", "read", "--repo", str(repo), "--replay", str(replay),
           "--allow-commands", "--sandbox", "off", "--output", "json", cwd=base,
           env=env)  # fmt: skip
    read = {name: (repo / name).read_bytes() for name in
            ("environ.out", "environ.err", "mem.out", "maps.out", "maps.err")}  # fmt: skip
    assert not [name for name, data in read.items() if KEY.encode() in data]
    if uid == 0:  # what holds as root: the block is readable, the key in it blanked
        assert b"LC_TELEPHONE=in-the-block" in read["environ.out"]  # commands get it
        assert b"OPENAI_API_KEY=" + b"*" * len(KEY) in read["environ.out"]
        assert b"db-password-in-the-block" not in read["environ.out"]  # commands do not
    else:
        assert read["environ.out"] == b"" and b"Permission denied" in read["environ.err"]
        assert read["maps.out"] == b"" and b"Permission denied" in read["maps.err"]
        assert b"Permission denied" in (repo / "mem.err").read_bytes()
