"""Git runs code later, outside the sandbox: each way a command could plant it, staged for real.

The user's own git, run after the agent (`git status`, `git commit`, a git-aware prompt), runs
hooks, core.fsmonitor and the programs its config names. A sandboxed command tries to plant
them through every path git reads besides the top-level `.git`: a submodule's `.git` file, a
husky-style core.hooksPath in the work tree, a config file an include.path names, and a new
repository (`git init`) in a sub-folder or in a `--repo` folder inside a larger repository.
Each test then runs the user's real git outside the sandbox and checks that nothing planted
ran (a marker file). The user's git config is a file of the test's own (GIT_CONFIG_GLOBAL).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import ScriptedLlm, folder, wait_until, write_replay, xml_action
from sandbox_helpers import NOBODY, nobody_folder, run_unprivileged

from toy_agent import ReactAgent
from toy_agent.cli import main
from toy_agent.sandbox import GitGuard, bwrap_problem
from toy_agent.tools import CodeRepositoryTools, ToolError

BWRAP_PROBLEM = bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
SANDBOXES = [pytest.param("bwrap", marks=needs_bwrap), "off"]
pytestmark = pytest.mark.slow  # real git and bwrap processes


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's git config: a file of the test's own, read by the tools' git and the user's."""
    home = tmp_path / "home"
    home.mkdir()
    config = home / ".gitconfig"
    config.write_text("[user]\n\temail = t@example.com\n\tname = t\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    return config


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    """Where planted code leaves its mark, if it ever runs."""
    marks = tmp_path / "ran"
    marks.mkdir()
    return marks


@pytest.fixture
def repo(tmp_path: Path, user_config: Path) -> Path:
    """A committed repository: app.py."""
    root = folder(tmp_path / "work" / "project", {"app.py": "print('hi')\n"})
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "base", cwd=root)
    return root


def tools_for(repo: Path, sandbox: str = "bwrap") -> CodeRepositoryTools:
    return CodeRepositoryTools(repo, allow_commands=True, sandbox=sandbox)


def marks(ran: Path) -> list[str]:
    return sorted(p.name for p in ran.iterdir())


# ------------------------------------------------------------------------- (a) submodules
@needs_bwrap
def test_a_submodules_git_file_cannot_be_pointed_at_a_planted_git_folder(
    tmp_path: Path, repo: Path, ran: Path
) -> None:
    """The attack: copy the submodule's git folder into the work tree, give the copy a
    core.fsmonitor, point the submodule's `.git` file at it (written in place, or the folder
    renamed away and a new one put there); the user's `git status` in the superproject then
    runs the fsmonitor. The `.git` file is read-only, its folder cannot be renamed, and the
    copy (a git folder) is removed."""
    lib = folder(tmp_path / "lib", {"lib.py": "x = 1\n"})
    git("init", "-q", cwd=lib)
    git("add", "-A", cwd=lib)
    git("commit", "-qm", "lib", cwd=lib)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub", cwd=repo)
    git("commit", "-qm", "add sub", cwd=repo)
    pointer = (repo / "sub" / ".git").read_text()

    out = tools_for(repo).run_command(
        "cp -r .git/modules/sub planted && "
        f"git config -f planted/config core.fsmonitor 'touch {ran}/fsmonitor; false' && "
        "git config -f planted/config core.worktree ../sub; "
        "printf 'gitdir: ../planted\\n' > sub/.git; "
        "mv sub sub-old && mkdir sub && printf 'gitdir: ../planted\\n' > sub/.git; "
        "echo changed >> sub/lib.py; git status --short"
    )
    status = git("status", "--short", cwd=repo)  # the user's, outside the sandbox
    git("submodule", "status", "--recursive", cwd=repo)
    assert marks(ran) == []
    assert status == " m sub\n"  # its content changed
    assert "Read-only file system" in out and "Device or resource busy" in out
    assert "removed planted" in out  # the model is told
    assert (repo / "sub" / ".git").read_text() == pointer
    assert not (repo / "planted").exists() and not (repo / "sub-old").exists()
    assert (repo / "sub" / "lib.py").read_text() == "x = 1\nchanged\n"  # the work tree: yours


# ------------------------------------------------------------ (b) hooks and config in the tree
@needs_bwrap
@pytest.mark.parametrize("husky", ["installed", "not yet installed"])
def test_a_hooks_folder_in_the_work_tree_cannot_be_planted(
    repo: Path, user_config: Path, ran: Path, husky: str
) -> None:
    """husky (`npm install`) sets core.hooksPath = .husky/_, a git-ignored folder of the work
    tree: a line appended to its pre-commit runs at the user's next `git commit`, unseen. The
    folder is read-only (and cannot be renamed away); before husky made it, it cannot be made."""
    with user_config.open("a") as f:
        f.write("[core]\n\thooksPath = .husky/_\n")
    if husky == "installed":
        folder(repo / ".husky" / "_", {".gitignore": "*\n", "pre-commit": "#!/bin/sh\n"})
        (repo / ".husky" / "_" / "pre-commit").chmod(0o755)
    hook = f"printf '#!/bin/sh\\ntouch {ran}/hook\\n' > .husky/_/pre-commit; "
    out = tools_for(repo).run_command(
        f"printf 'touch {ran}/appended\\n' >> .husky/_/pre-commit; "
        f"mkdir -p .husky/_ && {hook}"
        f"mv .husky .husky-old; mkdir -p .husky/_ && {hook}"
        "chmod +x .husky/_/pre-commit; echo changed >> app.py"
    )
    git("commit", "-qam", "the user's commit", cwd=repo)
    assert marks(ran) == []
    with pytest.raises(ToolError, match="the user's git runs or reads it"):
        tools_for(repo).write_file(".husky/_/pre-commit", f"#!/bin/sh\ntouch {ran}/tool\n")
    assert "Read-only file system" in out and "but not git's files in it" in out  # the note
    assert (repo / ".husky").exists() == (husky == "installed")  # no mount point is left
    assert not (repo / ".husky-old").exists()


@needs_bwrap
def test_config_files_an_include_names_in_the_work_tree_cannot_be_changed_or_made(
    repo: Path, user_config: Path, ran: Path
) -> None:
    """A project's shared `.gitconfig`, included by the clone's config (`include.path =
    ../.gitconfig`), and a file the user's includeIf names in the repository, not there yet:
    one appended core.fsmonitor line would run at the user's next `git status`."""
    (repo / ".gitconfig").write_text("[alias]\n\tst = status\n")
    git("add", ".gitconfig", cwd=repo)
    git("commit", "-qm", "shared config", cwd=repo)
    git("config", "include.path", "../.gitconfig", cwd=repo)
    with user_config.open("a") as f:
        f.write(f'[includeIf "gitdir:{repo}/"]\n\tpath = {repo}/.git-team.conf\n')

    fsmonitor = f"[core]\\n\\tfsmonitor = touch {ran}/fsmonitor; false\\n"
    out = tools_for(repo).run_command(
        f"printf '{fsmonitor}' >> .gitconfig; printf '{fsmonitor}' > .git-team.conf; "
        "mv .gitconfig x; echo changed >> app.py"
    )
    status = git("status", "--short", cwd=repo)
    assert marks(ran) == []
    assert status == " M app.py\n"
    assert "cannot create .gitconfig: Read-only file system" in out
    assert "cannot create .git-team.conf" in out and "Device or resource busy" in out
    assert (repo / ".gitconfig").read_text() == "[alias]\n\tst = status\n"
    assert not (repo / ".git-team.conf").exists()  # nor the file its mount point was


# --------------------------------------------------------------- (c) repositories a command made
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_repository_a_command_makes_in_a_sub_folder_is_removed(
    repo: Path, ran: Path, sandbox: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`git init` in a sub-folder with core.fsmonitor (it runs when the user, or a git-aware
    prompt, uses git there), and a bare repository made not bare, with a work tree and an
    fsmonitor (git takes such a folder for a repository when you stand in it, whatever its
    name): both are removed after the command, the model is told in the observation and the
    user in a warning."""
    out = tools_for(repo, sandbox).run_command(
        f"mkdir -p src/pkg && cd src/pkg && git init -q && echo x > f.txt && "
        f"git config core.fsmonitor 'touch {ran}/nested; false' && cd ../.. && "
        "git init -q --bare tools/cache && cd tools/cache && git config core.bare false && "
        f"git config core.worktree .. && git config core.fsmonitor 'touch {ran}/bare; false'"
    )
    for where in (repo / "src" / "pkg", repo / "tools" / "cache"):  # where git would use them
        where = where if where.exists() else repo
        subprocess.run(["git", "status"], cwd=where, capture_output=True)
        subprocess.run(["git", "log"], cwd=where, capture_output=True)
    assert marks(ran) == []
    assert "removed src/pkg/.git, tools/cache" in out and "/tmp" in out
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING][-1]
    assert "src/pkg/.git" in warning and "tools/cache" in warning
    assert not (repo / "src" / "pkg" / ".git").exists() and (repo / "src/pkg/f.txt").exists()
    assert not (repo / "tools" / "cache").exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("linked", ["objects", "refs", None])
def test_a_folder_of_yours_a_command_makes_a_repository_loses_only_what_made_it_one(
    repo: Path, ran: Path, sandbox: str, linked: str | None
) -> None:
    """A command adds HEAD, objects and refs (git follows a link to the project's own
    `objects` or `refs` too) and a config with core.fsmonitor to `src`, which holds your code:
    git would take `src` for a repository at your next `git status` there. What made it one
    goes; your files stay (the whole folder went, app.py with it)."""
    folder(repo, {"src/app.py": "x = 1\n"})
    made = " && ".join(f"ln -s ../.git/{name} {name}" if name == linked else f"mkdir {name}"
                       for name in ("objects", "refs"))  # fmt: skip
    monitor = f"touch {ran}/planted; false"
    config = (f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n"
              f'\tfsmonitor = "{monitor}"\n')  # fmt: skip
    out = tools_for(repo, sandbox).run_command(
        f"cd src && echo 'ref: refs/heads/master' > HEAD && {made} && "
        f"printf %s {shlex.quote(config)} > config"
    )
    subprocess.run(["git", "status"], cwd=repo / "src", capture_output=True)
    assert marks(ran) == []
    assert "removed src/HEAD, src/objects, src/refs" in out
    assert (repo / "src" / "app.py").read_text() == "x = 1\n"
    assert not any(os.path.lexists(repo / "src" / name) for name in ("HEAD", "objects", "refs"))


@needs_bwrap
def test_a_repository_made_in_a_repo_folder_inside_a_larger_one_is_removed_and_both_are_told(
    tmp_path: Path, user_config: Path, ran: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--repo packages/app`, which has no `.git` of its own: a command's `git init` there
    makes a repository that the user's git (or prompt) would use in that folder."""
    mono = folder(tmp_path / "mono", {"README": "mono\n", "packages/app/main.py": "x = 1\n"})
    git("init", "-q", cwd=mono)
    git("add", "-A", cwd=mono)
    git("commit", "-qm", "base", cwd=mono)
    app = mono / "packages" / "app"
    plant = f"git init -q && git config core.fsmonitor 'touch {ran}/app; false'"
    replay = write_replay(tmp_path / "replay.json", xml_action("run_command", command=plant),
                          xml_action("task_complete", result="done"))  # fmt: skip
    code = main(["--task", "x", "--repo", str(app), "--replay", str(replay), "--allow-commands",
                 "--sandbox", "bwrap", "--replay-lenient", "--trajectory",
                 str(tmp_path / "t.json")])  # fmt: skip
    assert code == 0
    git("status", "--short", cwd=app)
    assert marks(ran) == []
    warnings = [line for line in capsys.readouterr().err.splitlines() if "removed .git" in line]
    assert len(warnings) == 1 and "git would run its hooks or settings" in warnings[0]
    trajectory = json.loads((tmp_path / "t.json").read_text())
    observation = trajectory["steps"][0]["observations"][0]["content"]
    assert "[Note: removed .git:" in observation
    assert not (app / ".git").exists()


# ------------------------------------------------------------------ what stays the user's
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_repositories_that_were_there_before_stay_and_git_works_inside(
    tmp_path: Path, repo: Path, sandbox: str
) -> None:
    """A nested clone and a submodule that were there before the run are not removed (nor
    when a command, unsandboxed, moves one), and git reads them inside the sandbox."""
    lib = folder(tmp_path / "lib", {"lib.py": "x = 1\n"})
    git("init", "-q", cwd=lib)
    git("add", "-A", cwd=lib)
    git("commit", "-qm", "lib", cwd=lib)
    git("clone", "-q", str(lib), "vendor/lib", cwd=repo)
    head = git("rev-parse", "HEAD", cwd=lib)
    tools = tools_for(repo, sandbox)
    out = tools.run_command("git -C vendor/lib rev-parse HEAD; mv vendor/lib vendor/moved")
    assert head in out and "removed" not in out
    moved = "Device or resource busy" in out
    assert moved == (sandbox == "bwrap")
    clone = repo / "vendor" / ("lib" if moved else "moved")
    assert git("rev-parse", "HEAD", cwd=clone) == head
    assert tools.remove_planted_git() == []


def test_a_known_git_file_a_command_rewrites_is_written_back(
    tmp_path: Path, repo: Path, ran: Path
) -> None:
    """Unsandboxed, nothing stops the write; the sweep after the command puts it back."""
    lib = folder(tmp_path / "lib", {"lib.py": "x = 1\n"})
    git("init", "-q", cwd=lib)
    git("commit", "-q", "--allow-empty", "-m", "lib", cwd=lib)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub", cwd=repo)
    pointer = (repo / "sub" / ".git").read_text()
    out = tools_for(repo, "off").run_command("printf 'gitdir: /somewhere/else\\n' > sub/.git")
    assert "removed sub/.git" in out
    assert (repo / "sub" / ".git").read_text() == pointer


def test_a_repository_planted_after_the_last_command_is_removed_when_the_run_ends(
    repo: Path, ran: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Unsandboxed, a `setsid` child that dropped the command's marker variable outlives its
    command and plants a repository after the sweep that followed it: the sweep at the end of
    the run removes it."""
    planter = (
        "env -u TOY_AGENT_COMMAND setsid sh -c 'touch started; for i in $(seq 600); do "
        "[ -e go ] && break; sleep 0.05; done; git init -q late && git -C late config "
        f'core.fsmonitor "touch {ran}/late; false" && touch planted\' >/dev/null 2>&1 & '
        "until [ -e started ]; do sleep 0.05; done"  # out of the group before it is killed
    )

    class WaitingLlm(ScriptedLlm):
        def call_llm(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if len(self.requests) == 2:  # the planter was told to go: let it finish
                wait_until(lambda: (repo / "planted").exists(), "the planted repository")
            return super().call_llm(*args, **kwargs)

    llm = WaitingLlm(xml_action("run_command", command=planter),
                     xml_action("write_file", path="go", content="go\n"),
                     xml_action("task_complete", result="done"))  # fmt: skip
    result = ReactAgent(llm, tools=tools_for(repo, "off")).run("plant")
    assert result["success"]
    subprocess.run(["git", "status"], cwd=repo / "late", capture_output=True)
    assert marks(ran) == []
    assert not (repo / "late" / ".git").exists()
    assert any("removed late/.git" in r.getMessage() for r in caplog.records)


def test_a_repository_a_tool_plants_before_any_command_is_removed_when_the_run_ends(
    repo: Path, ran: Path
) -> None:
    """Unsandboxed, git's paths are decided when first needed, and a run needs them before
    anything of it runs: a repository a user's tool (or an MCP tool, a hook) plants before the
    first command or write is not taken for one that was there before."""

    def plant(repo: Path) -> str:
        """Plant a repository in vendor/."""
        git("init", "-q", "vendor", cwd=repo)
        git("-C", "vendor", "config", "core.fsmonitor", f"touch {ran}/tool; false", cwd=repo)
        return "planted"

    llm = ScriptedLlm(xml_action("plant"), xml_action("task_complete", result="done"))
    tools = CodeRepositoryTools(repo, extra_tools=[plant])
    assert ReactAgent(llm, tools=tools).run("plant")["success"]
    subprocess.run(["git", "status"], cwd=repo / "vendor", capture_output=True)
    assert marks(ran) == []
    assert not (repo / "vendor" / ".git").exists()


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_repository_the_users_linter_plants_is_removed_not_taken_for_the_users(
    repo: Path, ran: Path, sandbox: str
) -> None:
    """The user's --lint-cmd runs on the repository's code (an eslint config, a pytest plugin)
    as a command does: a repository it plants is removed after it, and the next command does
    not take it for one the user made while no command ran."""
    plant = f'git init -q planted; git -C planted config core.fsmonitor "touch {ran}/lint; false"'
    llm = ScriptedLlm(xml_action("write_file", path="app.py", content="print('bye')\n"),
                      xml_action("run_command", command="true"),
                      xml_action("task_complete", result="done"))  # fmt: skip
    agent = ReactAgent(llm, tools=tools_for(repo, sandbox), lint_commands=[f"*.py={plant}"])
    assert agent.run("edit")["success"]
    assert (repo / "planted").is_dir()  # the linter ran
    subprocess.run(["git", "status"], cwd=repo / "planted", capture_output=True)
    assert marks(ran) == []
    assert not (repo / "planted" / ".git").exists()


def test_git_paths_come_from_every_scope_and_every_include(
    tmp_path: Path, repo: Path, user_config: Path
) -> None:
    """Decided from git's own answers: a relative core.hooksPath in the global config (from
    each work tree's top), an include whose condition is false today and the include inside
    it, a program a setting names by a path; only what lies inside the repository."""
    team = folder(
        tmp_path / "team", {"team.conf": f"[include]\n\tpath = {repo}/.shared/git.conf\n"}
    )
    with user_config.open("a") as f:
        f.write("[core]\n\thooksPath = .githooks\n"
                f'[includeIf "onbranch:release"]\n\tpath = {team}/team.conf\n'
                "[alias]\n\tlint = !./scripts/lint.sh --all\n\tst = status\n"
                "[credential]\n\thelper = /usr/bin/store\n")  # fmt: skip
    folder(repo / "scripts", {"lint.sh": "#!/bin/sh\n"})
    git("config", "include.path", "../local.conf", cwd=repo)  # relative to .git/config

    guard = GitGuard(repo)
    assert guard.read_only == (repo / ".git", repo / "scripts" / "lint.sh")
    assert guard.absent == (repo / ".githooks", repo / ".shared" / "git.conf",
                            repo / "local.conf")  # fmt: skip
    assert guard.protects(repo / ".shared" / "git.conf") and not guard.protects(repo / "app.py")


@needs_bwrap
def test_a_repository_you_make_between_sandboxed_commands_stays_and_is_read_only(
    repo: Path, ran: Path
) -> None:
    """While an interactive run waits, you clone something into the work tree yourself: it is
    yours (nothing of a sandboxed command outlives it), so it is kept, and the next command
    cannot plant a hook in it."""
    tools = tools_for(repo)
    tools.run_command("true")
    git("init", "-q", "vendor/mine", cwd=repo)
    out = tools.run_command(
        f"git -C vendor/mine config core.fsmonitor 'touch {ran}/mine; false'; mv vendor x"
    )
    assert "could not lock config file" in out and "Device or resource busy" in out
    assert "removed" not in out and (repo / "vendor" / "mine" / ".git" / "HEAD").exists()
    assert tools.remove_planted_git(run_ended=True) == []
    git("status", "--short", cwd=repo / "vendor" / "mine")
    assert marks(ran) == []


def test_write_file_makes_no_repository(repo: Path) -> None:
    """The file tools run outside the sandbox: a folder they would fill with HEAD, objects and
    refs (git takes it for a repository, whatever its name) is refused at its last piece."""
    tools = tools_for(repo, "off")
    tools.write_file("cache/objects/keep", "")
    tools.write_file("cache/refs/heads/main", "0" * 40 + "\n")
    with pytest.raises(ToolError, match="HEAD, objects and refs"):
        tools.write_file("cache/HEAD", "ref: refs/heads/main\n")
    tools.write_file("other/HEAD", "not a repository\n")
    assert not (repo / "cache" / "HEAD").exists()


UNPRIVILEGED = """
import os, subprocess, sys
from pathlib import Path
from toy_agent.tools import CodeRepositoryTools
repo, ran = Path(sys.argv[1]), sys.argv[2]
git = lambda *a, cwd=repo: subprocess.run(["git", *a], cwd=cwd, check=True, capture_output=True)
git("init", "-q")
git("init", "-q", "vendor")
(repo / "private").mkdir(mode=0)  # yours, unreadable: left as it is
tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")
print(tools.run_command(
    f"id -u; mkdir -p .husky/_; git -C vendor config core.fsmonitor 'touch {ran}/vendor; false';"
    f" mv vendor x; git init -q pkg && git -C pkg config core.fsmonitor 'touch {ran}/pkg; false';"
    " git init -q hide/in && chmod 0 hide"
))
for where in (repo, repo / "vendor", repo / "pkg" if (repo / "pkg").exists() else repo):
    subprocess.run(["git", "status"], cwd=where, capture_output=True)
print("marks:", sorted(os.listdir(ran)))
print("modes:", oct((repo / "private").stat().st_mode & 0o777), os.listdir(repo / "hide"))
"""


@needs_bwrap
def test_as_an_unprivileged_user_the_same_paths_hold(user_config: Path) -> None:
    """CI runs as root; a user does not: bwrap then makes its own user namespace, and
    permission bits bind the sweep. The same attacks, staged by and against an unprivileged
    user's files, run nothing; a repository hidden in a folder the command made unreadable is
    found and removed, while a folder that was unreadable before the run is left so."""
    with nobody_folder() as shared:
        for name in ("repo", "ran"):
            (shared / name).mkdir()
        config = shared / ".gitconfig"
        config.write_text(user_config.read_text() + "[core]\n\thooksPath = .husky/_\n")
        for path in shared.rglob("*"):
            os.chown(path, NOBODY, NOBODY)
        env = {"GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}
        done = run_unprivileged(UNPRIVILEGED, str(shared / "repo"), str(shared / "ran"),
                                cwd=shared, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\n65534\n" in done.stdout and "marks: []" in done.stdout
    assert "cannot create directory ‘.husky/_’: Read-only file system" in done.stdout
    assert "could not lock config file" in done.stdout and "Device or resource busy" in done.stdout
    assert "removed hide/in/.git, pkg/.git" in done.stdout  # made unreadable to hide it
    assert "modes: 0o0 ['in']" in done.stdout


@needs_bwrap
def test_a_config_file_your_global_config_includes_from_a_plain_folder_stays_read_only(
    tmp_path: Path, repo: Path, user_config: Path, ran: Path
) -> None:
    """A folder without git (a downloaded tarball of your dotfiles, say) that holds a file your
    global config includes: a line appended there would run in every repository you use."""
    plain = folder(tmp_path / "dotfiles", {"git/extra.conf": "[alias]\n\tst = status\n"})
    with user_config.open("a") as f:
        f.write(f"[include]\n\tpath = {plain}/git/extra.conf\n")
    out = tools_for(plain).run_command(
        f"printf '[core]\\n\\tfsmonitor = touch {ran}/global; false\\n' >> git/extra.conf"
    )
    git("status", "--short", cwd=repo)  # any repository of yours
    assert marks(ran) == []
    assert "Read-only file system" in out


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_repository_the_users_check_makes_is_removed_too(
    repo: Path, sandbox: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`--check` runs the project's own tests, which are the repository's code: what they
    leave is swept like a command's, and the user is warned."""
    result = tools_for(repo, sandbox).run_check("git init -q build/fixture", 30)
    assert result.ok and not (repo / "build" / "fixture" / ".git").exists()
    assert any("removed build/fixture/.git" in r.getMessage() for r in caplog.records)
