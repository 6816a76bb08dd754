"""Where run_command's processes run, what they can touch, and how long they live.

With bubblewrap (`bwrap`) a command sees the whole filesystem read-only except the repository
and a private /tmp; the user's home folders are hidden under an empty read-only tmpfs (HOME
points at a scratch folder in /tmp); /run and its daemon sockets are hidden too unless the
network is allowed; and it gets fresh namespaces: no network (not even the host's loopback),
and its own PID namespace, so every process it started dies with it, `setsid`, `nohup` and
double forks included. Sandboxed or not, the command's environment holds no secrets
(toy_agent.variables.child_environment) and its process group is killed when it ends, times
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
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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
# What a command prints when the sandbox refused it (EROFS, a folder holding git's files
# moved or removed, no route, no DNS).
_REFUSALS = (
    "Read-only file system", "Device or resource busy", "Network is unreachable",
    "Temporary failure in name resolution", "Could not resolve host", "Name or service not known",
    "No address associated with hostname",
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
    git: tuple[Path, ...] = ()  # git's paths inside the repository (GitGuard): read-only
    outside_git: tuple[Path, ...] = ()  # a worktree's or submodule's git folder elsewhere
    masked: tuple[Path, ...] = ()  # credential files inside exposed folders
    git_guard: GitGuard | None = field(default=None, compare=False)  # how `git` is mounted

    def argv(self) -> list[str]:
        """bwrap and its options, up to the `--` before the command.

        Mounts are made parents first, so a repository inside the home folder or inside /tmp
        is bound on top of the tmpfs that hides its parent, and .git on top of the repository;
        the hiding tmpfs are then made read-only (not recursively: what is bound below keeps
        its own mode)."""
        hidden = [p for p in self.hidden if p != self.repo]
        mounts = [(p, ["--tmpfs", str(p)]) for p in [Path("/tmp"), *hidden]]
        mounts.append((self.repo, ["--bind", str(self.repo), str(self.repo)]))
        git, pinned, empty_dirs, empty_files = (
            self.git_guard.mounts() if self.git_guard else (list(self.git), [], [], [])
        )
        for path in (*self.exposed, *self.outside_git, *git):
            mounts.append((path, ["--ro-bind", str(path), str(path)]))
        for path in pinned:  # see GitGuard.mounts
            mounts.append((path, ["--bind", str(path), str(path)]))
        for path in empty_dirs:
            mounts.append((path, ["--tmpfs", str(path)]))
        for path in empty_files:
            mounts.append((path, ["--ro-bind", "/dev/null", str(path)]))
        bwrap = shutil.which("bwrap") or "bwrap"
        argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for _, options in sorted(mounts, key=lambda mount: len(mount[0].parts)):
            argv += options
        for path in self.masked:
            argv += ["--ro-bind", "/dev/null", str(path)]
        argv += ["--dir", SCRATCH_HOME]
        for path in (*hidden, *empty_dirs):
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
    git: GitGuard | None = None,
) -> SandboxPolicy:
    """The policy for commands in `repo`: see SandboxPolicy. `read`: folders the user exposes
    (read-only) with --sandbox-read; `homes` and `environ` default to this process's; `git`:
    the repository's GitGuard, when the caller has one."""
    environ = os.environ if environ is None else environ
    repo = repo.resolve()
    hidden = _hidden_folders(network, homes, environ)
    exposed = _outermost(p for p in [*toolchain_folders(environ, hidden, repo), *_existing(read)]
                         if p != repo)  # fmt: skip
    git = GitGuard(repo) if git is None else git
    return SandboxPolicy(repo, network, tuple(hidden), tuple(exposed), git.read_only,
                         git.outside, tuple(_credential_files(exposed)), git)  # fmt: skip


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
    where it is named and where it leads, when it leads into the layout itself.

    Paths are strings here, as pathlib writes them (every run pays for this before its first
    command, and pathlib's containment test is slow), and the disk is read through a _Disk:
    each path resolved, listed or tested once."""
    disk = _Disk()
    hidden_ = [str(h) for h in hidden]
    homes = [h for h in hidden_ if not _inside(h, "/run")]
    repo_ = None if repo is None else str(repo)
    found: dict[str, str | None] = {}  # what to expose -> the install it belongs to

    def allowed(path: str) -> bool:
        return not any(_inside(h, path) for h in hidden_) and not (
            repo_ is not None and _inside(path, repo_)
        )

    def expose(path: str, root: str | None = None, real_root: str | None = None) -> None:
        real = disk.real(path)
        if (
            real is None
            or not allowed(real)
            or (real_root is not None and not _inside(real, real_root))
        ):
            return
        for place, install in {path: root, real: real_root}.items():
            if allowed(place) and any(_inside(place, h) for h in hidden_):
                found.setdefault(place, install)

    on_path = [(str(Path(os.path.normpath(e))), r) for e in environ.get("PATH", "")
               .split(os.pathsep) if (r := disk.real_dir(e)) is not None]  # fmt: skip
    roots = list(_layout_roots(environ, homes, disk))
    used = [r for r in roots if r.home is None
            or any(_within(p, real, r.path, r.real) for p, real in on_path)]  # fmt: skip
    implied = {(other, r.home) for r in used for other in _LAYOUTS[r.name].implies}
    used += [r for r in roots if (r.name, r.home) in implied]
    for name, path, real in dict.fromkeys((r.name, r.path, r.real) for r in used):
        if allowed(path) and allowed(real):  # a root found twice exposes the same twice
            for part in _LAYOUTS[name].parts:
                for found_path in disk.glob(path, part):
                    expose(found_path, path, real)
    for lexical, real in on_path:
        if any(_within(r.path, r.real, lexical, real) for r in roots) or disk.is_home(
            real, hidden_
        ):
            continue  # a layout's root (or above): the layout says what of it runs
        expose(lexical)
        prefix = os.path.dirname(real)
        kind = next((parts for marker, parts in _PREFIX_MARKERS
                     if disk.exists(_join(prefix, marker))), None)  # fmt: skip
        if (
            os.path.basename(real) in ("bin", "sbin")
            and kind is not None
            and not disk.is_home(prefix, hidden_)
        ):
            for part in kind:
                for path in disk.glob(prefix, part):
                    expose(path, prefix, prefix)
    kept = set(_whole_folders(found, hidden_, disk))
    return sorted(Path(p) for p in kept if kept.isdisjoint(_parents(p)))  # as _outermost


def _whole_folders(found: dict[str, str | None], hidden: list[str], disk: _Disk) -> list[str]:
    """The paths of `found`, with a folder standing for its entries wherever each of them is
    exposed (or is a README or LICENSE) and none holds a file to cover, inside the install
    they belong to (never the install itself, where settings may come later): each mount
    costs every command time, as bwrap reads the mount table again for each. A pyenv
    `versions` folder whose Pythons hold nothing but bin, include, lib and share is one."""
    found = dict(found)
    while True:
        siblings: dict[str, list[str]] = {}
        for path, install in found.items():
            parent = os.path.dirname(path)
            if install is not None and parent != install and _inside(path, install):
                siblings.setdefault(parent, []).append(path)
        whole = [(folder, paths) for folder, paths in siblings.items()
                 if len({found[p] for p in paths}) == 1 and not disk.is_home(folder, hidden)
                 and disk.only(folder, {os.path.basename(p) for p in paths})
                 and not any(map(disk.holds_credentials, paths))]  # fmt: skip
        if not whole:
            return list(found)
        for folder, paths in whole:
            found[folder] = found[paths[0]]
            for path in paths:
                del found[path]


def _inside(path: str, folder: str) -> bool:
    """PurePath(path).is_relative_to(folder) for absolute paths written as pathlib writes
    them (str of a Path), twenty times faster: `path` is `folder` or below it ("/a/b" is not
    in "/a/bc"), and every path is in "/", except those under pathlib's other root, "//"."""
    if path == folder:
        return True
    if folder.endswith("/"):  # a root: "/" or "//"
        return path.startswith(folder) and (folder == "//" or not path.startswith("//"))
    return path.startswith(folder) and path[len(folder)] == "/"


class _Root(NamedTuple):
    """Where a known layout is installed: as named and really, and the home folder it was
    found in by its usual place (None: a variable named it, so it is in use)."""

    name: str
    path: str
    real: str
    home: str | None


def _layout_roots(environ: Mapping[str, str], homes: list[str], disk: _Disk) -> Iterator[_Root]:
    for name, layout in _LAYOUTS.items():
        values = [environ.get(variable, "") for variable in layout.variables]
        found: list[tuple[str, str | None]] = [
            (str(Path(os.path.normpath(v))), None)
            for value in values for v in value.split(os.pathsep) if os.path.isabs(v)
        ]  # fmt: skip
        for home in homes:
            for pattern in layout.homes:
                found += [(path, home) for path in disk.glob(home, pattern)]
        for path, where in found:
            real = disk.real_dir(path)
            if real is not None and (not layout.marker or disk.exists(_join(real, layout.marker))):
                yield _Root(name, path, real, where)


def _parents(path: str) -> Iterator[str]:
    """Path(path).parents, as strings."""
    while (parent := os.path.dirname(path)) != path:
        yield parent
        path = parent


def _within(path: str, real: str, folder: str, real_folder: str) -> bool:
    """Whether `path` is in `folder`, as named or really."""
    return _inside(path, folder) or _inside(real, real_folder)


_DEEP = 64  # _Disk.real resolves a path with more components than this in one go


class _Disk:
    """The file system as one policy reads it, each path resolved, tested or listed once: a
    policy asks the same of a pyenv version's folders dozens of times. It lives for one call
    (see toolchain_folders): a later policy reads the disk as it is then. Paths are absolute
    strings as pathlib writes them."""

    def __init__(self) -> None:
        self._real: dict[str, str | None] = {"/": "/", "//": "/"}
        self._lexists: dict[str, bool] = {}
        self._modes: dict[str, int | None] = {}  # os.stat's st_mode, None where it failed
        self._entries: dict[str, list[tuple[str, bool]] | None] = {}
        self._homes: dict[str, bool] = {}
        self._credentials: dict[str, bool] = {}

    def real(self, path: str) -> str | None:
        """os.path.realpath(path, strict=True) (what Path.resolve(strict=True) returns), or
        None where that fails; from the folder's real path, known already, and one lstat
        when `path` is no link."""
        if path in self._real:
            return self._real[path]
        folder, name = os.path.split(path)
        real: str | None = None
        if name in ("", ".", "..") or folder == path or path.count("/") > _DEEP:
            real = _realpath(path)  # and a deep path whole: no recursion as deep as it
        elif (real_folder := self.real(folder)) is not None:
            candidate = _join(real_folder, name)
            try:
                st = os.lstat(candidate)
            except OSError:
                pass
            else:
                real = _realpath(candidate) if stat.S_ISLNK(st.st_mode) else candidate
        self._real[path] = real
        return real

    def real_dir(self, path: str) -> str | None:
        """Where the absolute `path` really leads when that is a folder."""
        if not path or not os.path.isabs(path):
            return None
        real = self.real(str(Path(path)))
        return real if real is not None and self.is_dir(real) else None

    def exists(self, path: str) -> bool:
        """Path.exists: through links; False where stat fails."""
        return self._mode(path) is not None

    def is_dir(self, path: str) -> bool:
        mode = self._mode(path)
        return mode is not None and stat.S_ISDIR(mode)

    def _mode(self, path: str) -> int | None:
        if path not in self._modes:
            try:
                self._modes[path] = os.stat(path).st_mode
            except (OSError, ValueError):
                self._modes[path] = None
        return self._modes[path]

    def lexists(self, path: str) -> bool:
        if path not in self._lexists:
            self._lexists[path] = os.path.lexists(path)
        return self._lexists[path]

    def entries(self, folder: str) -> list[tuple[str, bool]] | None:
        """`folder`'s entries in os.scandir's order, each with whether it is a folder
        (through a link, as glob tests it); None when it cannot be read."""
        if folder not in self._entries:
            self._entries[folder] = _entries(folder)
        return self._entries[folder]

    def glob(self, folder: str, pattern: str) -> list[str]:
        """sorted(glob.glob(os.path.join(glob.escape(folder), pattern))), and "." the folder
        itself: one component of `pattern` at a time, each folder listed once. As in glob, a
        wildcard does not match a leading dot unless it starts with one, a folder on the way
        is one through links, and a last component without a wildcard must exist."""
        if pattern == ".":
            return [folder]
        paths = [folder]
        parts = pattern.split("/")
        for i, part in enumerate(parts):
            if not glob.has_magic(part):
                paths = [_join(path, part) for path in paths]
                continue
            last, dots = i == len(parts) - 1, part.startswith(".")
            paths = [_join(path, name) for path in paths for name in fnmatch.filter(
                [name for name, is_dir in self.entries(path) or ()
                 if (last or is_dir) and (dots or not name.startswith("."))], part)]  # fmt: skip
        if not glob.has_magic(parts[-1]):
            paths = [path for path in paths if self.lexists(path)]
        return sorted(paths)

    def only(self, folder: str, names: set[str]) -> bool:
        """Whether `folder` holds nothing but `names` and documents."""
        entries = self.entries(folder)
        return entries is not None and all(
            e in names or any(fnmatch.fnmatch(e, d) for d in _DOCUMENTS) for e, _ in entries
        )

    def is_home(self, folder: str, hidden: list[str]) -> bool:
        """Whether `folder` is a hidden folder or looks like a home folder (~/.ssh in it)."""
        if folder not in self._homes:
            self._homes[folder] = folder in hidden or any(
                self.exists(_join(folder, name)) for name in _HOME_MARKERS
            )
        return self._homes[folder]

    def holds_credentials(self, folder: str) -> bool:
        """Whether _credential_files would cover a file in `folder`."""
        if folder not in self._credentials:
            names = _SECRETS_IN.get(os.path.basename(folder), _CREDENTIAL_FILES)
            self._credentials[folder] = any(_is_file(_join(folder, n)) for n in names)
        return self._credentials[folder]


def _is_file(path: str) -> bool:
    """Whether `path` is a regular file, not through a link."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _entries(folder: str) -> list[tuple[str, bool]] | None:
    entries = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                try:
                    entries.append((entry.name, entry.is_dir()))
                except OSError:
                    entries.append((entry.name, False))
    except OSError:
        return None
    return entries


def _join(folder: str, name: str) -> str:
    """os.path.join of a folder and a relative name, without its checks."""
    return folder + name if folder.endswith("/") else f"{folder}/{name}"


def _realpath(path: str) -> str | None:
    try:
        return os.path.realpath(path, strict=True)
    except (OSError, ValueError):
        return None


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
    editable = _editable_leads(policy, output)
    if not (refused or missing or editable):
        return None
    exposed = _listing(policy.exposed)
    limits = "only the repository (but not git's files in it: .git, hooks, included config, "
    limits += "nor the folders holding them) and /tmp are writable, the home folder is hidden "
    limits += "(HOME is an empty scratch folder" + (f"; readable: {exposed}" if exposed else "")
    limits += ")"
    limits += "" if policy.network else ", there is no network at all"
    verb = "is" if len(hidden) == 1 else "are"
    named = f" {', '.join(hidden[:5])} {verb} hidden." if hidden else ""
    named += "".join(f" {lead}, which is hidden." for lead in _leads_to_hidden(policy, output))
    named += "".join(f" {lead}, which is hidden." for lead in editable)
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


_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_FINDER_ENTRY = re.compile(r"""['"]([\w.]+)['"]\s*:\s*['"]([^'"]+)['"]""")


def _editable_leads(policy: SandboxPolicy, output: str) -> list[str]:
    """For each module `output` says Python could not import that an editable install (`pip
    install -e`) in a visible environment takes from a hidden folder: "tinypkg is an editable
    install of ~/proj/src (.venv/lib/python3.12/site-packages/__editable__.tinypkg-0.1.pth)".
    The install's `.pth` file names the folder (setuptools' src-layout, hatchling, flit), or
    its `__editable___*_finder.py` maps the package to it (setuptools' other layouts). Read
    only to explain a failure."""
    names = {name.split(".")[0] for name in _NO_MODULE.findall(output)}
    if not names:
        return []
    leads = []
    for site in _site_folders(policy):
        try:
            files = sorted(site.glob("*.pth")) + sorted(site.glob("__editable___*_finder.py"))
        except OSError:
            continue
        for file in files:
            try:
                content = file.read_text(encoding="utf-8", errors="replace")[:65_536]
            except OSError:
                continue
            if file.suffix == ".pth":
                places = [(name, Path(line.strip(), name)) for line in content.splitlines()
                          if line.strip().startswith("/") for name in names]  # fmt: skip
            else:
                places = [(name, Path(path)) for name, path in _FINDER_ENTRY.findall(content)
                          if name in names]  # fmt: skip
            for name, place in places:
                found = place.exists() or place.with_suffix(".py").exists()
                if found and policy.hidden_folder_of(str(place)) is not None:
                    where = f"{_tilde(place.parent)} ({_tilde(file)})"
                    leads.append(f"{name} is an editable install of {where}")
                    names.discard(name)
    return leads[:5]


def _site_folders(policy: SandboxPolicy) -> list[Path]:
    """The site-packages a command's Python may have used: of the environments holding a
    PATH folder and of the folders exposed read-only, the user's own. Never the repository's:
    a command may write a `.pth` there, and the note would then tell the model whether any
    path in the hidden home exists."""
    roots = [Path(p).parent for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    roots += [*policy.exposed, *(p.parent for p in policy.exposed)]
    repo = policy.repo.resolve()
    found: list[Path] = []
    for root in dict.fromkeys(roots):
        if policy.hidden_folder_of(str(root)) is not None:
            continue  # a hidden environment's Python did not run
        for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages"):
            try:  # a PATH folder may lie in a folder this user cannot read (/root/.cargo/bin)
                sites = sorted(root.glob(pattern))
            except OSError:
                continue
            found += [site for site in sites if not site.resolve().is_relative_to(repo)]
    return list(dict.fromkeys(found))


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


# ------------------------------------------------------------------------------- git's paths
GIT_TIMEOUT = 10  # seconds for one of git's own answers (a config include may name a FIFO)
_GIT_FILE_MAX = 65_536  # a `.git` file's bytes kept to tell it changed (git's are one line)
_RACY_NS = 2_000_000_000  # a folder changed this close to its reading is read again next time
# Settings whose value is a program git runs (the first word): at `git status`
# (core.fsmonitor), on a diff, a checkout, a commit, a fetch, an alias.
_GIT_PROGRAM_KEYS = (
    "core.fsmonitor", "core.editor", "core.pager", "core.sshcommand", "core.askpass",
    "core.alternaterefscommand", "core.gitproxy", "sequence.editor", "diff.external",
    "diff.*.command", "diff.*.textconv", "difftool.*.cmd", "mergetool.*.cmd", "merge.*.driver",
    "filter.*.clean", "filter.*.smudge", "filter.*.process", "credential.helper",
    "credential.*.helper", "gpg.program", "gpg.*.program", "alias.*", "pager.*",
    "interactive.difffilter", "uploadpack.packobjectshook", "remote.*.uploadpack",
    "remote.*.receivepack",
)  # fmt: skip
_GIT_DIR_NAMES = ("HEAD", "objects", "refs")  # a folder holding all three is a repository
# githooks(5): what a hooks folder that is the repository folder itself would hold.
_HOOK_NAMES = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout",
    "post-merge", "pre-push", "pre-receive", "update", "proc-receive", "post-receive",
    "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc",
    "post-rewrite", "sendemail-validate", "fsmonitor-watchman", "p4-changelist",
    "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit", "post-index-change",
)  # fmt: skip
# What decides which configuration git reads: the user's own, kept for git's answers here.
_GIT_CONFIG_VARIABLES = ("HOME", "PATH", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL",
                         "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_COUNT",
                         "GIT_CONFIG_PARAMETERS", "GIT_CEILING_DIRECTORIES",
                         "GIT_DISCOVERY_ACROSS_FILESYSTEM")  # fmt: skip


@dataclass(frozen=True)
class _Found:
    """A `.git` (or a folder git takes for a repository) as a walk saw it."""

    kind: str  # "dir", "file", "link" or "other"
    identity: object  # a folder's (device, inode), a file's bytes, a link's target


@dataclass(frozen=True)
class _Scan:
    ctime_ns: int
    read_ns: int  # when it was read: a folder changed within _RACY_NS of it is read again
    folders: tuple[str, ...]  # the sub-folders to walk on
    git: tuple[str, ...]  # entries named .git (any case), or "." when the folder is a git dir
    locked: bool = False  # not readable
    layout: frozenset[str] = frozenset()  # which of git's HEAD, objects, refs, commondir it has


class GitGuard:
    """Where git, run later by the user outside any sandbox, would execute code or read its
    configuration in this repository, decided once before any command runs; and the sweep
    after each command that removes the repositories a command made.

    Decided from git's own answers (`git rev-parse`, `git config --list --show-origin`, with
    the user's configuration and nothing else from the environment) and one walk of the work
    tree, never from what a command wrote:

    - `read_only`: inside the repository, every `.git` folder or file and every folder git
      takes for a repository (HEAD with objects and refs): the repository's own, its
      submodules' (recursively), its worktrees', nested clones'; the core.hooksPath folders of
      each; the files an include.path or includeIf.*.path names (in every scope, whatever
      the condition); and the programs the settings that run one name (core.fsmonitor,
      alias.*, filter and diff drivers, ...);
    - `absent`: such paths that do not exist yet (a hooks folder husky has not made): a
      command must not create them;
    - `outside`: a git folder outside the repository that a `.git` file leads to and that
      names its work tree back (a linked worktree, a submodule): git needs it, read-only.

    Paths outside the repository need nothing: a sandboxed command cannot write there."""

    def __init__(self, repo: Path):
        self.repo = repo.resolve()
        self._scans: dict[str, _Scan] = {}  # by folder
        self._mount_points: set[Path] = set()  # made by bwrap for absent paths: see mounts()
        self._accepted: set[Path] = set()  # made by the user since: see accept()
        self._locked: set[str] | None = None  # folders unreadable at the start: left so
        self.found = self._walk()  # the .git entries before any command
        self._locked = {folder for folder, scan in self._scans.items() if scan.locked}
        self._known_dirs = {f.identity for f in self.found.values() if f.kind == "dir"}
        wanted: dict[Path, bool] = {}  # path -> is a folder
        outside: list[Path] = []
        top = _git_top(self.repo)
        trees = {path.parent for path in self.found if path.name.lower() == ".git"}
        for tree in sorted({*trees, *([top] if top else [])}):
            wanted.update(_configured_paths(tree, self.repo))
        if not trees and top is None:  # no repository: the system and global settings still
            wanted.update(_configured_paths(self.repo, self.repo, work_tree=False))  # include
        for path, found in self.found.items():
            if found.kind in ("dir", "file"):
                wanted[path] = found.kind == "dir"
            if found.kind == "file" and path.name.lower() == ".git":
                outside += _linked_git_dirs(path, self.repo)
        inside = {p: d for p, d in wanted.items() if p != self.repo and p.is_relative_to(self.repo)}
        present = _outermost(p for p in inside if _unlinked(p) and os.path.lexists(p))
        self.read_only = tuple(present)
        self.absent = tuple(sorted(p for p in inside if not os.path.lexists(p)
                                   and not any(p.is_relative_to(q) for q in present)))  # fmt: skip
        self._absent_dirs = frozenset(p for p in self.absent if inside[p])
        self.outside = tuple(_outermost(outside))

    def protects(self, path: Path) -> bool:
        """Whether `path` (resolved) is or lies in one of git's paths: no tool writes there."""
        return any(path.is_relative_to(p) for p in (*self.read_only, *self.absent))

    def would_make_git_dir(self, path: Path) -> bool:
        """Whether writing the file `path` (resolved, in the repository) would make one of the
        folders on its way look like a repository to git (HEAD, objects and refs)."""
        for folder in path.parents:
            if not folder.is_relative_to(self.repo) or folder == self.repo:
                return False
            below = path.relative_to(folder).parts[0]
            if all(name == below or os.path.lexists(folder / name) for name in _GIT_DIR_NAMES):
                return True
        return False

    def accept(self) -> None:
        """Take the `.git` entries and git folders that appeared since the last sweep for
        the user's own, made while no command ran (call it before a sandboxed command: in the
        sandbox nothing of a command outlives it, and write_file makes none): they are kept,
        and read-only from this command on."""
        for path, found in self._walk().items():
            if self.found.get(path) != found and not (
                found.kind == "dir" and found.identity in self._known_dirs
            ):
                self.found[path] = found
                if found.kind == "dir":
                    self._known_dirs.add(found.identity)
                if found.kind in ("dir", "file"):
                    self._accepted.add(path)

    def mounts(self) -> tuple[list[Path], list[Path], list[Path], list[Path]]:
        """How bwrap keeps git's paths inside the repository as they are, from what exists
        now: (read-only paths, folders bound onto themselves, empty read-only folders, empty
        read-only files).

        A mount point cannot be renamed or removed, but its parent folder can, and a command
        would then put its own in its place; so every folder between the repository and a
        protected path is bound onto itself. A path that does not exist is covered at its
        first missing folder (or, a file, itself): bwrap makes that mount point in the
        repository, and `sweep` removes it again when it is empty."""
        read_only = _outermost(p for p in (*self.read_only, *self._accepted) if os.path.lexists(p))
        pinned: set[Path] = set()
        empty_dirs: list[Path] = []
        empty_files: list[Path] = []
        for path in (*read_only, *self.absent):
            for parent in reversed(path.parents):
                if parent == path or not parent.is_relative_to(self.repo) or parent == self.repo:
                    continue
                if not os.path.lexists(parent):
                    empty_dirs.append(parent)
                    break
                if os.path.islink(parent) or not parent.is_dir():
                    break  # a link on the way: no mount could hold it (see docs/safety.md)
                pinned.add(parent)
            else:
                if path in self.absent:
                    (empty_dirs if path in self._absent_dirs else empty_files).append(path)
        protected = {*read_only, *empty_dirs, *empty_files}
        self._mount_points.update((*empty_dirs, *empty_files))
        return (read_only, sorted(pinned - protected), _outermost(empty_dirs),
                sorted(set(empty_files)))  # fmt: skip

    def sweep(self) -> list[str]:
        """Remove every `.git` and git folder in the work tree that was not there before (a
        known `.git` file that changed is written back as it was), and whatever a command
        made at an absent path; the repository-relative names of what went, for the model
        and the user. Run after each command, and at the end of a run."""
        removed: list[str] = []
        earlier = dict(self._scans)  # each folder as the walk before the command saw it
        for path, found in sorted(self._walk().items()):
            before = self.found.get(path)
            if found == before or (found.kind == "dir" and found.identity in self._known_dirs):
                continue
            scan = earlier.get(str(path))
            if before is None and path.name.lower() != ".git" and scan and not scan.locked:
                # a folder of the user's that a command made look like a repository: only what
                # made it one goes (the folder holds the user's files); without HEAD, git
                # takes no folder for one
                added = self._scans[str(path)].layout - scan.layout or {"HEAD"}
                removed += [str((path / name).relative_to(self.repo))
                            for name in sorted(added) if _remove(path / name)]  # fmt: skip
                continue
            if not _remove(path):
                continue
            removed.append(str(path.relative_to(self.repo)))
            if before is not None and before.kind == "file" and isinstance(before.identity, bytes):
                with contextlib.suppress(OSError):
                    path.write_bytes(before.identity)
            elif before is not None and before.kind == "link":
                with contextlib.suppress(OSError):
                    os.symlink(str(before.identity), path)
        for point in sorted(self._mount_points, reverse=True):  # the ones bwrap left, empty
            with contextlib.suppress(OSError):
                st = os.lstat(point)
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(point)
                elif stat.S_ISREG(st.st_mode) and st.st_size == 0:
                    os.unlink(point)
        for path in self.absent:  # made by a command that ran without the sandbox
            if os.path.lexists(path) and _remove(path):
                removed.append(str(path.relative_to(self.repo)))
        if removed:
            logger.warning(
                "removed %s from %s: made by a command, git would run its hooks or settings "
                "when you use git there",
                ", ".join(removed),
                _tilde(self.repo),
            )
        return removed

    def _walk(self) -> dict[Path, _Found]:
        """The `.git` entries and git folders in the work tree, without following links or
        entering them. A folder whose ctime is the one its last reading saw (and not racily
        close to it) is not read again: adding, removing or renaming an entry changes it, and
        no one can set it back."""
        found: dict[Path, _Found] = {}
        top = str(self.repo)
        stack = [top]
        while stack:
            folder = stack.pop()
            try:
                st = os.lstat(folder)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            scan = self._scans.get(folder)
            if (
                scan is None
                or scan.ctime_ns != st.st_ctime_ns
                or (scan.read_ns - st.st_ctime_ns < _RACY_NS)
            ):
                unlock = self._locked is not None and folder not in self._locked
                scan = _scan(folder, folder == top, st.st_ctime_ns, unlock)
                self._scans[folder] = scan
            for name in scan.git:
                path = Path(folder if name == "." else os.path.join(folder, name))
                found[path] = _found(path)
            stack += [os.path.join(folder, name) for name in scan.folders]
        return found


def _scan(folder: str, is_repo: bool, ctime_ns: int, unlock: bool) -> _Scan:
    """What the walk needs of `folder`. `unlock`: a folder a command made unreadable, to hide
    what it holds, is made readable to its owner again (never one that was so at the start)."""
    read_ns = time.time_ns()
    try:
        kinds = _kinds(folder)
    except PermissionError:
        try:
            if not unlock:
                raise
            os.chmod(folder, stat.S_IMODE(os.lstat(folder).st_mode) | stat.S_IRWXU)
            kinds = _kinds(folder)
        except OSError:
            return _Scan(ctime_ns, read_ns, (), (), locked=True)
    except OSError:
        return _Scan(ctime_ns, read_ns, (), ())
    git = tuple(name for name in kinds if name.lower() == ".git")
    # git enters `objects` and `refs` through a link too (`objects -> ../.git/objects`): any
    # entry of those names counts, not only a folder
    looks_git = (
        not is_repo
        and "HEAD" in kinds
        and (("objects" in kinds and "refs" in kinds) or kinds.get("commondir") is False)
    )
    layout = frozenset(name for name in (*_GIT_DIR_NAMES, "commondir") if name in kinds)
    if looks_git:  # git would take this folder for a repository: nothing below matters
        return _Scan(ctime_ns, read_ns, (), (".",), layout=layout)
    folders = tuple(name for name, is_dir in kinds.items() if is_dir and name not in git)
    return _Scan(ctime_ns, read_ns, folders, git, layout=layout)


def _kinds(folder: str) -> dict[str, bool]:
    """Each entry's name, and whether it is a folder (a link is not)."""
    with os.scandir(folder) as entries:
        return {e.name: e.is_dir(follow_symlinks=False) for e in entries}


def _found(path: Path) -> _Found:
    try:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            return _Found("dir", (st.st_dev, st.st_ino))
        if stat.S_ISLNK(st.st_mode):
            return _Found("link", os.readlink(path))
        if stat.S_ISREG(st.st_mode) and st.st_size <= _GIT_FILE_MAX:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                return _Found("file", f.read(_GIT_FILE_MAX + 1))
        return _Found("other", (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    except OSError:
        return _Found("other", None)


def _remove(path: Path) -> bool:
    """Remove `path` (a folder with all it holds, even made unreadable) without following a
    link; False, with an error logged, when that failed."""
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return True
        stack = [path]
        while stack:  # a command may have made folders unreadable; they are the user's
            folder = stack.pop()
            if not os.path.islink(folder):
                os.chmod(folder, stat.S_IRWXU)
                with os.scandir(folder) as entries:
                    stack += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
        shutil.rmtree(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        logger.error("could not remove %s, made by a command: %s; remove it before you use "
                     "git there", path, exc)  # fmt: skip
        return False


def _git(args: list[str], cwd: Path) -> str | None:
    """git's answer, or None when it failed: with the user's configuration variables and
    nothing else from the environment (no GIT_DIR, no GIT_WORK_TREE, no loader variables)."""
    git = shutil.which("git")
    if git is None:
        return None
    env = {k: v for k, v in os.environ.items() if k in _GIT_CONFIG_VARIABLES
           or k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}  # fmt: skip
    env.update(LC_ALL="C", GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run([git, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=GIT_TIMEOUT)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return os.fsdecode(done.stdout) if done.returncode == 0 else None


def _git_top(repo: Path) -> Path | None:
    """The top of the work tree holding `repo` (the enclosing repository's when `repo` is a
    folder inside one), or None. git is asked only when a folder on the way up holds a `.git`
    or is a git folder itself: elsewhere it would find none either."""
    if not any(
        os.path.lexists(folder / ".git") or all(os.path.lexists(folder / name) for name in
                                                 _GIT_DIR_NAMES)
        for folder in (repo, *repo.parents)
    ):  # fmt: skip
        return None
    out = _git(["rev-parse", "--show-toplevel"], repo)
    return Path(out.strip()).resolve() if out and out.strip() else None


def _configured_paths(top: Path, repo: Path, *, work_tree: bool = True) -> dict[Path, bool]:
    """What the configuration git reads in work tree `top` names (path -> is a folder): the
    core.hooksPath folders, every file include.path and includeIf.*.path name (followed
    through the included files, the ones whose condition is false today too), and the
    programs _GIT_PROGRAM_KEYS name by a path. Outside a work tree (`work_tree` False: the
    system and global settings alone), a relative hooks folder or program names nothing."""
    paths: dict[Path, bool] = {}
    tree = top if work_tree else None
    listing = ["config", "--list", "--show-origin", "-z"]
    # Where git refuses the repository (owned by another user: "dubious ownership"), your
    # system and global settings still apply the day you mark it safe.
    out = _git(listing, top) or _git(listing, Path("/"))
    entries = _config_entries(out, top)
    read = {origin for origin, _, _ in entries if origin is not None}
    while entries:
        origin, key, value = entries.pop()
        key = key.lower()
        if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
            base = origin.parent if origin is not None else None
            target = _config_path(value, base)
            if target is None:
                continue
            paths[target] = False
            if target not in read and target.is_file():
                read.add(target)
                out = _git(["config", "--file", str(target), "--no-includes", "--list",
                            "--show-origin", "-z"], top)  # fmt: skip
                entries += _config_entries(out, top)
        elif key == "core.hookspath":
            hooks = _config_path(value, tree)
            if hooks == repo:
                paths.update({hooks / name: False for name in _HOOK_NAMES})
            elif hooks is not None:
                paths[hooks] = True
        elif any(fnmatch.fnmatchcase(key, pattern) for pattern in _GIT_PROGRAM_KEYS):
            words = value.lstrip("!").split()
            if words and "/" in words[0] and (program := _config_path(words[0], tree)):
                paths[program] = False
    return {p: is_dir for p, is_dir in paths.items() if p.is_relative_to(repo)}


def _config_entries(out: str | None, cwd: Path) -> list[tuple[Path | None, str, str]]:
    """(file, key, value) of `git config --list --show-origin -z` (a file named relative to
    the folder git ran in; None for the command line)."""
    fields = (out or "").split("\0")
    entries = []
    for origin, item in zip(fields[::2], fields[1::2], strict=False):
        key, _, value = item.partition("\n")
        file = cwd / origin[5:] if origin.startswith("file:") else None
        entries.append((Path(os.path.normpath(file)) if file else None, key, value))
    return entries


def _config_path(value: str, base: Path | None) -> Path | None:
    """A path as git reads a pathname setting: `~/` is the home, relative is from `base`."""
    value = os.path.expanduser(value.strip())
    if not value or (not os.path.isabs(value) and base is None):
        return None
    return Path(os.path.normpath(os.path.join(base or "/", value)))


def _unlinked(path: Path) -> bool:
    """Whether no link lies on `path`'s way: bwrap would mount where a link leads."""
    return os.path.realpath(path) == str(path)


def _linked_git_dirs(dot_git: Path, repo: Path) -> list[Path]:
    """The git folder outside the repository that the `.git` file `dot_git` leads to, and its
    common folder, when that folder names `dot_git`'s work tree back (a linked worktree's
    `gitdir` file, a submodule's core.worktree): a `.git` file alone, which anyone can
    write, decides nothing."""
    work_tree = dot_git.parent
    try:
        if os.lstat(dot_git).st_size > 4096:
            return []
        text = dot_git.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if not text.startswith("gitdir:"):
        return []
    gitdir = (work_tree / text[7:].strip()).resolve()
    if gitdir.is_relative_to(repo) or not _names_back(gitdir, dot_git, work_tree):
        return []
    common = gitdir
    with contextlib.suppress(OSError, ValueError):
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    if not (common / "objects").is_dir() or not (common / "HEAD").is_file():
        return []
    return _outermost([common, gitdir])


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
