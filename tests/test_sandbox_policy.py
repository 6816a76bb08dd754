"""What the sandbox exposes, staged for real: a repository (or a command) that names a folder
in a `.git` file, a command that plants git hooks and config for the user's next `git
commit`, and a user whose tools live in their home folder next to their keys.

Every test runs real bubblewrap and real git; each home folder is a temporary one, with
marker files standing for `~/.ssh/id_rsa` and friends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import ScriptedLlm, xml_action

from toy_agent.cli import main
from toy_agent.sandbox import bwrap_problem, sandbox_policy
from toy_agent.tools import CodeRepositoryTools

BWRAP_PROBLEM = bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
pytestmark = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder with secrets in it, as HOME; the real one stays the passwd home."""
    home = tmp_path / "home"
    for secret in (".ssh/id_rsa", ".aws/credentials", ".config/gh/hosts.yml", ".netrc",
                   ".bash_history"):  # fmt: skip
        path = home / secret
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"MARKER-SECRET {secret}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # no tools of the real home
    for name in ("PYENV_ROOT", "RUSTUP_HOME", "CARGO_HOME", "NVM_DIR", "VIRTUAL_ENV"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def repo(home: Path) -> Path:
    repo = home / "src" / "project"
    repo.mkdir(parents=True)
    (repo / "app.py").write_text("print('hi')\n")
    return repo


def bound(argv: list[str]) -> set[str]:
    """The folders and files a bwrap command line binds in (besides / and /dev/null)."""
    pairs = zip(argv, argv[1:], strict=False)
    return {src for flag, src in pairs if flag in ("--bind", "--ro-bind") and src != "/"} - {
        "/dev/null"
    }


def sandboxed(repo: Path, **options: object) -> CodeRepositoryTools:
    return CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap", **options)  # type: ignore[arg-type]


# ------------------------------------------------------------ a .git file chooses no mount
@pytest.mark.parametrize("gitdir", ["home", "run"])
def test_a_git_file_shipped_in_the_repository_mounts_nothing(repo: Path, home: Path, gitdir):
    """A plain folder (a tarball, a copy) can hold a `.git` file naming any folder; before,
    the sandbox bound that folder over the tmpfs that hides it."""
    target = home if gitdir == "home" else Path("/run")
    (repo / ".git").write_text(f"gitdir: {target}\n")
    out = sandboxed(repo).run_command(f"cat {home}/.ssh/id_rsa; ls /run | head -3; echo END")
    assert "MARKER-SECRET" not in out
    assert "\nEND\n" in out
    assert bound(sandbox_policy(repo).argv()) == {str(repo), str(repo / ".git")}


def test_a_git_file_written_by_a_command_mounts_nothing_for_the_next(repo: Path, home: Path):
    tools = sandboxed(repo)
    # The attack is written, and removed after the command (see test_sandbox_git.py)...
    assert "removed .git" in tools.run_command(f"printf 'gitdir: {home}\\n' > .git")
    (repo / ".git").write_text(f"gitdir: {home}\n")  # ...so write it here, as if it stayed
    out = tools.run_command(f"cat {home}/.ssh/id_rsa {home}/.aws/credentials")
    assert "MARKER-SECRET" not in out and "No such file" in out  # ...and changed nothing
    # Nor for tools built later on the same folder: the folder named is not a git folder
    # that names this repository back.
    assert "MARKER-SECRET" not in sandboxed(repo).run_command(f"cat {home}/.ssh/id_rsa")


def test_a_git_file_naming_another_projects_git_folder_does_not_expose_it(
    repo: Path, home: Path
) -> None:
    """A real git folder elsewhere (another project of the user's) is not mounted just because
    a `.git` file names it: it must name this repository back, as git's own worktrees do."""
    other = home / "src" / "private"
    other.mkdir(parents=True)
    git("init", "-q", cwd=other)
    (other / ".git" / "SECRET-MARKER").write_text("MARKER-SECRET private history\n")
    (repo / ".git").write_text(f"gitdir: {other / '.git'}\n")
    out = sandboxed(repo).run_command(f"cat {other}/.git/SECRET-MARKER; git log 2>&1; echo END")
    assert "MARKER-SECRET" not in out and "\nEND\n" in out


def test_a_real_worktree_reads_its_history_read_only(tmp_path: Path, home: Path) -> None:
    source = home / "src" / "main"
    source.mkdir(parents=True)
    git("init", "-q", cwd=source)
    (source / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=source)
    git("commit", "-qm", "first", cwd=source)
    worktree = tmp_path / "wt"
    git("worktree", "add", "-q", "--detach", str(worktree), cwd=source)
    head = git("rev-parse", "HEAD", cwd=source).strip()

    policy = sandbox_policy(worktree)
    assert policy.outside_git == (source / ".git",)
    out = sandboxed(worktree).run_command(
        f"git log --format=%H; git commit -q --allow-empty -m x; cat {home}/.ssh/id_rsa"
    )
    assert head in out and "Read-only file system" in out and "MARKER-SECRET" not in out
    assert git("rev-parse", "HEAD", cwd=source).strip() == head


# ------------------------------------------------------------------------ .git is read-only
def test_hooks_and_git_config_planted_by_a_command_never_run_on_the_users_commit(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """The attack: a sandboxed command writes a pre-commit hook, core.fsmonitor and
    core.hooksPath; the user's own `git commit` and `git status`, outside any sandbox, would
    run them with the user's keys. .git is read-only inside the sandbox, so none lands."""
    git("init", "-q", cwd=repo)
    git("add", "app.py", cwd=repo)
    git("commit", "-qm", "base", cwd=repo)
    ran = tmp_path / "ran"
    ran.mkdir()
    hooks = tmp_path / "evil-hooks"
    out = sandboxed(repo).run_command(
        f"printf '#!/bin/sh\\ntouch {ran}/hook\\n' > .git/hooks/pre-commit; "
        "chmod +x .git/hooks/pre-commit; "
        f"git config core.fsmonitor 'touch {ran}/fsmonitor; false'; "
        f"git config core.hooksPath {hooks}; git config alias.st '!touch {ran}/alias'; "
        "rm -rf .git/objects; echo changed >> app.py"
    )
    assert "Read-only file system" in out or "could not lock config file" in out
    assert (repo / "app.py").read_text() == "print('hi')\nchanged\n"  # the work tree: writable

    git("status", "--short", cwd=repo)
    git("commit", "-qam", "the user's commit", cwd=repo)
    assert sorted(p.name for p in ran.iterdir()) == []
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()


def test_a_worktrees_git_file_cannot_be_rewritten(tmp_path: Path, home: Path) -> None:
    source = home / "src" / "main"
    source.mkdir(parents=True)
    git("init", "-q", cwd=source)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=source)
    worktree = tmp_path / "wt"
    git("worktree", "add", "-q", "--detach", str(worktree), cwd=source)
    before = (worktree / ".git").read_text()
    out = sandboxed(worktree).run_command(f"echo 'gitdir: {tmp_path}/evil' > .git")
    assert "Read-only file system" in out
    assert (worktree / ".git").read_text() == before


# ------------------------------------------------------------------ the user's own toolchain
def make_tool(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\necho {text}\n")
    tool.chmod(0o755)
    return tool


def test_tools_installed_in_the_home_run_while_its_secrets_stay_hidden(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyenv-style (shims in a prefix), ~/.local/bin (pip --user), and a venv in the repository
    whose interpreter links into the home: all run; ~/.ssh, ~/.aws, ~/.config/gh, .netrc and
    the shell history stay unreadable."""
    make_tool(home / ".pyenv" / "shims", "mypython", "SHIM-RAN")
    interpreter = make_tool(home / ".pyenv" / "versions" / "3.12" / "bin", "python3", "PY-RAN")
    make_tool(home / ".local" / "bin", "mytool", "LOCAL-RAN")
    (home / ".local" / "share" / "keyrings").mkdir(parents=True)
    (home / ".local" / "share" / "keyrings" / "login.keyring").write_text("MARKER-SECRET kr\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to(interpreter)
    monkeypatch.setenv("PATH", f"{home}/.pyenv/shims:{home}/.local/bin:/usr/bin:/bin")

    out = sandboxed(repo).run_command(
        "mypython; mytool; .venv/bin/python; "
        f"cat {home}/.ssh/id_rsa {home}/.aws/credentials {home}/.config/gh/hosts.yml "
        f"{home}/.netrc {home}/.bash_history {home}/.local/share/keyrings/login.keyring"
    )
    assert "SHIM-RAN" in out and "LOCAL-RAN" in out and "PY-RAN" in out
    assert "MARKER-SECRET" not in out


def test_list_tools_names_what_the_sandbox_exposes(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tool(home / ".cargo" / "bin", "cargo", "CARGO")
    (home / ".cargo" / "credentials.toml").write_text("token = 'MARKER-SECRET'\n")
    monkeypatch.setenv("PATH", f"{home}/.cargo/bin:/usr/bin:/bin")
    assert main(["--list-tools", "--repo", str(repo), "--allow-commands"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("sandbox: bwrap (hides ") and "~/.cargo" in line

    out = sandboxed(repo).run_command(f"cargo; cat {home}/.cargo/credentials.toml; echo END")
    assert "CARGO" in out and "MARKER-SECRET" not in out  # a credential file is covered


@pytest.mark.slow
def test_sandbox_read_exposes_a_folder_read_only_and_nothing_else(
    repo: Path, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = home / "datasets"
    data.mkdir()
    (data / "table.csv").write_text("a,b\n1,2\n")
    replay = tmp_path / "replay.json"
    from fakes import write_replay

    write_replay(replay, xml_action("run_command", command=f"cat {data}/table.csv; "
                                    f"touch {data}/new; cat {home}/.ssh/id_rsa"),
                 xml_action("task_complete", result="done"))  # fmt: skip
    code = main(["--task", "read the data", "--repo", str(repo), "--replay", str(replay),
                 "--allow-commands", "--sandbox", "bwrap", "--sandbox-read", str(data),
                 "--replay-lenient", "--output", "json", "--trajectory",
                 str(tmp_path / "t.json")])  # fmt: skip
    assert code == 0
    trajectory = json.loads((tmp_path / "t.json").read_text())
    observation = trajectory["steps"][0]["observations"][0]["content"]
    assert "1,2" in observation and "Read-only file system" in observation
    assert "MARKER-SECRET" not in observation and not (data / "new").exists()
    assert "~/datasets" in trajectory["settings"]["sandbox_policy"]


def test_a_command_failing_on_a_hidden_program_says_how_to_expose_it(
    repo: Path, home: Path
) -> None:
    tool = make_tool(home / "opt" / "tools", "hidden-tool", "NEVER")
    out = sandboxed(repo).run_command(str(tool))
    assert "NEVER" not in out and "exit code 127" in out
    assert "--sandbox-read" in out and "~/opt/tools/hidden-tool is hidden" in out


@pytest.mark.slow
def test_a_batch_check_that_fails_on_the_sandbox_says_so_in_its_record(
    repo: Path, home: Path, tmp_path: Path
) -> None:
    from toy_agent import run_batch
    from toy_agent.batch.driver import RunSettings

    tool = make_tool(home / "opt" / "tools", "checker", "NEVER")
    tasks = [{"id": "t", "repo": str(repo), "task": "x", "check": str(tool)}]
    settings = RunSettings(make_llm=lambda: ScriptedLlm(xml_action("task_complete", result="ok")),
                           sandbox="bwrap", check_retries=0)  # fmt: skip
    record = run_batch(tasks, tmp_path / "out", settings).records[0]
    assert record["check"]["passed"] is False and record["check"]["exit_code"] == 127
    assert "--sandbox-read" in record["check"]["sandbox_note"]
    assert "~/opt/tools/checker is hidden" in record["check"]["sandbox_note"]
