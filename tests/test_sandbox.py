"""run_command's sandbox and process lifetime, with real bubblewrap and real processes.

Each escape is tried for real: a write outside the repository, a read of a marker in HOME, a
connection to a port on the host's loopback, a secret in the environment, and processes made
with `setsid` and `nohup` that should not outlive the command, its timeout, Ctrl-C, SIGTERM,
SIGHUP or the agent's exit. Processes are found by unique `sleep N` markers in /proc.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import run_main
from fakes import run_in_pty, write, write_replay, xml_action

from toy_agent.cli import main
from toy_agent.sandbox import (
    SCRATCH_HOME,
    SandboxUnavailable,
    bwrap_problem,
    owned_process_group,
    resolve_sandbox,
    sandbox_policy,
)
from toy_agent.tools import CodeRepositoryTools, ToolError

ROOT = Path(__file__).resolve().parents[1]
BWRAP_PROBLEM = bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
SECRET_NAMES = ("OPENAI_API_KEY", "MY_SERVICE_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY",
                "GIT_CREDENTIALS", "STRIPE_KEY", "LD_LIBRARY_PATH")  # fmt: skip
SECRETS = {name: f"/nonexistent/value-of-{name.lower()}" for name in SECRET_NAMES}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


@pytest.fixture
def sandboxed(repo: Path) -> CodeRepositoryTools:
    return CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with the few programs the tests run, and no bwrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("env", "sleep", "nohup", "cat", "git"):
        (bin_dir / name).symlink_to(shutil.which(name) or f"/usr/bin/{name}")
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def marker() -> str:
    """A `sleep` duration no other process uses (other test runs may share the machine)."""
    return str(random.randint(10**6, 10**7))


def running(duration: str) -> bool:
    """Whether a `sleep <duration>` is alive anywhere (zombies have an empty cmdline)."""
    wanted = b"sleep\0" + duration.encode() + b"\0"
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().endswith(wanted):
                return True
        except OSError:
            continue
    return False


def marked(*durations: str) -> list[str]:
    """The command lines of live processes that name one of the `sleep` markers."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            words = cmdline.read_bytes().decode(errors="replace").replace("\0", " ")
            if any(d in words for d in durations):
                found.append(f"{cmdline.parent.name}: {words.strip()}")
    return found


def kill_marked(*durations: str) -> None:
    for line in marked(*durations):
        with contextlib.suppress(OSError):
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ----------------------------------------------------------------------------- choosing it
def test_the_policy_mounts_parents_first_and_hides_home_and_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = home / "work" / "repo"
    repo.mkdir(parents=True)
    argv = " ".join(sandbox_policy(repo, homes=[home]).argv())
    # tmp_path is under /tmp: /tmp's tmpfs, then the home's inside it, then the repository.
    assert argv.index("--tmpfs /tmp ") < argv.index(f"--tmpfs {home} ") < argv.index("--bind")
    assert f"--bind {repo} {repo}" in argv and f"--remount-ro {home} " in argv
    assert "--tmpfs /run " in argv and "--remount-ro /run " in argv
    assert "--unshare-all" in argv and "--share-net" not in argv and "--die-with-parent" in argv
    assert argv.endswith(f"--chdir {repo} --")

    with_network = sandbox_policy(repo, network=True, homes=[home]).argv()
    assert "--share-net" in with_network and "/run" not in with_network


def test_bwrap_mode_without_bwrap_raises_with_the_install_hint(no_bwrap: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        resolve_sandbox("bwrap")
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        CodeRepositoryTools(".", allow_commands=True, sandbox="bwrap")
    with pytest.raises(ValueError, match="auto, bwrap, off"):
        CodeRepositoryTools(".", sandbox="firejail")


def test_auto_without_bwrap_warns_and_still_scrubs_the_environment(
    no_bwrap: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="auto")
    assert tools.sandbox == "off"
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "NOT sandboxed" in caplog.text and "bubblewrap" in caplog.text

    out = tools.run_command("env")
    assert not [name for name in SECRETS if f"{name}=" in out]
    assert "PATH=" in out and "TERM=dumb" in out and "PAGER=cat" in out


def test_cli_sandbox_bwrap_without_bwrap_exits_2_with_the_hint(
    no_bwrap: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--list-tools", "--repo", str(repo), "--allow-commands", "--sandbox", "bwrap"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--sandbox bwrap" in err and "install bubblewrap" in err


def test_auto_without_a_working_sandbox_asks_and_no_answer_refuses_the_command(
    no_bwrap: Path, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sandbox auto where bubblewrap is missing (a PATH without it): commands ask as in
    edits mode, and with stdin at its end no one answers, so nothing runs."""
    replay = write_replay(tmp_path / "r.json", xml_action("run_command", command="echo x > ran"),
                          xml_action("task_complete", result="done"))  # fmt: skip
    trajectory = tmp_path / "t.json"
    done = run_main(capsys, "--task", "look", "--repo", str(repo), "--replay", str(replay),
                    "--allow-commands", "--trajectory", str(trajectory), stdin="")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (repo / "ran").exists()
    observation = json.loads(trajectory.read_text())["steps"][0]["observations"][0]["content"]
    assert "needs the user's approval (auto mode with no sandbox for commands)" in observation
    assert done.stderr.count("NOT sandboxed") == 1 and "each command asks first" in done.stderr
    assert "bubblewrap" in done.stderr and "--sandbox off" in done.stderr
    assert "sandbox: off · commands: NOT sandboxed (no working bubblewrap" in done.stdout
    assert "tool errors: 1 (1 refused)" in done.stdout


def test_auto_without_a_working_sandbox_runs_what_the_user_approves_without_secrets(
    no_bwrap: Path, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = write_replay(tmp_path / "r.json", xml_action("run_command", command="env"),
                          xml_action("run_command", command="env > env.txt"),
                          xml_action("task_complete", result="done"))  # fmt: skip
    trajectory = tmp_path / "t.json"
    done = run_main(capsys, "--task", "look", "--repo", str(repo), "--replay", str(replay),
                    "--allow-commands", "--trajectory", str(trajectory),
                    stdin="y\nn, not that\n", env=SECRETS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    steps = json.loads(trajectory.read_text())["steps"]
    approved = steps[0]["observations"][0]["content"]
    assert "TERM=dumb" in approved and not [name for name in SECRETS if f"{name}=" in approved]
    assert not (repo / "env.txt").exists()  # the second was declined
    assert "not that" in steps[1]["observations"][0]["content"]
    assert "1 declined by you" in done.stdout


def test_sandbox_off_chosen_by_the_user_runs_commands_without_asking(
    no_bwrap: Path, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = write_replay(tmp_path / "r.json", xml_action("run_command", command="echo x > ran"),
                          xml_action("task_complete", result="done"))  # fmt: skip
    done = run_main(capsys, "--task", "look", "--repo", str(repo), "--replay", str(replay),
                    "--allow-commands", "--sandbox", "off", stdin="")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (repo / "ran").exists()
    assert "NOT sandboxed" not in done.stderr  # the user's own choice: no warning
    assert "sandbox: off · commands: NOT sandboxed (--sandbox off)" in done.stdout


@pytest.mark.slow
def test_the_banner_on_a_terminal_says_commands_are_not_sandboxed(
    no_bwrap: Path, repo: Path, tmp_path: Path
) -> None:
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    screen = run_in_pty([sys.executable, str(ROOT / "main.py"), "--task", "x", "--repo",
                         str(repo), "--replay", str(replay), "--allow-commands"],
                        {"PATH": str(no_bwrap)})  # fmt: skip
    banner = next(line for line in screen.splitlines() if line.startswith("toy-agent · "))
    assert "commands: NOT sandboxed, each asks" in banner, screen
    summary = " ".join(screen.split())  # the terminal wraps it
    assert "commands: NOT sandboxed (no working bubblewrap, so each asks first)" in summary


@pytest.mark.slow
def test_a_batch_without_a_working_sandbox_refuses_commands(
    no_bwrap: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch never asks: where auto finds no sandbox, its tasks' commands are refused."""
    source = tmp_path / "source"
    write(source, "a.txt", "a\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "one", "repo": str(source), "task": "touch it"}) + "\n")
    replay = write_replay(tmp_path / "r.json", xml_action("run_command", command="echo x > ran"),
                          xml_action("task_complete", result="done"))  # fmt: skip
    out = tmp_path / "out"
    done = run_main(capsys, "--tasks-file", str(tasks), "--out", str(out), "--replay",
                    str(replay), "--allow-commands")  # fmt: skip
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert done.returncode == 0, (done.stderr, record["error"])
    assert record["outcome"] == "completed" and record["files_changed"] == [], record
    assert done.stderr.count("NOT sandboxed") == 1


@needs_bwrap
def test_list_tools_and_the_summary_name_the_sandbox(repo: Path, tmp_path: Path, capsys) -> None:
    assert main(["--list-tools", "--repo", str(repo), "--allow-commands"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("sandbox: bwrap (hides ")
    assert main(["--list-tools", "--repo", str(repo), "--sandbox", "off"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "sandbox: off"

    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    assert main(["--task", "x", "--repo", str(repo), "--replay", str(replay),
                 "--allow-commands", "--output", "json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["sandbox"] == "bwrap"


# ----------------------------------------------------------------------------- what it blocks
@needs_bwrap
def test_writes_outside_the_repo_fail_read_only_and_the_model_is_told_once(
    sandboxed: CodeRepositoryTools, repo: Path
) -> None:
    outside = Path(tempfile.mkdtemp(prefix="toy-agent-outside-", dir="/var/tmp"))
    try:
        out = sandboxed.run_command(f"echo x > {outside}/escaped; echo y > inside.txt")
        assert "Read-only file system" in out
        assert "[Note: commands run in a bubblewrap sandbox" in out
        assert not (outside / "escaped").exists()
        assert (repo / "inside.txt").read_text() == "y\n"

        again = sandboxed.run_command(f"touch {outside}/again")
        assert "Read-only file system" in again and "[Note:" not in again
        assert not (outside / "again").exists()
    finally:
        shutil.rmtree(outside)


@needs_bwrap
def test_tmp_is_private(sandboxed: CodeRepositoryTools) -> None:
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="toy-agent-host-") as host_file:
        name = f"toy-agent-{marker()}"
        out = sandboxed.run_command(
            f"cat {host_file.name}; echo hi > /tmp/{name} && cat /tmp/{name}"
        )
    assert "No such file or directory" in out and out.rstrip().endswith("hi")
    assert not Path("/tmp", name).exists()


@needs_bwrap
def test_home_is_hidden_but_a_repo_inside_it_stays_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("MARKER-PRIVATE-KEY\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("MARKER-AWS\n")
    repo = home / "src" / "project"
    repo.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")

    out = tools.run_command(
        f"cat ~/.ssh/id_rsa {home}/.ssh/id_rsa {home}/.aws/credentials; ls -A {home}; "
        f'echo "home=$HOME"; echo made > made.txt; touch {home}/planted; echo scratch > ~/s'
    )
    assert "MARKER" not in out
    assert f"home={SCRATCH_HOME}" in out and "Read-only file system" in out
    assert (repo / "made.txt").read_text() == "made\n"
    assert not (home / "planted").exists() and not (home / "s").exists()


@needs_bwrap
def test_no_network_not_even_the_hosts_loopback(repo: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    command = f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED-$((6*7))'"
    try:
        closed = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")
        assert "CONNECTED-42" not in closed.run_command(command, timeout=10)
        opened = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap",
                                     sandbox_network=True)  # fmt: skip
        assert "CONNECTED-42" in opened.run_command(command, timeout=10)
    finally:
        server.close()


@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=needs_bwrap), "off"])
def test_the_command_environment_holds_no_secret(
    sandbox: str, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox=sandbox)
    out = tools.run_command("env; echo ---; env | base64 -w0")
    listing, encoded = out.split("\n", 2)[2].split("\n---\n")
    env = dict(line.split("=", 1) for line in listing.splitlines() if "=" in line)
    unsafe = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
    assert not [name for name in env if name.startswith("LD_") or any(u in name for u in unsafe)]
    decoded = base64.b64decode(encoded.strip()).decode()  # what an encoding trick would leak
    assert not [value for value in SECRETS.values() if value in decoded]
    assert env["LANG"] == "C.UTF-8" and env["TERM"] == "dumb" and env["PAGER"] == "cat"
    assert env["PATH"]


# ----------------------------------------------------------------------------- no survivors
@needs_bwrap
def test_setsid_and_nohup_children_die_with_the_command(sandboxed: CodeRepositoryTools) -> None:
    a, b = marker(), marker()
    out = sandboxed.run_command(
        f"setsid sleep {a} >/dev/null 2>&1 & nohup sleep {b} >/dev/null 2>&1 & "
        f"(sleep {a} &) ; sleep 0.2; echo started"
    )
    assert "started" in out
    assert wait_until(lambda: not running(a) and not running(b), 5)


@pytest.mark.slow
@needs_bwrap
def test_setsid_and_nohup_children_die_on_timeout(sandboxed: CodeRepositoryTools) -> None:
    a, b = marker(), marker()
    with pytest.raises(ToolError, match="timed out after 1s"):
        sandboxed.run_command(f"setsid sleep {a} & nohup sleep {b} & sleep 60", timeout=1)
    assert wait_until(lambda: not running(a) and not running(b), 5)


@pytest.mark.slow
def test_unsandboxed_the_group_dies_with_the_command_and_on_timeout(repo: Path) -> None:
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="off")
    a, b = marker(), marker()
    tools.run_command(f"nohup sleep {a} >/dev/null 2>&1 & echo started")
    assert wait_until(lambda: not running(a), 5)
    with pytest.raises(ToolError, match="timed out"):
        tools.run_command(f"nohup sleep {b} >/dev/null 2>&1 & sleep 60", timeout=1)
    assert wait_until(lambda: not running(b), 5)


SANDBOXED_SIGNALS = [
    pytest.param("bwrap", signal.SIGINT, 130, marks=needs_bwrap, id="bwrap-ctrl-c"),
    pytest.param("bwrap", signal.SIGTERM, 143, marks=needs_bwrap, id="bwrap-sigterm"),
    pytest.param("bwrap", signal.SIGHUP, 129, marks=needs_bwrap, id="bwrap-sighup"),
    pytest.param("off", signal.SIGINT, 130, id="off-ctrl-c"),
    pytest.param("off", signal.SIGTERM, 143, id="off-sigterm"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("sandbox", "signum", "exit_code"), SANDBOXED_SIGNALS)
def test_stopping_the_agent_kills_every_process_of_the_command(
    sandbox: str, signum: int, exit_code: int, repo: Path, tmp_path: Path
) -> None:
    a, b, c = marker(), marker(), marker()
    command = f"setsid sleep {a} >/dev/null 2>&1 & nohup sleep {b} >/dev/null 2>&1 & sleep {c}"
    replay = write_replay(tmp_path / "r.json", xml_action("run_command", command=command))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "main.py"), "--task", "run", "--repo", str(repo),
         "--replay", str(replay), "--allow-commands", "--sandbox", sandbox],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    try:
        started = wait_until(lambda: running(a) and running(b) and running(c), 30)
        assert started, "the command's three sleeps did not all start within 30 s"
        proc.send_signal(signum)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the agent did not exit within 30 s of {signal.Signals(signum).name}")
        assert proc.returncode == exit_code, f"the agent exited {proc.returncode}: {err}"
        assert "cancelled" in out and f"sandbox: {sandbox}" in out, out
        gone = wait_until(lambda: not (running(a) or running(b) or running(c)), 5)
        assert gone, f"processes survived the agent: {marked(a, b, c)}"
    finally:
        proc.kill()
        kill_marked(a, b, c)  # whatever happened, the suite leaves nothing running


@pytest.mark.slow
def test_a_ctrl_c_right_after_the_fork_still_kills_the_command(repo: Path) -> None:
    """Ctrl-C landing inside Popen, after the fork but before the command is registered to be
    killed: the KeyboardInterrupt comes once it is registered, and the command dies."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    duration = marker()

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sleep", duration], start_new_session=True)
        assert wait_until(lambda: running(duration), 10)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, now: its handler runs at once
        time.sleep(0.05)
        return proc

    try:
        with pytest.raises(KeyboardInterrupt), owned_process_group(start):
            pytest.fail("the held Ctrl-C should have interrupted before the block")
        assert wait_until(lambda: not running(duration), 5), marked(duration)
    finally:
        kill_marked(duration)


@pytest.mark.slow
def test_unsandboxed_a_setsid_child_dies_with_the_command(repo: Path) -> None:
    """Without the sandbox's PID namespace, a child that left the command's process group
    (`setsid`) is found below the command in /proc and killed with it."""
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="off")
    a, b = marker(), marker()
    try:
        out = tools.run_command(f"setsid sleep {a} >/dev/null 2>&1 & (setsid sleep {b} "
                                ">/dev/null 2>&1 &); sleep 0.2; echo started")  # fmt: skip
        assert "started" in out
        assert wait_until(lambda: not running(a) and not running(b), 5), marked(a, b)
    finally:
        kill_marked(a, b)


@pytest.mark.slow
def test_a_command_still_running_when_the_agent_exits_is_killed(repo: Path) -> None:
    a, b = marker(), marker()
    script = textwrap.dedent(f"""
        import threading, time
        from pathlib import Path
        from toy_agent.tools import CodeRepositoryTools
        tools = CodeRepositoryTools({str(repo)!r}, allow_commands=True, sandbox="off")
        command = "nohup sleep {a} >/dev/null 2>&1 & touch started; sleep {b}"
        threading.Thread(target=tools.run_command, args=(command, 600), daemon=True).start()
        deadline = time.monotonic() + 30
        while not Path({str(repo / "started")!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("exiting with the command still running")
    """)  # the daemon thread is still waiting for the command when the interpreter exits
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr
    assert wait_until(lambda: not running(a) and not running(b), 30)


@needs_bwrap
def test_git_works_read_only_in_a_worktree_whose_history_is_hidden(tmp_path):
    """A batch copy is a git worktree: its history lives in the source repository, here under
    /tmp, which the sandbox hides. git reads it; nothing can write the source."""
    source, copy = tmp_path / "source", tmp_path / "copy"
    source.mkdir()
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=source, check=True)
    (source / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], cwd=source, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=source, check=True)
    subprocess.run([*git, "worktree", "add", "-q", "--detach", str(copy)], cwd=source, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    tools = CodeRepositoryTools(copy, allow_commands=True, sandbox="bwrap")
    out = tools.run_command("git log --format=%H; echo b >> a.txt; git commit -qam second")
    assert head in out and "Read-only file system" in out
    after = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True,
                           text=True, check=True).stdout.strip()  # fmt: skip
    assert after == head
