"""What of the user's home a sandboxed command can read, staged for real.

A temporary home holds the toolchains people install there, laid out as their installers lay
them out (pyenv and a pyenv-virtualenv, a virtualenvwrapper environment, nvm, miniforge with
an environment, cargo's rustup proxies and rustup's toolchains, uv's Pythons and tools, sdkman,
volta, bun, Go, pulumi, flyctl), each with the secrets those installs really come to hold
(`etc/npmrc`, `pip.conf`, a conda environment's stored variables, `~/.cargo/config.toml`, ...).
Real bubblewrap then runs `grep -R` and `cat` over the whole home from inside, and every
toolchain's program, through its real chain of links, shims and `#!` lines; once as this
process's user (root in CI) and once as nobody.

The links that used to widen what is exposed are real too: relative links in a repository's
`.venv/bin` climbing out of it, `~/.local/bin/deploy -> ~/deploy.sh`, `~/bin -> ~/dotfiles/bin`,
and links a command writes into a writable PATH folder for the next run.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sandbox_helpers import NOBODY, nobody_folder, run_unprivileged

from toy_agent import sandbox
from toy_agent.sandbox import SandboxPolicy, bwrap_problem, sandbox_policy
from toy_agent.tools import CodeRepositoryTools

BWRAP_PROBLEM = bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
SECRET = "MARKER-SECRET"
GREP_SECRET = 'grep -R -l "MARKER""-SECRET"'  # a command line that does not hold the marker
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


# ------------------------------------------------------------------------------ the home
def script(path: Path, body: str, interpreter: str = "/bin/sh") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{interpreter}\n{body}\n")
    path.chmod(0o755)
    return path


def link(path: Path, target: str | Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def text(path: Path, content: str = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


@dataclass
class Home:
    """A temporary home folder and what the user's shell says about it."""

    root: Path
    path: list[Path] = field(default_factory=list)  # PATH folders, in order, before BASE_PATH
    variables: dict[str, str] = field(default_factory=dict)
    secrets: list[Path] = field(default_factory=list)
    runs: dict[str, str] = field(default_factory=dict)  # command -> what it prints

    def secret(self, rel: str, content: str) -> None:
        assert SECRET in content
        self.secrets.append(text(self.root / rel, content))

    def environ(self) -> dict[str, str]:
        path = os.pathsep.join([*map(str, self.path), BASE_PATH])
        return {"HOME": str(self.root), "PATH": path, **self.variables}


def usual_home(root: Path) -> Home:
    home = Home(root)
    home.secret(".ssh/id_ed25519", f"{SECRET} private key\n")
    home.secret(".aws/credentials", f"[default]\naws_secret_access_key = {SECRET}\n")
    home.secret(".config/gh/hosts.yml", f"github.com:\n    oauth_token: gho_{SECRET}\n")
    home.secret(".npmrc", f"//registry.npmjs.org/:_authToken=npm_{SECRET}\n")
    home.secret(".bash_history", f"export TOKEN={SECRET}\n")
    return home


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """HOME is a temporary folder holding the usual secrets; no toolchain variable or PATH
    folder of the real home is left (the real home stays the password database's)."""
    home = usual_home(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home.root))
    monkeypatch.setenv("PATH", BASE_PATH)
    for name in sandbox._TOOL_HOME_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def repo(home: Home) -> Path:
    return text(home.root / "src" / "project" / "app.py", "print('hi')\n").parent


def activate(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in home.environ().items():
        monkeypatch.setenv(name, value)


def sandboxed(repo: Path) -> CodeRepositoryTools:
    return CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")


def assert_exposes_no_home_and_nothing_of_the_repository(policy: SandboxPolicy) -> None:
    for path in policy.exposed:
        for place in (path, path.resolve()):
            assert not [h for h in policy.hidden if h.is_relative_to(place)], place
            assert not place.is_relative_to(policy.repo), place


# --- each toolchain, as its installer lays it out, with the secrets it comes to hold
def install_pyenv(home: Home) -> Path:
    """pyenv (a git clone), one Python built by python-build, and a pyenv-virtualenv
    environment; the shims are the ones `pyenv rehash` writes. Returns the Python."""
    root = home.root / ".pyenv"
    bash = "/usr/bin/env bash"
    script(root / "libexec" / "pyenv", 'cmd="$1"; shift\n[ "$cmd" = exec ] || exit 1\n'
           'program="$1"; shift\nversion="${PYENV_VERSION:-$(cat "$PYENV_ROOT/version")}"\n'
           'exec "$PYENV_ROOT/versions/$version/bin/$program" "$@"', bash)  # fmt: skip
    link(root / "bin" / "pyenv", "../libexec/pyenv")
    for name in ("python", "python3"):
        script(root / "shims" / name, f'set -e\nprogram="${{0##*/}}"\nexport PYENV_ROOT="{root}"\n'
               f'exec "{root}/libexec/pyenv" exec "$program" "$@"', bash)  # fmt: skip
    script(root / "plugins" / "pyenv-virtualenv" / "bin" / "pyenv-virtualenv", "exit 0")
    text(root / "version", "3.12.1\n")
    version = root / "versions" / "3.12.1"
    python = script(version / "bin" / "python3.12", 'echo "PYENV-PYTHON-RAN $*"')
    link(version / "bin" / "python3", "python3.12")
    link(version / "bin" / "python", "python3.12")
    text(version / "lib" / "python3.12" / "os.py")
    text(version / "include" / "python3.12" / "Python.h")
    text(version / "share" / "man" / "man1" / "python3.12.1")
    home.secret(
        ".pyenv/versions/3.12.1/pip.conf",
        f"[global]\nindex-url = https://__token__:{SECRET}@pypi.example.com/simple\n",
    )
    env = version / "envs" / "proj"
    text(env / "pyvenv.cfg", f"home = {version}/bin\ninclude-system-site-packages = false\n")
    link(env / "bin" / "python", python)
    home.secret(
        ".pyenv/versions/3.12.1/envs/proj/pip.conf",
        f"[global]\nextra-index-url = https://u:{SECRET}@pypi.corp.example/simple\n",
    )
    link(root / "versions" / "proj", env)
    home.path += [root / "shims", root / "bin"]
    home.runs |= {"python3 -c pass": "PYENV-PYTHON-RAN -c pass",
                  "PYENV_VERSION=proj pyenv exec python": "PYENV-PYTHON-RAN"}  # fmt: skip
    return python


def install_virtualenv(home: Home, python: Path) -> None:
    """A virtualenvwrapper environment (outside the repository), activated, with a console
    script whose `#!` names the environment's Python."""
    env = home.root / ".virtualenvs" / "tools"
    text(env / "pyvenv.cfg", f"home = {python.parent}\nversion = 3.12.1\n")
    link(env / "bin" / "python", python)
    script(env / "bin" / "black", "import sys\nfrom black import patched_main\n",
           f"{env}/bin/python")  # fmt: skip
    text(env / "lib" / "python3.12" / "site-packages" / "black" / "__init__.py")
    home.secret(
        ".virtualenvs/tools/pip.conf",
        f"[global]\nindex-url = https://__token__:{SECRET}@pypi.corp.example/simple\n",
    )
    home.path.insert(0, env / "bin")
    home.variables["VIRTUAL_ENV"] = str(env)
    home.runs["black --check ."] = f"PYENV-PYTHON-RAN {env}/bin/black --check ."


def install_nvm(home: Home) -> None:
    """nvm and one Node: npm is a relative link into lib/node_modules, run through
    `#!/usr/bin/env node`; `npm config set -g` wrote a token into the prefix's etc/npmrc."""
    root = home.root / ".nvm"
    text(root / "nvm.sh", "nvm() { :; }\n")
    text(root / "alias" / "default", "20\n")
    prefix = root / "versions" / "node" / "v20.11.1"
    script(prefix / "bin" / "node", 'echo "NODE-RAN $*"')
    script(prefix / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js",
           "require('../lib/cli.js')(process)", "/usr/bin/env node")  # fmt: skip
    link(prefix / "bin" / "npm", "../lib/node_modules/npm/bin/npm-cli.js")
    text(prefix / "include" / "node" / "node.h")
    home.secret(
        ".nvm/versions/node/v20.11.1/etc/npmrc", f"//registry.npmjs.org/:_authToken=npm_{SECRET}\n"
    )
    home.path.append(prefix / "bin")
    home.variables["NVM_DIR"] = str(root)
    home.runs["npm --version"] = "NODE-RAN"


def install_conda(home: Home) -> None:
    """miniforge3 with an environment `ml`, activated: its stored variables (`conda env
    config vars set`), an activation script, a channel token in .condarc and in history."""
    root = home.root / "miniforge3"
    script(root / "bin" / "conda", 'echo "CONDA-RAN $*"')
    script(root / "condabin" / "conda", f'exec "{root}/bin/conda" "$@"')
    script(root / "bin" / "python3.12", 'echo "CONDA-BASE-PYTHON-RAN"')
    text(root / "lib" / "python3.12" / "site-packages" / "conda" / "__init__.py")
    text(root / "conda-meta" / "conda-24.1.2-py312h.json", '{"name": "conda"}\n')
    text(root / "etc" / "profile.d" / "conda.sh", "conda() { :; }\n")
    channel = f"https://conda.anaconda.org/t/{SECRET}/private"
    home.secret("miniforge3/.condarc", f"channels:\n  - {channel}\n")
    home.secret(
        "miniforge3/conda-meta/history",
        f"==> 2024-05-01 10:00:00 <==\n# cmd: {root}/bin/conda install -c {channel} x\n",
    )
    env = root / "envs" / "ml"
    script(env / "bin" / "python3.12", 'echo "CONDA-ML-PYTHON-RAN"')
    link(env / "bin" / "python", "python3.12")
    text(env / "ssl" / "cacert.pem", "-----BEGIN CERTIFICATE-----\n")
    text(env / "conda-meta" / "python-3.12.1-h.json", '{"name": "python"}\n')
    home.secret(
        "miniforge3/envs/ml/conda-meta/state",
        f'{{"env_vars": {{"DATABASE_URL": "postgres://ml:{SECRET}@db/ml"}}}}\n',
    )
    home.secret(
        "miniforge3/envs/ml/etc/conda/activate.d/env_vars.sh", f"export API_TOKEN={SECRET}\n"
    )
    script(root / "envs" / "tiny" / "bin" / "python", "exit 0")  # a folder all of it exposed
    dsn = f"https://{SECRET}@sentry.example/1"
    home.secret("miniforge3/envs/tiny/conda-meta/state", f'{{"env_vars": {{"DSN": "{dsn}"}}}}\n')
    home.path += [env / "bin", root / "condabin"]
    home.variables["CONDA_PREFIX"] = str(env)
    home.runs |= {"python3.12": "CONDA-ML-PYTHON-RAN", "conda list": "CONDA-RAN list",
                  f"ls {env}/conda-meta": "python-3.12.1-h.json"}  # fmt: skip


def install_rust(home: Home) -> None:
    """rustup-init's layout: ~/.cargo/bin holds rustup and its proxies (links to it), which
    find the toolchain through RUSTUP_HOME (~/.rustup by default); a registry token in
    ~/.cargo/config.toml and in credentials.toml."""
    cargo, rustup = home.root / ".cargo", home.root / ".rustup"
    script(cargo / "bin" / "rustup", 'home="${RUSTUP_HOME:-$HOME/.rustup}"\n'
           "toolchain=$(sed -n 's/^default_toolchain = \"\\(.*\\)\"/\\1/p' "
           '"$home/settings.toml")\n'
           'exec "$home/toolchains/$toolchain/bin/${0##*/}" "$@"')  # fmt: skip
    for proxy in ("cargo", "rustc"):
        link(cargo / "bin" / proxy, "rustup")
    text(cargo / "env", 'export PATH="$HOME/.cargo/bin:$PATH"\n')
    text(cargo / "registry" / "index" / "index.crates.io-6f17d22bba15001f" / "config.json")
    home.secret(".cargo/config.toml", f'[registries.corp]\ntoken = "{SECRET}"\n')
    home.secret(".cargo/credentials.toml", f'[registry]\ntoken = "cio_{SECRET}"\n')
    text(
        rustup / "settings.toml",
        'version = "12"\ndefault_toolchain = "stable-x86_64-unknown-linux-gnu"\n',
    )
    toolchain = rustup / "toolchains" / "stable-x86_64-unknown-linux-gnu"
    script(toolchain / "bin" / "cargo", 'echo "CARGO-RAN $*"')
    script(toolchain / "bin" / "rustc", 'echo "RUSTC-RAN $*"')
    text(toolchain / "lib" / "librustc_driver.so")
    text(rustup / "update-hashes" / "stable-x86_64-unknown-linux-gnu", "e3b0c442\n")
    (rustup / "downloads").mkdir()
    home.path.append(cargo / "bin")
    home.runs |= {"cargo build": "CARGO-RAN build", "rustc -V": "RUSTC-RAN -V"}


def install_uv(home: Home, repo: Path) -> None:
    """uv in ~/.local/bin with a Python it installed and a tool (`uv tool install ruff`,
    linked into ~/.local/bin), and the repository's .venv made by `uv venv`, whose Python
    links to uv's. ~/.local/share also holds a keyring."""
    local = home.root / ".local"
    script(local / "bin" / "uv", 'echo "UV-RAN $*"')
    python = local / "share" / "uv" / "python" / "cpython-3.12.5-linux-x86_64-gnu"
    script(python / "bin" / "python3.12", 'echo "UV-PYTHON-RAN $*"')
    link(python / "bin" / "python3", "python3.12")
    text(python / "lib" / "python3.12" / "os.py")
    tool = local / "share" / "uv" / "tools" / "ruff"
    text(tool / "pyvenv.cfg", f"home = {python}/bin\n")
    link(tool / "bin" / "python", python / "bin" / "python3.12")
    script(tool / "bin" / "ruff", 'echo "RUFF-RAN $*"')
    link(local / "bin" / "ruff", tool / "bin" / "ruff")
    home.secret(".local/share/keyrings/login.keyring", f"{SECRET} keyring\n")
    text(repo / ".venv" / "pyvenv.cfg", f"home = {python}/bin\n")
    link(repo / ".venv" / "bin" / "python", python / "bin" / "python3.12")
    home.path.append(local / "bin")
    home.runs |= {"uv sync": "UV-RAN sync", "ruff check": "RUFF-RAN check",
                  ".venv/bin/python -V": "UV-PYTHON-RAN -V"}  # fmt: skip


def install_others(home: Home) -> None:
    """sdkman's Java (through its `current` link), volta's shims, bun's global packages, Go
    and a GOPATH, and the installers that put a bin folder next to their credentials:
    pulumi's ~/.pulumi/credentials.json, flyctl's ~/.fly/config.yml."""
    java = home.root / ".sdkman" / "candidates" / "java" / "21.0.2-tem"
    script(java / "bin" / "java", 'echo "JAVA-RAN $*"')
    text(java / "conf" / "security" / "java.security")
    text(java / "release", 'JAVA_VERSION="21.0.2"\n')
    link(java.parent / "current", "21.0.2-tem")
    text(home.root / ".sdkman" / "bin" / "sdkman-init.sh")
    volta = home.root / ".volta"
    script(volta / "bin" / "volta-shim", "version=$(sed -n 's/.*\"runtime\":\"\\([^\"]*\\)\".*/"
           '\\1/p\' "$VOLTA_HOME/tools/user/platform.json")\n'
           'exec "$VOLTA_HOME/tools/image/node/$version/bin/${0##*/}" "$@"')  # fmt: skip
    link(volta / "bin" / "node", "volta-shim")
    text(volta / "tools" / "user" / "platform.json", '{"node":{"runtime":"20.11.1","npm":null}}')
    script(volta / "tools" / "image" / "node" / "20.11.1" / "bin" / "node", 'echo "VOLTA-RAN"')
    home.secret(
        ".volta/tools/image/node/20.11.1/etc/npmrc", f"//npm.corp.example/:_authToken={SECRET}\n"
    )
    bun = home.root / ".bun"
    script(bun / "bin" / "bun", 'echo "BUN-RAN $*"')
    script(
        bun / "install" / "global" / "node_modules" / "cowsay" / "cli.js", "", "/usr/bin/env bun"
    )
    link(bun / "bin" / "cowsay", "../install/global/node_modules/cowsay/cli.js")
    home.secret(".bunfig.toml", f'[install.registry]\ntoken = "{SECRET}"\n')
    goroot = home.root / "sdk" / "go1.22.1"
    script(goroot / "bin" / "go", 'echo "GO-RAN $*"')
    text(goroot / "src" / "runtime" / "runtime.go", "package runtime\n")
    text(goroot / "VERSION", "go1.22.1\n")
    script(home.root / "go" / "bin" / "gopls", 'echo "GOPLS-RAN"')
    home.secret("go/src/corp.example/internal/keys.go", f'const key = "{SECRET}"\n')
    script(home.root / ".pulumi" / "bin" / "pulumi", 'echo "PULUMI-RAN $*"')
    home.secret(
        ".pulumi/credentials.json",
        f'{{"accessTokens": {{"https://api.pulumi.com": "pul-{SECRET}"}}}}\n',
    )
    script(home.root / ".fly" / "bin" / "flyctl", 'echo "FLY-RAN $*"')
    link(home.root / ".fly" / "bin" / "fly", "flyctl")
    home.secret(".fly/config.yml", f"access_token: fo1_{SECRET}\n")
    home.path += [java.parent / "current" / "bin", volta / "bin", bun / "bin", goroot / "bin",
                  home.root / "go" / "bin", home.root / ".pulumi" / "bin",
                  home.root / ".fly" / "bin"]  # fmt: skip
    home.runs |= {"java -version": "JAVA-RAN -version", f"{volta}/bin/node": "VOLTA-RAN",
                  "cowsay moo": "BUN-RAN", "go version": "GO-RAN version", "gopls": "GOPLS-RAN",
                  "pulumi up": "PULUMI-RAN up", "fly deploy": "FLY-RAN deploy"}  # fmt: skip


def install_everything(home: Home, repo: Path) -> None:
    install_virtualenv(home, install_pyenv(home))
    install_nvm(home)
    install_conda(home)
    install_rust(home)
    install_uv(home, repo)
    install_others(home)


@pytest.fixture
def full_home(home: Home, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    install_everything(home, repo)
    activate(home, monkeypatch)
    return home


def reads_and_runs(home: Home) -> str:
    """One command line: every file in the home holding the marker (none, from inside), every
    planted secret, then each toolchain's program, each followed by its exit status."""
    secrets = " ".join(map(str, home.secrets))
    runs = "; ".join(f'{command}; echo "=$?="' for command in home.runs)
    return f"{GREP_SECRET} {home.root}; cat {secrets}; echo READ; {runs}"


def assert_read_nothing_and_ran_everything(home: Home, out: str) -> None:
    assert SECRET not in out.split("\n", 1)[1]  # what it printed, not the command line
    printed = out.split("\nREAD\n", 1)[1].split("=\n")
    for (command, expected), output in zip(home.runs.items(), printed, strict=False):
        assert output.endswith("=0") and expected in output, (command, output)
    assert len(printed) == len(home.runs) + 1


# ------------------------------------------------------------- secrets inside toolchains
@pytest.mark.slow
@needs_bwrap
def test_every_toolchain_runs_and_nothing_secret_in_the_home_is_readable(
    full_home: Home, repo: Path
) -> None:
    home = full_home.root
    on_the_host = subprocess.run(["grep", "-r", "-l", SECRET, str(home)], capture_output=True,
                                 text=True).stdout.split()  # fmt: skip
    assert sorted(on_the_host) == sorted(map(str, full_home.secrets))  # all planted, all found
    tools = sandboxed(repo)

    seen = tools.run_command(f"{GREP_SECRET} {home}; echo GREP-DONE; "
                             f"cd {home} && find . -type f | sort")  # fmt: skip
    assert "GREP-DONE" in seen and SECRET not in seen
    for visible in (".nvm/versions/node/v20.11.1/lib/node_modules/npm/bin/npm-cli.js",
                    ".pyenv/versions/3.12.1/include/python3.12/Python.h", ".pyenv/version",
                    ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/lib/librustc_driver.so",
                    "miniforge3/envs/ml/ssl/cacert.pem", "miniforge3/envs/ml/conda-meta/state",
                    ".virtualenvs/tools/pyvenv.cfg", "sdk/go1.22.1/src/runtime/runtime.go",
                    ".sdkman/candidates/java/21.0.2-tem/conf/security/java.security"):  # fmt: skip
        assert f"./{visible}\n" in seen  # what the toolchains need is there
    assert_read_nothing_and_ran_everything(full_home, tools.run_command(reads_and_runs(full_home)))


@pytest.mark.slow
@needs_bwrap
def test_as_an_unprivileged_user_too_nothing_secret_is_readable_and_every_toolchain_runs() -> None:
    """The same home, owned by nobody, with toy_agent run as nobody (setpriv): how most people
    run it, where the suite itself runs as root in CI."""
    with nobody_folder() as folder:
        home = usual_home(folder / "home")
        repo = text(home.root / "src" / "project" / "app.py", "print('hi')\n").parent
        install_everything(home, repo)
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(folder)], check=True)
        code = ("import sys\nfrom toy_agent.tools import CodeRepositoryTools\n"
                "tools = CodeRepositoryTools(sys.argv[1], allow_commands=True, sandbox='bwrap')\n"
                "print(tools.run_command(sys.argv[2]))")  # fmt: skip
        done = run_unprivileged(code, str(repo), reads_and_runs(home), cwd=folder,
                                env=home.environ())  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_read_nothing_and_ran_everything(home, done.stdout)


@pytest.mark.slow
@needs_bwrap
def test_a_toolchain_found_through_home_is_told_where_it_is(full_home: Home, repo: Path) -> None:
    """HOME inside is a scratch folder: rustup's proxies, volta's shims and uv look for
    their install through $HOME, so the sandbox names it (RUSTUP_HOME, VOLTA_HOME, ...);
    cargo's own home stays the scratch one (writable, and without config.toml)."""
    out = sandboxed(repo).run_command("env | sort")
    home = full_home.root
    assert f"RUSTUP_HOME={home}/.rustup\n" in out and f"VOLTA_HOME={home}/.volta\n" in out
    assert f"UV_PYTHON_INSTALL_DIR={home}/.local/share/uv/python\n" in out
    assert "CARGO_HOME" not in out


def test_what_is_exposed_is_what_runs_never_a_whole_prefix(full_home: Home, repo: Path) -> None:
    home = full_home.root
    policy = sandbox_policy(repo)
    exposed = {str(p.relative_to(home)) for p in policy.exposed}
    assert {".cargo/bin", ".rustup/toolchains", ".rustup/settings.toml", ".pulumi/bin",
            ".fly/bin", "miniforge3/envs/ml/bin", "miniforge3/envs/ml/ssl",
            ".pyenv/versions/3.12.1/bin", ".virtualenvs/tools/pyvenv.cfg"} <= exposed  # fmt: skip
    prefixes = (".cargo", ".pyenv", ".nvm/versions/node/v20.11.1", "miniforge3/envs/ml",
                ".pulumi", ".fly", ".local", ".virtualenvs/tools", "go", ".volta",
                ".bun")  # fmt: skip
    assert not [whole for whole in prefixes if whole in exposed]
    assert not [p for p in exposed if "/etc" in f"/{p}" or p.endswith(".conf")]
    assert policy.masked == (home / "miniforge3/conda-meta/history",
                             home / "miniforge3/envs/ml/conda-meta/state",
                             home / "miniforge3/envs/tiny/conda-meta/state")  # fmt: skip
    assert_exposes_no_home_and_nothing_of_the_repository(policy)
    line = policy.describe()
    assert "~/.rustup/{settings.toml,toolchains}" in line and "~/.cargo/bin" in line


# ------------------------------------------------------------- links choose nothing
@pytest.mark.slow
@needs_bwrap
def test_relative_links_in_the_repositorys_venv_expose_nothing(
    home: Home, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An activated `.venv/bin` (a PATH folder in the repository) whose links climb out of
    it: before, the folder each led to was exposed, here the whole home."""
    script(home.root / "deploy.sh", 'echo "DEPLOY-RAN"')
    bin_dir = repo / ".venv" / "bin"
    text(repo / ".venv" / "pyvenv.cfg", "home = /usr/bin\n")
    link(bin_dir / "helper", "../../../../deploy.sh")  # repo/.venv/bin -> the home
    link(bin_dir / "keys", "../../../../.ssh")
    script(bin_dir / "tool", "print(1)", f"{home.root}/.aws/python")
    home.path.insert(0, bin_dir)
    home.variables["VIRTUAL_ENV"] = str(repo / ".venv")
    activate(home, monkeypatch)

    policy = sandbox_policy(repo)
    assert policy.exposed == () and policy.masked == ()
    out = sandboxed(repo).run_command(
        f"helper; cat .venv/bin/keys/id_ed25519 {home.root}/.ssh/id_ed25519 {home.root}/deploy.sh; "
        "tool"
    )
    assert SECRET not in out and "DEPLOY-RAN" not in out and "exit code 127" in out
    assert "--sandbox-read" in out and "leads to ~/deploy.sh, which is hidden" in out


@pytest.mark.slow
@needs_bwrap
def test_a_link_in_local_bin_leading_elsewhere_in_the_home_fails_and_says_how_to_expose_it(
    home: Home, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(home.root / "deploy.sh", 'echo "DEPLOY-RAN"')
    link(home.root / ".local" / "bin" / "deploy", home.root / "deploy.sh")
    script(home.root / ".local" / "bin" / "mytool", 'echo "MYTOOL-RAN"')
    home.path.append(home.root / ".local" / "bin")
    activate(home, monkeypatch)

    policy = sandbox_policy(repo)
    assert policy.exposed == (home.root / ".local" / "bin",)
    tools = sandboxed(repo)
    assert "MYTOOL-RAN" in tools.run_command("mytool")
    out = tools.run_command(f"deploy; cat {home.root}/.ssh/id_ed25519")
    assert "DEPLOY-RAN" not in out and SECRET not in out
    assert "~/.local/bin/deploy leads to ~/deploy.sh, which is hidden" in out
    assert "--sandbox-read" in out

    exposed = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap",
                                  sandbox_read=[home.root / "deploy.sh"])  # fmt: skip
    assert "DEPLOY-RAN" in exposed.run_command("deploy")  # what the note says works


@pytest.mark.slow
@needs_bwrap
def test_a_bin_folder_linked_into_dotfiles_exposes_that_folder_only(
    home: Home, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dotfiles = home.root / "dotfiles"
    script(dotfiles / "bin" / "greet", 'echo "GREET-RAN"')
    home.secret("dotfiles/secrets.env", f"OPENAI_API_KEY={SECRET}\n")
    home.secret("dotfiles/lib/work.sh", f"export TOKEN={SECRET}\n")
    home.secret("dotfiles/.git/config", f"[remote]\n\turl = https://x:{SECRET}@git.example\n")
    link(home.root / "bin", "dotfiles/bin")
    home.path.append(home.root / "bin")
    activate(home, monkeypatch)

    policy = sandbox_policy(repo)
    assert set(policy.exposed) == {home.root / "bin", dotfiles / "bin"}
    out = sandboxed(repo).run_command(
        f"greet; ~/bin/greet; {home.root}/bin/greet; cat {dotfiles}/secrets.env; "
        f"{GREP_SECRET} {home.root}"
    )
    assert out.count("GREET-RAN") == 2 and SECRET not in out  # ~ inside is the scratch home


@pytest.mark.slow
@needs_bwrap
def test_links_a_command_writes_into_a_path_folder_widen_nothing_for_the_next_run(
    home: Home, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(home.root / ".local" / "bin" / "mytool", 'echo "MYTOOL-RAN"')
    home.path += [repo / ".venv" / "bin", home.root / ".local" / "bin"]
    (repo / ".venv" / "bin").mkdir(parents=True)
    activate(home, monkeypatch)
    before = sandbox_policy(repo)

    out = sandboxed(repo).run_command(
        f"ln -s ../../../.. .venv/bin/up; ln -s {home.root}/.ssh .venv/bin/ssh; "
        f"printf '#!{home.root}/.aws/x\\n' > .venv/bin/s; chmod +x .venv/bin/s; "
        f"ln -s {home.root} {home.root}/.local/bin/h; echo PLANTED"
    )
    assert "PLANTED" in out and "Read-only file system" in out  # ~/.local/bin: read-only
    assert (repo / ".venv" / "bin" / "up").is_symlink()

    assert sandbox_policy(repo) == before
    out = sandboxed(repo).run_command(
        f"cat .venv/bin/up/.ssh/id_ed25519 {home.root}/.aws/credentials; {GREP_SECRET} {home.root}"
    )
    assert SECRET not in out


def test_a_layout_link_leading_out_of_its_layout_is_not_followed(
    home: Home, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a known layout a link is believed only where it stays in that layout (pyenv's
    `versions/proj` link to an environment, sdkman's `current`)."""
    install_pyenv(home)
    link(home.root / ".pyenv" / "versions" / "home", home.root)
    link(home.root / ".pyenv" / "versions" / "dotfiles", home.root / "dotfiles")
    (home.root / "dotfiles" / "bin").mkdir(parents=True)
    activate(home, monkeypatch)
    policy = sandbox_policy(repo)
    exposed = {str(p.relative_to(home.root)) for p in policy.exposed}
    assert ".pyenv/versions/proj/bin" in exposed and ".pyenv/versions/proj/pyvenv.cfg" in exposed
    assert not [p for p in exposed if "versions/home" in p or "dotfiles" in p]
    assert_exposes_no_home_and_nothing_of_the_repository(policy)


def test_a_path_folder_that_is_a_home_or_holds_one_is_not_exposed(
    home: Home, repo: Path, tmp_path: Path
) -> None:
    other = text(home.root / "old-home" / ".ssh" / "id_rsa", f"{SECRET}\n").parent.parent
    environ = {**home.environ(), "PATH": f"{home.root}:{other}:{tmp_path}:{BASE_PATH}"}
    policy = sandbox_policy(repo, environ=environ)
    assert policy.exposed == ()


# A property: whatever links and `#!` lines the PATH folders hold, in the repository or in the
# home, the exposed set is the same.
TARGETS = st.sampled_from(["..", "../..", "../../..", "../../../..", "../../../../..", "/",
                           "HOME", "HOME/.ssh", "HOME/dotfiles/bin", "HOME/.pyenv", "/run",
                           "REPO", "REPO/.venv"])  # fmt: skip
PLANTS = st.lists(st.tuples(st.sampled_from(["link", "#!"]), TARGETS), max_size=6)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(venv=PLANTS, local=PLANTS, dotfiles=PLANTS)
def test_what_a_path_folder_holds_never_changes_what_is_exposed(venv, local, dotfiles) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        home = Home(Path(scratch).resolve() / "home")
        repo = home.root / "src" / "project"
        install_pyenv(home)
        folders = [repo / ".venv" / "bin", home.root / ".local" / "bin",
                   home.root / "dotfiles" / "bin"]  # fmt: skip
        for path in folders:
            path.mkdir(parents=True, exist_ok=True)
        link(home.root / "bin", "dotfiles/bin")
        home.path += [*folders[:2], home.root / "bin"]
        environ = home.environ()
        before = sandbox_policy(repo, environ=environ, homes=[home.root])
        for path, plants in zip(folders, (venv, local, dotfiles), strict=True):
            for i, (kind, target) in enumerate(plants):
                where = target.replace("HOME", str(home.root)).replace("REPO", str(repo))
                if kind == "link":
                    link(path / f"p{i}", where)
                else:
                    script(path / f"p{i}", "", f"{where}/python")
        after = sandbox_policy(repo, environ=environ, homes=[home.root])
        assert after == before
        assert_exposes_no_home_and_nothing_of_the_repository(after)


# Properties of the fast helpers toolchain_folders stands on: each agrees with what it
# replaced (pathlib's containment test, glob.glob) wherever toolchain_folders uses it.
SEGMENTS = st.lists(st.sampled_from(["a", "b", "bc", "a.b", "b-c", ".", "..", ""]), max_size=5)


ROOTS = st.sampled_from(["/", "//", "///"])  # "//" is a root of its own to pathlib


@given(root=ROOTS, parts=SEGMENTS, other_root=ROOTS, other_parts=SEGMENTS)
def test_inside_agrees_with_pathlib_on_absolute_paths(
    root: str, parts: list[str], other_root: str, other_parts: list[str]
) -> None:
    path = PurePosixPath(root + "/".join(parts))
    text = str(path)
    # another path, and every cut and extension of this one's text ("/a/b" against "/a/bc")
    cuts = [text[:n] for n in range(1, len(text))]
    folders = [other_root + "/".join(other_parts), f"{text}c", f"{text}/c", *cuts]
    for folder in map(PurePosixPath, folders):
        assert sandbox._inside(text, str(folder)) == path.is_relative_to(folder), folder


# The layouts' patterns, two of each shape (where the wildcards are; a literal pattern only
# tests that a path exists), and the paths a tree is made of: what these patterns would match,
# with names a wildcard takes or leaves (".dot", "a[b]"), and what lies on their way.
SHAPES: dict[tuple[bool, ...], list[str]] = {}
for _pattern in sorted({p for layout in sandbox._LAYOUTS.values()
                        for p in (*layout.parts, *layout.homes)} - {"."}):  # fmt: skip
    SHAPES.setdefault(tuple(map(glob.has_magic, _pattern.split("/"))), []).append(_pattern)
GLOB_PATTERNS = [p for patterns in SHAPES.values() for p in patterns[:2]]
WILD = ["3.12", ".dot", "a[b]", "x-conda-linux-gnu", "layout.v1", "go1"]
TREE_PATHS = sorted(
    {
        "/".join(parts[:n])
        for p in GLOB_PATTERNS
        for w in WILD
        for parts in [p.replace("*", w).split("/")]
        for n in range(1, len(parts) + 1)
    }
)
ENTRY = st.tuples(st.sampled_from(TREE_PATHS), st.sampled_from(["dir", "file", "link-up",
                                                                "link-missing"]))  # fmt: skip


@given(entries=st.lists(ENTRY, max_size=12), top=st.sampled_from(["top", "t[o]p", ".t*p"]))
def test_the_disks_glob_agrees_with_glob_on_every_layout_pattern(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str]], top: str
) -> None:
    folder = tmp_path_factory.mktemp("glob").resolve() / top
    folder.mkdir()
    for rel, kind in entries:
        path = folder / rel
        if os.path.lexists(path):
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                path.mkdir()
            elif kind == "file":
                path.write_text("")
            else:
                path.symlink_to(".." if kind == "link-up" else "missing")
        except OSError:  # a file on the way
            continue
    disk = sandbox._Disk()
    for pattern in GLOB_PATTERNS:
        expected = sorted(glob.glob(os.path.join(glob.escape(str(folder)), pattern)))
        assert disk.glob(str(folder), pattern) == expected, pattern


# ------------------------------------------------------------- editable installs
@pytest.mark.slow
@needs_bwrap
def test_an_editable_install_from_the_hidden_home_fails_and_the_note_names_its_folder(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv the user exposed, with `pip install -e` of a src-layout project kept in
    the home: its `.pth` points into the hidden home, so the import fails with no path in the
    output; the note names the folder and --sandbox-read, which then makes it work."""
    project = home.root / "work" / "tinypkg"
    text(project / "pyproject.toml", '[build-system]\nrequires = ["setuptools>=64"]\n'
         'build-backend = "setuptools.build_meta"\n\n[project]\nname = "tinypkg"\n'
         'version = "0.1"\n')  # fmt: skip
    text(project / "src" / "tinypkg" / "__init__.py", "print('TINYPKG-IMPORTED')\n")
    venv = home.root / "venvs" / "tiny"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # offline: the tests' own pip and setuptools build it, into the venv's prefix
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--prefix", str(venv), "-e", str(project)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import tinypkg"], capture_output=True).returncode == 0
    repo = text(tmp_path / "repo" / "app.py", "print('hi')\n").parent
    activate(home, monkeypatch)
    # the interpreter the venv links to, wherever it is installed (the real home, say)
    base = Path(os.path.realpath(sys.base_prefix))
    command = f"{python} -c 'import tinypkg'"

    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap",
                                sandbox_read=[venv, base])  # fmt: skip
    out = tools.run_command(command)
    assert "No module named 'tinypkg'" in out and "TINYPKG-IMPORTED" not in out
    assert "tinypkg is an editable install of ~/work/tinypkg/src (~/venvs/tiny/lib/" in out
    assert "which is hidden" in out and "--sandbox-read" in out

    exposed = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap",
                                  sandbox_read=[venv, base, project / "src"])  # fmt: skip
    assert "TINYPKG-IMPORTED" in exposed.run_command(command)  # what the note says works


@pytest.mark.slow
@needs_bwrap
@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no /usr/bin/python3")
def test_a_pth_file_in_the_repository_tells_nothing_of_the_hidden_home(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository is writable by the commands themselves: a `.pth` planted in its
    virtualenv must not turn the note into a way to learn what the hidden home holds."""
    (home.root / "secret" / "probe").mkdir(parents=True)
    repo = text(tmp_path / "repo" / "app.py", "print('hi')\n").parent
    site = repo / ".venv" / "lib" / "python3.11" / "site-packages"
    text(site / "planted.pth", f"{home.root / 'secret'}\n")
    activate(home, monkeypatch)
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="bwrap")

    out = tools.run_command("/usr/bin/python3 -c 'import probe'")

    assert "No module named 'probe'" in out
    assert "editable install" not in out and "secret" not in out


@pytest.mark.slow
@needs_bwrap
@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no /usr/bin/python3")
def test_as_an_unprivileged_user_a_planted_pth_file_tells_nothing_either() -> None:
    """The same, with toy_agent run as nobody (setpriv), as most people run it."""
    with nobody_folder() as folder:
        home = folder / "home"
        (home / "secret" / "probe").mkdir(parents=True)
        repo = text(home / "src" / "project" / "app.py", "print('hi')\n").parent
        text(repo / ".venv" / "lib" / "python3.11" / "site-packages" / "planted.pth",
             f"{home / 'secret'}\n")  # fmt: skip
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(folder)], check=True)
        code = ("import sys\nfrom toy_agent.tools import CodeRepositoryTools\n"
                "tools = CodeRepositoryTools(sys.argv[1], allow_commands=True, sandbox='bwrap')\n"
                "print(tools.run_command(sys.argv[2]))")  # fmt: skip
        done = run_unprivileged(code, str(repo), "/usr/bin/python3 -c 'import probe'",
                                cwd=folder, env={"HOME": str(home)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "No module named 'probe'" in done.stdout
    assert "editable install" not in done.stdout and "secret" not in done.stdout
