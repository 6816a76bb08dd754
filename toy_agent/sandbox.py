"""Where run_command's processes run, what they can touch, and how long they live.

With bubblewrap (`bwrap`) a command sees the whole filesystem read-only except the repository
and a private /tmp; the user's home folders are hidden under an empty read-only tmpfs (HOME
points at a scratch folder in /tmp); /run and its daemon sockets are hidden too unless the
network is allowed; and it gets fresh namespaces: no network (not even the host's loopback),
and its own PID namespace, so every process it started dies with it, `setsid`, `nohup` and
double forks included. Sandboxed or not, the command's environment holds no secrets
(toy_agent.environment.child_environment) and its process group is killed when it ends, times
out, or the agent is interrupted or exits.
"""

from __future__ import annotations

import atexit
import contextlib
import fnmatch
import functools
import glob
import itertools
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "bwrap", "off")
INSTALL_HINT = (
    "install the bubblewrap package (Debian/Ubuntu: apt-get install bubblewrap; "
    "Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap)"
)
SCRATCH_HOME = "/tmp/home"  # HOME inside the sandbox: writable, empty, gone afterwards
PROBE_TIMEOUT = 10
# Paths the sandboxed command should not follow into the hidden home or /run.
_HOST_PATH_VARIABLES = frozenset(
    {"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
     "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "TMPDIR"}
)  # fmt: skip
# What a command prints when the sandbox refused it (EROFS, no route, no DNS).
_REFUSALS = (
    "Read-only file system", "Network is unreachable", "Temporary failure in name resolution",
    "Could not resolve host", "Name or service not known", "No address associated with hostname",
)  # fmt: skip


class SandboxUnavailable(Exception):
    """bubblewrap was required but is missing or cannot create its namespaces here."""


# ------------------------------------------------------------------------------- availability
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox commands here, or None when it works."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap (bwrap) is not on PATH: {INSTALL_HINT}"
    return _probe(bwrap)


# The command holds no privilege. bwrap leaves a root caller's command every capability, so
# each run drops them all (the bounding set too: exec of a setuid or file-capability program
# regains none) in a user namespace of its own, entered as an unprivileged uid when toy_agent
# runs as root (the namespace maps it back to root: what the command writes in the repository
# is owned by root outside, like the agent's own writes). Where bwrap can, no nested user
# namespace either (--disable-userns, bwrap 0.8+), so not even a namespace of its own gives
# the command a capability.
UNPRIVILEGED_ID = 65534  # nobody/nogroup: the command's uid and gid inside when run as root
# The probe's command: fails (exit 3) unless the command holds no capability at all.
_NO_CAPABILITIES = (
    "while read -r k v; do case $k in CapInh:|CapPrm:|CapEff:|CapBnd:|CapAmb:) "
    '[ "$v" = 0000000000000000 ] || { echo "$k $v"; exit 3; };; esac; done < /proc/self/status'
)


@functools.cache
def privilege_options(bwrap: str) -> tuple[str, ...]:
    """bwrap's options that take every privilege from the command: its own user namespace, an
    unprivileged uid when this process is root, no capabilities, no nested user namespace
    where this bwrap can refuse one. The probe runs with the same options."""
    nobody = str(UNPRIVILEGED_ID)
    ids = ["--uid", nobody, "--gid", nobody] if os.geteuid() == 0 else []
    nested = ["--disable-userns"] if _bwrap_knows(bwrap, "--disable-userns") else []
    return ("--unshare-user", *nested, *ids, "--cap-drop", "ALL")


def _bwrap_knows(bwrap: str, option: str) -> bool:
    try:
        done = subprocess.run([bwrap, "--help"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in done.stdout


@functools.cache
def _probe(bwrap: str) -> str | None:
    """Run a command with the namespaces and privilege options run_command uses, once per
    bwrap binary, and check from inside that it holds no capability: bwrap is often installed
    where user namespaces are disabled (containers, hardened kernels, Ubuntu 24.04's AppArmor
    rule), and a sandbox that left the command a capability would not be one."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
            *privilege_options(bwrap), "--die-with-parent", "--", "/bin/sh", "-c",
            _NO_CAPABILITIES]  # fmt: skip
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PROBE_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} could not be run: {exc}"
    if done.returncode == 0:
        return None
    if done.returncode == 3:
        held = done.stdout.strip()
        return f"{bwrap} leaves the command capabilities here ({held}): it is no sandbox"
    detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return (
        f"{bwrap} cannot create its namespaces here ({detail}): user namespaces are probably "
        "disabled (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone=1, or "
        "on Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0)"
    )


def resolve_sandbox(mode: str, *, warn: bool = True) -> str:
    """The sandbox in force for `mode`: "bwrap" or "off". "bwrap" raises SandboxUnavailable
    when bubblewrap does not work; "auto" then falls back to "off" with one warning, and the
    commands ask (Permissions.for_tools): the user did not choose to go without."""
    if mode not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}: {mode!r}")
    if mode == "off":
        return "off"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if mode == "bwrap":
        raise SandboxUnavailable(problem)
    if warn:
        logger.warning(
            "run_command is NOT sandboxed (it could write anywhere you can, read your home "
            "folder and use the network), so each command asks first (refused where no one "
            "can answer): %s; pass --sandbox off to run them without asking",
            problem,
        )
    return "off"


# ------------------------------------------------------------------------------- the sandbox
# What of an install prefix its programs need: executables, libraries, headers, data. Never
# the prefix's own top-level files or its `etc`, where installers keep settings and tokens
# (nvm's etc/npmrc, a pyenv version's or a virtualenv's pip.conf, a conda environment's
# etc/conda/activate.d, ~/.cargo/config.toml).
_PREFIX = ("bin", "sbin", "lib", "lib32", "lib64", "libexec", "include", "share")
_VENV = (*_PREFIX, "pyvenv.cfg")  # a virtualenv's Python finds its packages through pyvenv.cfg
_CONDA = (*_PREFIX, "conda-meta", "ssl", "*-conda-linux-gnu")  # package records, CA bundle
_JDK = (*_PREFIX, "conf", "jmods", "legal", "release", "jre", "boot", "init.d")  # and Maven's
_GOROOT = ("bin", "pkg", "src", "lib", "misc", "api", "VERSION", "go.env")


def _under(base: str, parts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{base}/{part}" for part in parts)


def _version_manager(name: str) -> tuple[str, ...]:
    """pyenv and its kin: the manager, its shims, plugins and hooks, the global `version`
    file its shims read, and what runs of each installed version (pyenv-virtualenv's too)."""
    return ("bin", "libexec", "shims", "plugins", f"{name}.d", "version",
            *_under("versions/*", _VENV), *_under("versions/*/envs/*", _VENV))  # fmt: skip


@dataclass(frozen=True)
class _Layout:
    """A toolchain as its installer lays it out. It is exposed when a PATH folder lies in it,
    one of its variables names it, or a toolchain in use implies it; then only its `parts`."""

    homes: tuple[str, ...]  # where it is installed, relative to a home folder (globs)
    variables: tuple[str, ...] = ()  # the variables that name where it is
    parts: tuple[str, ...] = ("bin",)  # what its programs need, relative to it (globs)
    marker: str = ""  # what it always holds (a Go root's src/runtime: GOPATH has none)
    implies: tuple[str, ...] = ()  # other toolchains its programs run
    exported: bool = False  # found through $HOME: its variable is set inside the sandbox


_LAYOUTS = {
    "pyenv": _Layout((".pyenv",), ("PYENV_ROOT",), _version_manager("pyenv"), exported=True),
    "rbenv": _Layout((".rbenv",), ("RBENV_ROOT",), _version_manager("rbenv"), exported=True),
    "nodenv": _Layout((".nodenv",), ("NODENV_ROOT",), _version_manager("nodenv"),
                      exported=True),
    "nvm": _Layout((".nvm",), ("NVM_DIR",), ("nvm.sh", "nvm-exec", "alias",
                   *_under("versions/node/*", _PREFIX), *_under("versions/io.js/*", _PREFIX)),
                   exported=True),
    "cargo": _Layout((".cargo",), ("CARGO_HOME",), ("bin",), implies=("rustup",)),
    "rustup": _Layout((".rustup",), ("RUSTUP_HOME",), ("toolchains", "settings.toml"),
                      exported=True),
    "conda": _Layout(("miniconda3", "miniconda", "anaconda3", "miniforge3", "mambaforge",
                      "micromamba", ".conda"), ("CONDA_PREFIX", "MAMBA_ROOT_PREFIX"),
                     ("condabin", *_CONDA, *_under("envs/*", _CONDA))),
    "uv-python": _Layout((".local/share/uv/python",), ("UV_PYTHON_INSTALL_DIR",),
                         _under("*", _PREFIX), exported=True),
    "uv-tools": _Layout((".local/share/uv/tools",), ("UV_TOOL_DIR",), _under("*", _VENV)),
    "pipx": _Layout((".local/share/pipx", ".local/pipx"), ("PIPX_HOME",),
                    (*_under("venvs/*", _VENV), *_under("shared", _VENV))),
    "poetry": _Layout((".local/share/pypoetry",), ("POETRY_HOME",), _under("venv", _VENV)),
    "local": _Layout((".local",), (), ("bin", "lib"),  # not share: keyrings, histories
                     implies=("uv-python", "uv-tools", "pipx", "poetry")),
    "virtualenv": _Layout((), ("VIRTUAL_ENV",), _VENV),
    "sdkman": _Layout((".sdkman",), ("SDKMAN_DIR",), _under("candidates/*/*", _JDK)),
    "java": _Layout((), ("JAVA_HOME",), _JDK),
    "volta": _Layout((".volta",), ("VOLTA_HOME",), ("bin", "layout.v*", "tools/user",
                     "tools/shared", *_under("tools/image/*/*", _PREFIX)), exported=True),
    "bun": _Layout((".bun",), ("BUN_INSTALL",), ("bin", "install/global"), exported=True),
    "pnpm": _Layout((".local/share/pnpm",), ("PNPM_HOME",), (".",), exported=True),
    "go": _Layout(("go",), ("GOPATH",), ("bin",)),  # not src: GOPATH/src is your own code
    "goroot": _Layout(("sdk/go*", ".go", "go", ".local/go"), ("GOROOT",), _GOROOT,
                      marker="src/runtime"),
    "asdf": _Layout((".asdf",), ("ASDF_DATA_DIR",), ("bin", "lib", "libexec", "shims",
                    "plugins", "asdf.sh", *_under("installs/*/*", _PREFIX)), exported=True),
    "mise": _Layout((".local/share/mise",), ("MISE_DATA_DIR",),
                    ("shims", *_under("installs/*/*", _PREFIX)), exported=True),
    "pulumi": _Layout((".pulumi",), ("PULUMI_HOME",), ("bin", "plugins")),
    "dotnet": _Layout((".dotnet",), ("DOTNET_ROOT",), ("dotnet", "host", "sdk", "shared",
                      "packs", "templates", "sdk-manifests", "tools")),
}  # fmt: skip
# The variables that say where the user's toolchains are (read here, and kept in commands'
# environments).
_TOOL_HOME_VARIABLES = tuple(dict.fromkeys(v for layout in _LAYOUTS.values()
                                           for v in layout.variables))  # fmt: skip
# Tools that find their install through $HOME, which the sandbox points elsewhere: each is
# told where it is, when that folder is exposed and the user has not said so already.
_HOME_DEFAULTS = {home: layout.variables[0] for layout in _LAYOUTS.values()
                  if layout.exported for home in layout.homes}  # fmt: skip
# A PATH folder `PREFIX/bin` outside the known layouts: what marks PREFIX as an install (a
# virtualenv, a conda environment, a Node prefix such as npm's `~/.npm-global`), and what of
# it runs. Any other PATH folder is exposed alone, never its parent (`~/dotfiles`).
_PREFIX_MARKERS = (("pyvenv.cfg", _VENV), ("conda-meta", _CONDA), ("lib/node_modules", _PREFIX))
# A folder holding any of these is a home folder, or above one: never exposed.
_HOME_MARKERS = (".ssh", ".gnupg", ".aws", ".config", ".netrc", ".bash_history", ".kube")
# Files that hold credentials rather than tools, covered with /dev/null (which bwrap mounts
# nodev: reading one fails): at the top of any exposed folder, and in a conda environment's
# package records (the variables it stores, the commands that made it with their tokens).
_CREDENTIAL_FILES = ("credentials", "credentials.toml", "credentials.json", ".credentials.json",
                     ".netrc", ".npmrc", ".pypirc", ".git-credentials", "pip.conf")  # fmt: skip
_SECRETS_IN = {"conda-meta": ("state", "history")}
_DOCUMENTS = ("README*", "LICENSE*", "CHANGELOG*", "NOTICE*", "COPYING*")  # in a Node prefix


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed command may see, decided once from the user's inputs (the repository
    path, the environment's HOME and PATH, --sandbox-read, --sandbox-network) before any
    command runs. Nothing in the repository adds a mount: a `.git` file that names a folder
    is believed only when that folder is a git directory that names this repository back."""

    repo: Path
    network: bool = False
    hidden: tuple[Path, ...] = ()  # the home folders and /run: empty read-only tmpfs
    exposed: tuple[Path, ...] = ()  # read-only inside the hidden ones: tools, --sandbox-read
    git: tuple[Path, ...] = ()  # the repository's git folder or file: read-only
    outside_git: tuple[Path, ...] = ()  # a worktree's or submodule's git folder elsewhere
    masked: tuple[Path, ...] = ()  # credential files inside exposed folders

    def argv(self) -> list[str]:
        """bwrap and its options, up to the `--` before the command.

        Mounts are made parents first, so a repository inside the home folder or inside /tmp
        is bound on top of the tmpfs that hides its parent, and .git on top of the repository;
        the hiding tmpfs are then made read-only (not recursively: what is bound below keeps
        its own mode)."""
        hidden = [p for p in self.hidden if p != self.repo]
        mounts = [(p, ["--tmpfs", str(p)]) for p in [Path("/tmp"), *hidden]]
        mounts.append((self.repo, ["--bind", str(self.repo), str(self.repo)]))
        for path in (*self.exposed, *self.outside_git, *self.git):
            mounts.append((path, ["--ro-bind", str(path), str(path)]))
        bwrap = shutil.which("bwrap") or "bwrap"
        argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for _, options in sorted(mounts, key=lambda mount: len(mount[0].parts)):
            argv += options
        for path in self.masked:
            argv += ["--ro-bind", "/dev/null", str(path)]
        argv += ["--dir", SCRATCH_HOME]
        for path in hidden:
            argv += ["--remount-ro", str(path)]
        argv += ["--unshare-all", *(["--share-net"] if self.network else [])]
        argv += privilege_options(bwrap)
        return [*argv, "--die-with-parent", "--new-session", "--chdir", str(self.repo), "--"]

    def describe(self) -> str:
        """One line for --list-tools, the summary and the trajectory."""
        hidden = ", ".join(_tilde(p) for p in self.hidden) or "nothing"
        exposed = _listing(self.exposed)
        reads = f"; reads (read-only) {exposed}" if exposed else ""
        network = "network" if self.network else "no network"
        return f"bwrap (hides {hidden}{reads}; .git read-only; {network})"

    def hidden_folder_of(self, path: str) -> Path | None:
        """The hidden folder that hides `path` (an absolute path a command named), if any."""
        try:
            target = Path(path)
        except ValueError:
            return None
        if not target.is_absolute() or target.is_relative_to(self.repo):
            return None
        if any(target.is_relative_to(p) for p in (*self.exposed, *self.outside_git)):
            return None
        return next((h for h in self.hidden if target.is_relative_to(h)), None)


def sandbox_policy(
    repo: Path,
    *,
    network: bool = False,
    read: Iterable[str | Path] = (),
    homes: Iterable[Path] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SandboxPolicy:
    """The policy for commands in `repo`: see SandboxPolicy. `read`: folders the user exposes
    (read-only) with --sandbox-read; `homes` and `environ` default to this process's."""
    environ = os.environ if environ is None else environ
    repo = repo.resolve()
    hidden = _hidden_folders(network, homes, environ)
    exposed = _outermost(p for p in [*toolchain_folders(environ, hidden, repo), *_existing(read)]
                         if p != repo)  # fmt: skip
    inner, outer = _git_paths(repo)
    return SandboxPolicy(repo, network, tuple(hidden), tuple(exposed), inner, outer,
                         tuple(_credential_files(exposed)))  # fmt: skip


def toolchain_folders(
    environ: Mapping[str, str], hidden: Iterable[Path], repo: Path | None = None
) -> list[Path]:
    """The paths inside the hidden folders that the user's own programs need, from the user's
    PATH and toolchain variables (PYENV_ROOT, VIRTUAL_ENV, ...) and the known install layouts
    (_LAYOUTS), never from what a folder holds: no link or `#!` line is followed, so nothing
    a command writes into a PATH folder (a repository's `.venv/bin`) widens the next run.

    A PATH folder is exposed itself, never its parent; in a known layout, or at the top of a
    recognisable install (`PREFIX/bin` of a virtualenv), what of it runs (its `bin`, `lib`,
    `include`, `share`, not its settings). Never a home folder or a folder above a hidden one
    or anything in the repository; a path the user's layout reaches through a link is exposed
    where it is named and where it leads, when it leads into the layout itself."""
    hidden = list(hidden)
    homes = [h for h in hidden if not h.is_relative_to("/run")]
    found: dict[Path, Path | None] = {}  # what to expose -> the install it belongs to

    def allowed(path: Path) -> bool:
        return not any(h.is_relative_to(path) for h in hidden) and not (
            repo is not None and path.is_relative_to(repo)
        )

    def expose(path: Path, root: Path | None = None, real_root: Path | None = None) -> None:
        real = _real_path(path)
        if real is None or not allowed(real) or (real_root and not real.is_relative_to(real_root)):
            return
        for place, install in {path: root, real: real_root}.items():
            if allowed(place) and any(place.is_relative_to(h) for h in hidden):
                found.setdefault(place, install)

    on_path = [(Path(os.path.normpath(e)), r) for e in environ.get("PATH", "").split(os.pathsep)
               if (r := _real_dir(e)) is not None]  # fmt: skip
    roots = list(_layout_roots(environ, homes))
    used = [r for r in roots if r.home is None
            or any(_within(p, real, r.path, r.real) for p, real in on_path)]  # fmt: skip
    implied = {(other, r.home) for r in used for other in _LAYOUTS[r.name].implies}
    used += [r for r in roots if (r.name, r.home) in implied]
    for root in used:
        if allowed(root.path) and allowed(root.real):
            for part in _LAYOUTS[root.name].parts:
                for path in _glob(root.path, part):
                    expose(path, root.path, root.real)
    for lexical, real in on_path:
        if any(_within(r.path, r.real, lexical, real) for r in roots) or _is_home(real, hidden):
            continue  # a layout's root (or above): the layout says what of it runs
        expose(lexical)
        prefix = real.parent
        kind = next((parts for marker, parts in _PREFIX_MARKERS
                     if (prefix / marker).exists()), None)  # fmt: skip
        if real.name in ("bin", "sbin") and kind is not None and not _is_home(prefix, hidden):
            for part in kind:
                for path in _glob(prefix, part):
                    expose(path, prefix, prefix)
    return _outermost(_whole_folders(found, hidden))


def _whole_folders(found: dict[Path, Path | None], hidden: list[Path]) -> list[Path]:
    """The paths of `found`, with a folder standing for its entries wherever each of them is
    exposed (or is a README or LICENSE) and none holds a file to cover, inside the install
    they belong to (never the install itself, where settings may come later): each mount
    costs every command time, as bwrap reads the mount table again for each. A pyenv
    `versions` folder whose Pythons hold nothing but bin, include, lib and share is one."""
    found = dict(found)
    while True:
        siblings: dict[Path, list[Path]] = {}
        for path, install in found.items():
            if install is not None and path.parent != install and path.is_relative_to(install):
                siblings.setdefault(path.parent, []).append(path)
        whole = [(folder, paths) for folder, paths in siblings.items()
                 if len({found[p] for p in paths}) == 1 and not _is_home(folder, hidden)
                 and _only(folder, {p.name for p in paths})
                 and not _credential_files(paths)]  # fmt: skip
        if not whole:
            return list(found)
        for folder, paths in whole:
            found[folder] = found[paths[0]]
            for path in paths:
                del found[path]


class _Root(NamedTuple):
    """Where a known layout is installed: as named and really, and the home folder it was
    found in by its usual place (None: a variable named it, so it is in use)."""

    name: str
    path: Path
    real: Path
    home: Path | None


def _layout_roots(environ: Mapping[str, str], homes: list[Path]) -> Iterator[_Root]:
    for name, layout in _LAYOUTS.items():
        values = [environ.get(variable, "") for variable in layout.variables]
        found: list[tuple[Path, Path | None]] = [
            (Path(os.path.normpath(v)), None)
            for value in values for v in value.split(os.pathsep) if os.path.isabs(v)
        ]  # fmt: skip
        for home in homes:
            for pattern in layout.homes:
                found += [(path, home) for path in _glob(home, pattern)]
        for path, where in found:
            real = _real_dir(str(path))
            if real is not None and (not layout.marker or (real / layout.marker).exists()):
                yield _Root(name, path, real, where)


def _only(folder: Path, names: set[str]) -> bool:
    """Whether `folder` holds nothing but `names` and documents."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return False
    return all(e in names or any(fnmatch.fnmatch(e, d) for d in _DOCUMENTS) for e in entries)


def _is_home(folder: Path, hidden: list[Path]) -> bool:
    """Whether `folder` is a hidden folder or looks like a home folder (~/.ssh in it)."""
    return folder in hidden or any((folder / name).exists() for name in _HOME_MARKERS)


def _within(path: Path, real: Path, folder: Path, real_folder: Path) -> bool:
    """Whether `path` is in `folder`, as named or really."""
    return path.is_relative_to(folder) or real.is_relative_to(real_folder)


def _glob(folder: Path, pattern: str) -> list[Path]:
    if pattern == ".":
        return [folder]
    return [Path(p) for p in sorted(glob.glob(os.path.join(glob.escape(str(folder)), pattern)))]


def _real_path(path: Path) -> Path | None:
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _credential_files(exposed: Iterable[Path]) -> list[Path]:
    """The files in exposed folders that hold credentials rather than tools: covered."""
    found = []
    for folder in exposed:
        for name in _SECRETS_IN.get(folder.name, _CREDENTIAL_FILES):
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(folder / name).st_mode):
                    found.append(folder / name)
    return sorted(found)


def _git_paths(repo: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The repository's own `.git` (a folder, or a worktree's or submodule's `.git` file),
    re-bound read-only, and the git folder outside the repository that such a file leads to,
    only when that folder names this repository back (a linked worktree's `gitdir` file, a
    submodule's core.worktree): a `.git` file alone, which anyone can write, decides nothing."""
    dot_git = repo / ".git"
    try:
        st = os.lstat(dot_git)
    except OSError:
        return (), ()
    if stat.S_ISDIR(st.st_mode):
        return (dot_git,), ()
    if not stat.S_ISREG(st.st_mode) or st.st_size > 4096:
        return (), ()
    try:
        text = dot_git.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return (dot_git,), ()
    if not text.startswith("gitdir:"):
        return (dot_git,), ()
    gitdir = (repo / text[7:].strip()).resolve()
    if gitdir.is_relative_to(repo) or not _names_back(gitdir, dot_git, repo):
        return (dot_git,), ()
    common = gitdir
    with contextlib.suppress(OSError, ValueError):
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    if not (common / "objects").is_dir() or not (common / "HEAD").is_file():
        return (dot_git,), ()
    return (dot_git,), tuple(_outermost([common, gitdir]))


def _names_back(gitdir: Path, dot_git: Path, repo: Path) -> bool:
    """Whether the git folder `gitdir` says its work tree is `repo`: git writes this when it
    makes a worktree (`gitdir` holds the path of its `.git` file) or a submodule
    (core.worktree in its config)."""
    with contextlib.suppress(OSError, ValueError):
        back = (gitdir / "gitdir").read_text(encoding="utf-8").strip()
        if Path(back).resolve() == dot_git.resolve():
            return True
    with contextlib.suppress(OSError, ValueError):
        for line in (gitdir / "config").read_text(encoding="utf-8").splitlines():
            key, _, value = line.strip().partition("=")
            if key.strip().lower() == "worktree" and value.strip():
                return (gitdir / value.strip()).resolve() == repo
    return False


def _hidden_folders(
    network: bool, homes: Iterable[Path] | None, environ: Mapping[str, str]
) -> list[Path]:
    """The user's home folders ($HOME and the password database's), /run/user (session bus,
    agents' sockets) and, without network, all of /run (Docker's, databases' and the system
    bus's sockets: a Unix socket is reachable through a read-only mount)."""
    if homes is None:
        homes = [Path(h) for h in (environ.get("HOME"), _passwd_home()) if h]
    folders = [*homes, Path("/run/user"), *([] if network else [Path("/run")])]
    found: set[Path] = set()
    for folder in folders:
        with contextlib.suppress(OSError):
            real = folder.resolve()
            if real != Path("/") and real.is_dir():
                found.add(real)
    return _outermost(found)


def _passwd_home() -> str | None:
    try:
        import pwd  # POSIX only, like bwrap

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return None


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """`paths` without those inside another of them, sorted."""
    found = set(paths)
    return sorted(p for p in found if found.isdisjoint(p.parents))


def _real_dir(path: str) -> Path | None:
    if not path or not os.path.isabs(path):
        return None
    try:
        real = Path(path).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return real if real.is_dir() else None


def _existing(paths: Iterable[str | Path]) -> list[Path]:
    """The folders and files of --sandbox-read, really."""
    return [real for p in paths if (real := _real_path(Path(os.path.expanduser(str(p)))))]


def _listing(paths: Iterable[Path]) -> str:
    """`paths` on one line, siblings under their folder: ~/.pyenv/versions/3.12/{bin,lib}."""
    siblings: dict[Path, list[str]] = {}
    for path in paths:
        siblings.setdefault(path.parent, []).append(path.name)
    return ", ".join(_tilde(folder / names[0]) if len(names) == 1
                     else f"{_tilde(folder)}/{{{','.join(names)}}}"
                     for folder, names in siblings.items())  # fmt: skip


def _tilde(path: Path) -> str:
    home = os.environ.get("HOME")
    if home and home != "/" and path.is_relative_to(home):
        return "~" + str(path)[len(home.rstrip("/")) :]
    return str(path)


def sandbox_environment(
    env: Mapping[str, str], policy: SandboxPolicy | None = None
) -> dict[str, str]:
    """`env` for a command inside the sandbox: HOME and TMPDIR in the private /tmp, no variable
    pointing into the hidden home or /run (XDG folders, agent sockets), and the variables that
    lead tools installed in the home to their exposed folders."""
    kept = {k: v for k, v in env.items() if k not in _HOST_PATH_VARIABLES}
    exposed = policy.exposed if policy is not None else ()
    for home in policy.hidden if policy is not None else ():
        for where, name in _HOME_DEFAULTS.items():
            folder = home / where
            if name not in kept and any(p.is_relative_to(folder) for p in exposed):
                kept[name] = str(folder)
    return {**kept, "HOME": SCRATCH_HOME, "TMPDIR": "/tmp"}


_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])(/[^\s:'\"`,;()]+)")
_MISSING = ("No such file", "not found", "cannot access", "can't open", "Permission denied")


def sandbox_note(
    policy: SandboxPolicy, output: str, exit_code: int | None, *, for_user: bool = False
) -> str | None:
    """What to tell the model (and, through it and the batch record, the user) when `output`
    looks like the sandbox refusing something: a write outside the repository, the network, a
    program or file under the hidden home (exit 126/127, "No such file" on such a path), or
    None when nothing points to the sandbox."""
    refused = any(refusal in output for refusal in _REFUSALS)
    hidden = sorted({_tilde(Path(m)) for m in _ABSOLUTE_PATH.findall(output)
                     if policy.hidden_folder_of(m) is not None})  # fmt: skip
    missing = exit_code in (126, 127) or (hidden and any(m in output for m in _MISSING))
    if not (refused or missing):
        return None
    exposed = _listing(policy.exposed)
    limits = "only the repository and /tmp are writable, the home folder is hidden (HOME is an "
    limits += "empty scratch folder" + (f"; readable: {exposed}" if exposed else "") + ")"
    limits += "" if policy.network else ", there is no network at all"
    verb = "is" if len(hidden) == 1 else "are"
    named = f" {', '.join(hidden[:5])} {verb} hidden." if hidden else ""
    named += "".join(f" {lead}, which is hidden." for lead in _leads_to_hidden(policy, output))
    if for_user:
        return (
            f"the command ran in the bubblewrap sandbox: {limits}.{named} Expose a folder "
            "read-only with --sandbox-read PATH, or run with --sandbox off."
        )
    return (
        f"[Note: commands run in a bubblewrap sandbox set by the user: {limits}, and "
        f"background processes end with the command.{named} This is not a fault to work "
        "around; do the task within these limits. If it needs a hidden program or folder, "
        "say so: the user can expose one read-only with --sandbox-read PATH.]"
    )


_NOT_FOUND = re.compile(r"([^\s:'\"`]+): (?:command )?not found")


def _leads_to_hidden(policy: SandboxPolicy, output: str) -> list[str]:
    """For each program `output` says was not found that is a link or script (on PATH, in
    the repository or an exposed folder) whose target or `#!` interpreter is hidden:
    "~/.local/bin/deploy leads to ~/deploy.sh". Read only to explain a failure; what is
    exposed never depends on it."""
    folders = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    leads = []
    for name in dict.fromkeys(_NOT_FOUND.findall(output)):
        if "/" in name:
            places = [policy.repo / name]  # an absolute `name` replaces the repository
        else:
            places = [folder / name for folder in (*folders, *policy.exposed)]
        for place in places:
            target = _program_target(place)
            if target is not None and policy.hidden_folder_of(str(target)) is not None:
                leads.append(f"{_tilde(place)} leads to {_tilde(target)}")
                break
    return leads[:5]


def _program_target(path: Path) -> Path | None:
    """Where the program at `path` really lives: its link's target, or its `#!` interpreter."""
    try:
        if path.is_symlink():
            return Path(os.path.realpath(path))
        with open(path, "rb") as f:
            first = f.read(256)
    except (OSError, ValueError):
        return None
    words = first[2:].split(b"\n", 1)[0].split() if first.startswith(b"#!") else []
    return Path(os.path.realpath(os.fsdecode(words[0]))) if words else None


# ------------------------------------------------------------------------------- lifetime
# An unsandboxed command's processes carry this variable, with a value of their own command's,
# so the ones that left its group, session and tree (`setsid` and a parent that exited) are
# still found: a process started after the command whose environment holds it.
COMMAND_MARKER = "TOY_AGENT_COMMAND"
_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")  # what the CLI turns into KeyboardInterrupt
_TREE_ROUNDS = 5  # walks of a command's processes: one may fork while they are walked


@dataclass(frozen=True)
class _Command:
    leader: int  # the process `start` started, leading its own session and group
    marker: str | None  # unsandboxed: the COMMAND_MARKER value its processes carry
    since: int  # when the leader started (clock ticks since boot, /proc/PID/stat)


_live: dict[int, _Command] = {}  # commands still running, by leader
_live_lock = threading.Lock()
_markers = itertools.count(1)


def command_marker() -> str:
    """A COMMAND_MARKER value no other command of this process carries."""
    return f"{os.getpid()}-{next(_markers)}"


@contextlib.contextmanager
def owned_process_group(
    start: Callable[[], subprocess.Popen[bytes]], *, marker: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The command `start` starts (a process leading its own session), killed with its
    process group when the block ends, however it ends (the command finished, timed out,
    Ctrl-C or SIGTERM raised KeyboardInterrupt), and at interpreter exit if the block never
    ends (a command running in a daemon thread). `marker` (unsandboxed, where no PID namespace
    holds the command): its COMMAND_MARKER value; every process in its session, below it or
    carrying the marker dies too (see kill_command).

    Ctrl-C, SIGTERM and SIGHUP wait from the fork until the command is registered: one that
    landed in between (inside Popen, after the fork) used to end the run with the command
    still running, in its own session, reparented to init."""
    _register_atexit()
    command = None
    try:
        with _stops_held():
            proc = start()
            command = _Command(proc.pid, marker, _start_time(proc.pid))
            with _live_lock:
                _live[proc.pid] = command
        yield proc
    finally:
        if command is not None:
            kill_command(command)
            proc.wait()
            with _live_lock:
                _live.pop(proc.pid, None)


@contextlib.contextmanager
def _stops_held() -> Iterator[None]:
    """The stop signals' Python handlers (default_int_handler, the CLI's) run when the block
    ends instead of inside it. Only the main thread is signalled, so only there is anything
    held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    previous: dict[int, Callable[[int, Any], Any]] = {}
    for name in _STOP_SIGNALS:
        signum = getattr(signal, name, None)
        handler = signal.getsignal(signum) if signum is not None else None
        if signum is not None and callable(handler):
            signal.signal(signum, lambda n, frame: held.append((n, frame)))
            previous[signum] = handler
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum, frame in held:
            previous[signum](signum, frame)  # KeyboardInterrupt, now that the kill is owed


def kill_command(command: _Command) -> None:
    """SIGKILL the process group the command's leader leads. Sandboxed, that is the outer
    bwrap; `--die-with-parent` then takes the sandbox's init down, and the kernel every
    process in its PID namespace. Unsandboxed (a marker), first every process in its session
    or group, below it, or started since it with its marker, walked in /proc until none is
    left: a `setsid` child has left the group, and its parent may have exited."""
    if command.marker is not None and os.path.isdir("/proc/self"):
        for _ in range(_TREE_ROUNDS):
            found = _processes_of(command)
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(command.leader, signal.SIGKILL)
        else:
            os.kill(command.leader, signal.SIGKILL)


def _processes_of(command: _Command) -> set[int]:
    """The command's live processes (no zombies): in its leader's session or group, started
    since it with its marker in their environment, and every process below one of these or
    below the leader."""
    children: dict[int, list[int]] = {}
    found: set[int] = set()
    marker = f"{COMMAND_MARKER}={command.marker}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(name)
        if fields is None or fields[0] == b"Z":
            continue
        pid, ppid, group, session, started = int(name), *map(int, fields[1:4]), int(fields[19])
        children.setdefault(ppid, []).append(pid)
        ours = command.leader in (group, session)
        if ours or (started >= command.since and marker in _environment(name)):
            found.add(pid)
    todo = [command.leader, *found]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(os.getpid())
    return found


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat's fields from the third (state) on, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split(None, 20)  # after "pid (comm) "
    return fields if len(fields) > 19 else None


def _start_time(pid: int) -> int:
    fields = _stat_fields(pid) if os.path.isdir("/proc/self") else None
    return int(fields[19]) if fields else 0


def _environment(pid: str) -> bytes:
    """The environment `pid` started with, NUL-separated with a NUL before the first entry
    too; empty when it cannot be read (another user's process)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0" + f.read()
    except OSError:
        return b""


@functools.cache
def _register_atexit() -> None:
    atexit.register(kill_live_groups)


def kill_live_groups() -> None:
    """Kill every command still running (a batch's Ctrl-C, the interpreter's exit)."""
    with _live_lock:
        live = list(_live.values())
    for command in live:
        kill_command(command)
