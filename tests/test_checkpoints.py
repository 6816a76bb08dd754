"""Checkpoints: the work tree snapshotted into a private git store before each step that may
change files, so --undo, /undo and /rewind take back what commands changed too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import cli_environment, run_main, toy_agent
from fakes import folder, wait_until, write_replay, xml_action
from test_interactive import Tmux, terminal  # noqa: F401  (the fixture)
from test_sessions import sessions_dir

from toy_agent.checkpoints import MAX_SNAPSHOT_BYTES, CheckpointError, Checkpoints

REWRITE = (  # a formatter's work: three files rewritten, one made, one deleted, a mode changed
    f'{sys.executable} -c "import pathlib as p; '
    "[p.Path(n).write_bytes(b'rewritten\\n') for n in ('a.txt', 'b.bin', 'tool.sh')]; "
    "p.Path('made.txt').write_text('new'); p.Path('gone.txt').unlink()\" && chmod -x tool.sh"
)
ORIGINAL = {"a.txt": b"line one\r\nline two\r\n", "b.bin": b"caf\xe9\x00\xff\n",
            "tool.sh": b"#!/bin/sh\necho hi\n", "gone.txt": b"keep me\n"}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository with a commit, the files REWRITE changes, and a .gitattributes whose
    filter (defined in the repository's own .git/config) would leave a mark if it ever ran."""
    repo = folder(tmp_path / "project", {name: data for name, data in ORIGINAL.items()})
    (repo / "tool.sh").chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=mark text eol=lf\n")
    git(repo, "init", "-q")
    git(repo, "config", "filter.mark.clean", f"touch {tmp_path / 'filter-ran'}; cat")
    git(repo, "config", "core.hooksPath", str(tmp_path / "hooks"))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    (tmp_path / "filter-ran").unlink(missing_ok=True)  # the user's own git ran it; ours must not
    return repo


def git_state(repo: Path) -> tuple[str, bytes, str, str]:
    return (git(repo, "for-each-ref"), (repo / ".git" / "index").read_bytes(),
            git(repo, "count-objects", "-v"), git(repo, "status", "--porcelain"))  # fmt: skip


def command_run(capsys, repo: Path, tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "run.json", xml_action("run_command", command=REWRITE),
                          xml_action("task_complete", result="formatted"))  # fmt: skip
    result = run_main(capsys, "--task", "format", "--repo", str(repo), "--replay", str(replay),
                      "--allow-commands", "--sandbox", "off")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (repo / "a.txt").read_bytes() == b"rewritten\n" and not (repo / "gone.txt").exists()


def test_undo_restores_what_a_command_rewrote_byte_for_byte(home, project, tmp_path, capsys):
    before = git_state(project)
    (tmp_path / "filter-ran").unlink(missing_ok=True)  # git status runs the user's filter
    command_run(capsys, project, tmp_path)

    result = run_main(capsys, "--undo", "--repo", str(project))

    assert result.returncode == 0, result.stderr
    assert "a.txt" in result.stdout and "removed made.txt" in result.stdout
    for name, data in ORIGINAL.items():
        assert (project / name).read_bytes() == data, name
    assert os.stat(project / "tool.sh").st_mode & 0o111 == 0o111
    assert not (project / "made.txt").exists()
    assert not (tmp_path / "filter-ran").exists()  # no filter of the repository ran
    assert git_state(project) == before  # the user's refs, index, objects, status untouched
    [session] = sessions_dir(home).glob("*.json")
    assert json.loads(session.read_text())["runs"][0]["undone"] is True
    assert (sessions_dir(home) / "checkpoints" / session.stem / "objects").is_dir()


def test_undo_refuses_when_a_file_changed_after_the_run(home, project, tmp_path, capsys):
    command_run(capsys, project, tmp_path)
    (project / "b.bin").write_bytes(b"edited by hand\n")

    result = run_main(capsys, "--undo", "--repo", str(project))

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "changed since" in result.stderr and "b.bin" in result.stderr
    assert (project / "a.txt").read_bytes() == b"rewritten\n"  # nothing was reverted
    assert (project / "made.txt").exists()


def test_a_private_file_a_command_deleted_comes_back_no_wider_than_it_was(
    home, project, tmp_path, capsys
):
    """git keeps only 644 and 755: the snapshot keeps the other permission bits beside it. A
    snapshot from before they were kept brings a file back private (600)."""
    (project / "key.pem").write_text("secret\n")
    (project / "key.pem").chmod(0o600)
    (project / "run.sh").write_text("#!/bin/sh\n")
    (project / "run.sh").chmod(0o750)
    rm = xml_action("run_command", command="rm key.pem run.sh")
    replay = write_replay(tmp_path / "rm.json", rm, xml_action("task_complete", result="removed"))
    remove = ["--task", "rm", "--repo", str(project), "--replay", str(replay), "--allow-commands",
              "--sandbox", "off"]  # fmt: skip
    assert run_main(capsys, *remove).returncode == 0
    assert not (project / "key.pem").exists()

    assert run_main(capsys, "--undo", "--repo", str(project)).returncode == 0
    assert (project / "key.pem").read_text() == "secret\n"
    assert oct(os.stat(project / "key.pem").st_mode & 0o777) == oct(0o600)
    assert oct(os.stat(project / "run.sh").st_mode & 0o777) == oct(0o750)

    (project / "key.pem").chmod(0o644)
    assert run_main(capsys, *remove).returncode == 0
    session = max(sessions_dir(home).glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    data = json.loads(session.read_text())
    for snapshot in data["runs"][-1]["snapshots"]:
        del snapshot["extra"]  # as saved by an older toy-agent
    session.write_text(json.dumps(data))
    assert run_main(capsys, "--undo", "--repo", str(project)).returncode == 0
    assert oct(os.stat(project / "key.pem").st_mode & 0o777) == oct(0o600)
    assert oct(os.stat(project / "run.sh").st_mode & 0o777) == oct(0o700)


def test_undo_removes_only_the_folders_the_run_made(home, project, tmp_path, capsys):
    """Empty folders are in no git tree: the snapshot keeps them beside it, so a folder that
    was there (empty) before the run stays, and the folders the run made go."""
    (project / "existing" / "deeper").mkdir(parents=True)
    (project / "existing" / "empty").mkdir()
    command = "echo n > existing/deeper/new.txt && mkdir -p made/sub && echo m > made/sub/m.txt"
    replay = write_replay(tmp_path / "mk.json", xml_action("run_command", command=command),
                          xml_action("task_complete", result="made"))  # fmt: skip
    run = run_main(capsys, "--task", "mk", "--repo", str(project), "--replay", str(replay),
                   "--allow-commands", "--sandbox", "off")  # fmt: skip
    assert run.returncode == 0, run.stderr

    assert run_main(capsys, "--undo", "--repo", str(project)).returncode == 0
    assert not (project / "existing" / "deeper" / "new.txt").exists()
    assert (project / "existing" / "deeper").is_dir() and (project / "existing" / "empty").is_dir()
    assert not (project / "made").exists()


def test_deleting_a_session_deletes_its_snapshots(home, project, tmp_path, capsys):
    command_run(capsys, project, tmp_path)
    [session] = sessions_dir(home).glob("*.json")
    assert (sessions_dir(home) / "checkpoints" / session.stem).is_dir()

    assert run_main(capsys, "sessions", "delete", session.stem).returncode == 0
    assert not (sessions_dir(home) / "checkpoints" / session.stem).exists()


def test_ignored_files_are_kept_out_and_large_ones_make_a_restore_refuse(tmp_path):
    repo = folder(tmp_path / "r", {".gitignore": "build/\n", "build/out.o": "old", "x": "1"})
    store = Checkpoints(tmp_path / "store", repo)
    first = store.snapshot()
    (repo / "build" / "out.o").write_text("new")
    (repo / "x").write_text("2")
    second = store.snapshot()
    assert [c.path for c in store.changes(first, second)] == ["x"]  # the ignored file is not

    big = repo / "big.dat"
    with big.open("wb") as f:
        f.truncate(MAX_SNAPSHOT_BYTES + 1)
    third = store.snapshot()
    assert third.skipped == {"big.dat": [MAX_SNAPSHOT_BYTES + 1, big.stat().st_mtime_ns]}
    big.write_bytes(b"small now")
    fourth = store.snapshot()
    with pytest.raises(CheckpointError, match=r"no copy was kept of big.dat \(larger than 8 MB"):
        store.restore(third, fourth)
    assert big.read_bytes() == b"small now"
    store.restore(first, second)
    assert (repo / "x").read_text() == "1" and (repo / "build" / "out.o").read_text() == "new"


def test_a_folder_turned_into_a_link_makes_a_restore_stop(tmp_path):
    repo = folder(tmp_path / "r", {"src/a.py": "a"})
    outside = folder(tmp_path / "outside", {"a.py": "theirs"})
    store = Checkpoints(tmp_path / "store", repo)
    first = store.snapshot()
    (repo / "src" / "a.py").write_text("b")
    second = store.snapshot()
    (repo / "src" / "a.py").unlink()
    (repo / "src").rmdir()
    (repo / "src").symlink_to(outside)
    with pytest.raises(CheckpointError):
        store.restore(first, second)
    assert (outside / "a.py").read_text() == "theirs"


@pytest.mark.slow
def test_rewind_to_step_two_of_five_in_a_terminal(home, repo, tmp_path, terminal):  # noqa: F811
    steps = [
        xml_action("write_file", path="one.txt", content="1"),
        xml_action("run_command", command="echo 2 > two.txt"),
        xml_action("run_command", command="echo 3 > three.txt && rm hello.py"),
        xml_action("write_file", path="four.txt", content="4"),
        xml_action("task_complete", result="five steps done"),
        xml_action("task_complete", result="after the rewind"),
    ]
    replay = write_replay(tmp_path / "five.json", *steps)
    term = terminal(["--repo", str(repo), "--replay", str(replay), "--allow-commands",
                     "--sandbox", "off"], {})  # fmt: skip
    term.prompt()
    term.enter("make five steps")
    term.expect("five steps done")
    term.prompt()
    assert {p.name for p in repo.iterdir()} == {"one.txt", "two.txt", "three.txt", "four.txt"}

    term.enter("/rewind")
    screen = term.expect("rewind to which step? 1-5")
    assert "2. task 'make five steps' step 2: run_command" in screen
    term.enter("2")
    term.expect("rewound to step 2")
    term.prompt()
    assert {p.name for p in repo.iterdir()} == {"hello.py", "one.txt", "two.txt"}
    assert (repo / "hello.py").read_text() == "print('helo')\n"

    term.enter("go on")
    term.expect("after the rewind")
    assert term.end() == 0
    [session] = [json.loads(p.read_text()) for p in sessions_dir(home).glob("*.json")]
    texts = [m["content"] for m in session["messages"]]
    assert not any("three.txt" in t for t in texts)  # step 3 left the conversation too
    assert any("two.txt" in t for t in texts)
    assert [r["task"] for r in session["runs"]] == ["make five steps", "go on"]


def test_without_git_undo_still_reverts_what_the_file_tools_changed(home, repo, tmp_path, capsys):
    no_git = {"PATH": str(folder(tmp_path / "bin", {}))}
    replay = write_replay(tmp_path / "r.json", xml_action("write_file", path="hello.py",
                                                          content="print('hello')\n"),
                          xml_action("task_complete", result="ok"))  # fmt: skip
    run = run_main(capsys, "--task", "fix", "--repo", str(repo), "--replay", str(replay),
                   env=no_git)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert not (sessions_dir(home) / "checkpoints").exists()

    assert run_main(capsys, "--undo", "--repo", str(repo), env=no_git).returncode == 0
    assert (repo / "hello.py").read_text() == "print('helo')\n"


@pytest.mark.parametrize("edit", ["snapshots", "undo data"])
def test_a_hand_edited_session_or_undo_file_is_one_line_naming_the_field(
    edit, home, repo, tmp_path, capsys
):
    replay = write_replay(tmp_path / "r.json", xml_action("write_file", path="hello.py",
                                                          content="print('hello')\n"),
                          xml_action("task_complete", result="ok"))  # fmt: skip
    no_git = {"PATH": str(folder(tmp_path / "bin", {}))} if edit == "undo data" else {}
    run = run_main(capsys, "--task", "fix", "--repo", str(repo), "--replay", str(replay),
                   env=no_git)  # fmt: skip
    assert run.returncode == 0, run.stderr
    [session] = sessions_dir(home).glob("*.json")
    if edit == "snapshots":
        data = json.loads(session.read_text())
        first, last = data["runs"][0]["snapshots"]
        data["runs"][0]["snapshots"] = {"a": first, "b": last}
        session.write_text(json.dumps(data))
        wanted = f"session {session}: runs[0].snapshots: expected a list"
    else:
        undo = sessions_dir(home) / "undo" / session.name
        data = json.loads(undo.read_text())
        del data["runs"]["0"][0]["after_sha256"]
        undo.write_text(json.dumps(data))
        wanted = f"undo data {undo}: runs.0[0].after_sha256: missing"

    result = run_main(capsys, "--undo", "--repo", str(repo), env=no_git)

    assert result.returncode == 2
    err = result.stderr.strip()
    assert err.splitlines() == [err] and wanted in err and "Traceback" not in err
    assert (repo / "hello.py").read_text() == "print('hello')\n"


def test_old_sessions_are_pruned_with_their_snapshots(home, project, tmp_path, capsys):
    command_run(capsys, project, tmp_path)
    [old] = sessions_dir(home).glob("*.json")
    snapshots = sessions_dir(home) / "checkpoints" / old.stem
    assert snapshots.is_dir()
    for path in (old, snapshots):
        os.utime(path, (1, 1))

    replay = write_replay(tmp_path / "next.json", xml_action("task_complete", result="ok"))
    # its first save prunes what is 30 days old
    run = run_main(capsys, "--task", "next", "--repo", str(project), "--replay", str(replay),
                   "--sessions-keep", "0")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert not old.exists() and not snapshots.exists()


def test_a_new_session_starts_from_the_last_store_and_still_sees_every_change(
    home, project, tmp_path, capsys
):
    command_run(capsys, project, tmp_path)
    (project / "gone.txt").write_bytes(ORIGINAL["gone.txt"])  # by hand, between the runs
    (project / "a.txt").write_bytes(b"by hand\n")
    command_run(capsys, project, tmp_path)  # a new session: rewrites a.txt, deletes gone.txt
    stores = sorted((sessions_dir(home) / "checkpoints").iterdir())
    assert len(stores) == 2 and all((s / "toy-agent-repo").read_text() == str(project)
                                    for s in stores)  # fmt: skip

    assert run_main(capsys, "--undo", "--repo", str(project)).returncode == 0
    assert (project / "a.txt").read_bytes() == b"by hand\n"
    assert (project / "gone.txt").read_bytes() == ORIGINAL["gone.txt"]


@pytest.mark.slow
def test_undo_takes_back_a_run_killed_in_its_first_step_not_the_one_before(
    home, project, tmp_path, capsys
):
    """kill -9 while the first command of a run still runs: the run is saved before it, so
    --undo puts back what that run changed so far, and the finished run before it stays."""
    first = write_replay(tmp_path / "first.json",
                         xml_action("write_file", path="made.txt", content="by the first\n"),
                         xml_action("task_complete", result="made"))  # fmt: skip
    assert run_main(capsys, "--task", "one", "--repo", str(project), "--replay",
                    str(first)).returncode == 0  # fmt: skip
    second = write_replay(
        tmp_path / "second.json",
        xml_action("run_command", command="echo changed > a.txt; sleep 60"),
    )
    killed = subprocess.Popen(
        toy_agent("--task", "two", "-c", "--repo", str(project), "--replay", str(second),
                  "--allow-commands", "--sandbox", "off", "-q"),
        env=cli_environment({"HOME": os.environ["HOME"]}), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: (project / "a.txt").read_bytes() == b"changed\n", "the command ran")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(30)

    result = run_main(capsys, "--undo", "--repo", str(project))
    assert result.returncode == 0, result.stderr
    assert "'two'" in result.stdout
    assert (project / "a.txt").read_bytes() == ORIGINAL["a.txt"]
    assert (project / "made.txt").read_text() == "by the first\n"
