"""search_in_files: behaviour, and the same answer from every backend (rg, grep, Python)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import finishes, write
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from toy_agent.ignore import (
    IGNORE_FILE_MAX_BYTES,
    IGNORE_FILE_MAX_LINES,
    IGNORE_FILE_MAX_REGEX,
    IGNORE_PATTERN_MAX_STARS,
    gitignored,
    ignore_regex,
    ignore_rules,
    ignored_names,
)
from toy_agent.search import SEARCH_MAX_MATCHES
from toy_agent.tools import CodeRepositoryTools, ToolError

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

BACKENDS = [
    pytest.param(
        "rg", marks=pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep not installed")
    ),
    "grep",
    "python",
]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A repository with every kind of file the walk must include or skip."""
    root = tmp_path / "repo"
    files: dict[str, str | bytes] = {
        "app.py": "import os\ndef Handler():\n    return handler_value  # TODO\n",
        "lib/util.js": "// todo: fix\nconst handler = () => 1;\n",
        "lib/types.ts": "export type Handler = string;\n",
        "lib/notes.md": "Nothing to see.\nTODO later\n",
        "docs/a:b.txt": "colon:in:path handler\n",
        "docs/spaces in name.txt": "handler here\n",
        "crlf.txt": "handler\r\nsecond handler\r\n",
        "latin1.txt": "caf\xe9 handler\n".encode("latin-1"),
        "long.txt": "handler " + "x" * 500 + "\n",
        "noeol.txt": "last line handler",
        "bin/data.bin": b"handler\x00\x01\x02 handler\n",
        "late_nul.txt": "handler\n" + "y" * 9000 + "\x00\n",
        ".gitignore": "*.log\n/ignored_dir/\n",
        "lib/.gitignore": "generated.js\n!keep.log\n",
        "lib/generated.js": "handler generated\n",
        "lib/keep.log": "handler kept by negation\n",
        "debug.log": "handler in a log\n",
        "ignored_dir/x.py": "handler\n",
        ".hidden/h.py": "handler\n",
        ".env": "handler\n",
        "node_modules/pkg/index.js": "handler\n",
        "__pycache__/m.pyc": "handler\n",
        "build/out.py": "handler\n",
        "venv2/pyvenv.cfg": "home = /usr\n",
        "venv2/lib/site.py": "handler\n",
        ".git/config": "handler\n",
    }
    for rel, content in files.items():
        write(root, rel, content)
    (root / "outside_link").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "outside.txt").write_text("handler outside\n")
    (root / "leak.txt").symlink_to(tmp_path / "outside.txt")
    (root / "alias.py").symlink_to(root / "app.py")
    return root


def search(root: Path, backend: str, *args: str, **kwargs: str) -> str:
    return CodeRepositoryTools(root, search_backend=backend).search_in_files(*args, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_search_finds_case_insensitively_and_skips_ignored_files(tree: Path, backend: str) -> None:
    out = search(tree, backend, "handler")
    found = {line for line in out.splitlines() if not line.startswith(" ")}
    assert found == {
        "14 matches in 11 files for 'handler' (14 files under .):",
        "alias.py",
        "app.py",
        "crlf.txt",
        "docs/a:b.txt",
        "docs/spaces in name.txt",
        "latin1.txt",
        "lib/keep.log",
        "lib/types.ts",
        "lib/util.js",
        "long.txt",
        "noeol.txt",
    }  # fmt: skip  (bin/data.bin and late_nul.txt hold a NUL: binary)
    assert "  3:     return handler_value  # TODO" in out
    assert "  1: caf\ufffd handler" in out
    assert "  2: second handler" in out


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lone_cr_ends_a_line_for_search_as_for_read_file(tmp_path: Path, backend: str) -> None:
    """grep and rg end lines at \n only; read_file also at a lone \r (an old Mac ending, or
    a stray one). A search hit must name the line read_file shows under that number."""
    write(tmp_path, "mixed.txt", b"one\ntwo\rneedle here\r\nfour\rneedle again\n")
    write(tmp_path, "plain.txt", "needle\n")
    tools = CodeRepositoryTools(tmp_path, search_backend=backend)

    out = tools.search_in_files("needle")

    assert out.splitlines()[1:] == [
        "mixed.txt", "  3: needle here", "  5: needle again",
        "plain.txt", "  1: needle",
    ]  # fmt: skip
    assert out.startswith("3 matches in 2 files")
    assert "   3 | needle here" in tools.read_file("mixed.txt", start_line=3, end_line=3)
    assert "   5 | needle again" in tools.read_file("mixed.txt", start_line=5, end_line=5)


GREP_HAS_PCRE = (
    shutil.which("grep") is not None
    and subprocess.run(["grep", "-qP", "x"], input=b"x\n", capture_output=True).returncode == 0
)


@pytest.mark.slow
@pytest.mark.skipif(not GREP_HAS_PCRE, reason="grep without -P")
def test_a_pattern_that_backtracks_without_end_is_refused_not_handed_to_python(tmp_path: Path):
    """grep -P gives up on it; Python's re, which has no time limit, would run for hours."""
    write(tmp_path, "a.txt", "a" * 40 + "!\n")
    tools = CodeRepositoryTools(tmp_path, search_backend="auto")
    with pytest.raises(ToolError, match="The pattern backtracks too much"):
        finishes(lambda: tools.search_in_files(r"(?<=x)?(a+)+$"))


def test_a_file_pattern_expanding_to_too_many_globs_is_refused_at_once(tmp_path: Path):
    """Each {a,b} doubles the globs: thirty pairs would be a billion."""
    write(tmp_path, "ab.py", "needle\n")
    tools = CodeRepositoryTools(tmp_path)
    assert "1 match" in tools.search_in_files("needle", file_pattern="{a,x}{b,y}.{py,js}")
    with pytest.raises(ToolError, match="file_pattern expands to over 256 globs"):
        finishes(lambda: tools.search_in_files("needle", file_pattern="{a,b}" * 30 + ".py"))


@pytest.mark.parametrize(
    "file_pattern", [".github/workflows/*.yml", "./.github/**/*.yml", "././.github/*/ci.yml"]
)
def test_a_file_pattern_naming_a_hidden_folder_keeps_its_dot(tmp_path: Path, file_pattern: str):
    write(tmp_path, ".github/workflows/ci.yml", "run: pytest\n")
    write(tmp_path, "github/workflows/ci.yml", "run: pytest\n")  # not what was named
    tools = CodeRepositoryTools(tmp_path)

    out = tools.search_in_files("pytest", path=".github", file_pattern=file_pattern)
    assert out.startswith("1 match in 1 file") and ".github/workflows/ci.yml" in out
    out = tools.search_in_files("pytest", file_pattern=file_pattern)  # .github not walked
    assert out.startswith("No matches")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_files_named_like_options_or_standard_input_are_searched(tmp_path: Path, backend: str):
    for name in ("-", "-e", "--help"):
        write(tmp_path, name, f"needle in {name}\n")
    out = CodeRepositoryTools(tmp_path, search_backend=backend).search_in_files("needle")
    assert out.splitlines()[1:] == [
        "-", "  1: needle in -",
        "--help", "  1: needle in --help",
        "-e", "  1: needle in -e",
    ]  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_of_lone_cr_lines_counts_every_matching_line(tmp_path: Path, backend: str) -> None:
    write(tmp_path, "mac.txt", b"".join(b"hit %d\r" % i for i in range(150)) + b"\n")
    out = CodeRepositoryTools(tmp_path, search_backend=backend).search_in_files("^hit")
    assert out.startswith("150 matches in 1 file")
    assert "  150: hit 149" not in out and "  100: hit 99" in out  # 100 lines shown


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("pattern", "kwargs"),
    [
        ("handler", {}),
        ("todo", {}),
        (r"def \w+\(", {}),
        ("^export|^const", {}),
        ("handler$", {}),
        ("handler", {"file_pattern": "*.{js,ts}"}),
        ("handler", {"file_pattern": "*.PY, *.md"}),
        ("handler", {"file_pattern": "lib/*.js"}),
        ("handler", {"path": "lib"}),
        ("handler", {"path": "docs/a:b.txt"}),
        ("handler(", {}),
        ("a:b|x{3}", {}),
        (r"\d+|x{2,}", {}),
        (r"(?:todo|value)\b", {}),
        (r"[]h]andler\s+\w", {}),
        (r"colon\:in\-?|\bHERE$", {}),
        ("no such text", {}),
    ],
)
def test_every_backend_gives_the_same_answer(
    tree: Path, backend: str, pattern: str, kwargs: dict[str, str]
) -> None:
    assert search(tree, backend, pattern, **kwargs) == search(tree, "python", pattern, **kwargs)


def test_invalid_regex_is_searched_literally_and_said_so(tree: Path) -> None:
    write(tree, "calls.py", "result = handler(\n")
    out = search(tree, "python", "handler(")
    assert "not a valid regex" in out and "calls.py" in out and "  1: result = handler(" in out


@pytest.mark.slow
def test_python_only_regex_falls_back_to_another_backend(tree: Path) -> None:
    """rg has no look-ahead; the automatic chain still answers, like the Python backend."""
    tools = CodeRepositoryTools(tree)
    assert tools.search_in_files("handler(?= here)") == search(tree, "python", "handler(?= here)")


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep not installed")
def test_a_forced_backend_that_cannot_run_the_pattern_says_so(tree: Path) -> None:
    with pytest.raises(ToolError, match="rg could not run this search"):
        search(tree, "rg", "handler(?= here)")


def test_results_are_capped_with_a_count_of_the_rest(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path, f"f{i:02d}.txt", "hit\n" * 5)
    out = CodeRepositoryTools(tmp_path).search_in_files("hit")
    assert out.splitlines()[0] == "150 matches in 30 files for 'hit' (30 files under .):"
    assert out.count(": hit") == SEARCH_MAX_MATCHES
    assert "[… 50 matches (10 more files) cut: narrow the search with path, file_pattern" in out


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_counts_are_worded_in_the_singular_for_one(tmp_path: Path, backend: str) -> None:
    for i in range(SEARCH_MAX_MATCHES + 1):
        write(tmp_path, f"f{i:03d}.txt", "hit\n")
    out = search(tmp_path, backend, "hit")
    assert out.splitlines()[0] == "101 matches in 101 files for 'hit' (101 files under .):"
    assert "[… 1 match (1 more file) cut: narrow the search" in out
    out = search(tmp_path, backend, "hit", path="f000.txt")
    assert out.splitlines()[0] == "1 match in 1 file for 'hit' (1 file under f000.txt):"
    assert search(tmp_path, backend, "miss", path="f000.txt") == (
        "No matches for 'miss' in 1 file under f000.txt (case-insensitive)."
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_binary_files_are_judged_alike_when_hundreds_of_files_match(
    tmp_path: Path, backend: str
) -> None:
    """A NUL byte anywhere makes a file binary, none of its lines matched, whether the NUL
    comes before the matches or long after them (grep and rg stop reading there)."""
    for i in range(300):
        write(tmp_path, f"text/t{i:03d}.txt", "hit\n")
    for at in (4, 100, 8000, 8191, 8192, 9000, 40_000, 200_000):  # where the NUL is
        write(tmp_path, f"nul/at{at:06d}.txt", b"hit\n" + b"y" * (at - 4) + b"\0\nhit\n")
    write(tmp_path, "nul/latin1.txt", "caf\xe9 hit\n".encode("latin-1"))  # not UTF-8: text
    out = search(tmp_path, backend, "hit")
    assert out.splitlines()[0] == "301 matches in 301 files for 'hit' (309 files under .):"
    assert out == search(tmp_path, "python", "hit")
    out = search(tmp_path, backend, "hit", path="nul")
    assert out.splitlines() == [
        "1 match in 1 file for 'hit' (9 files under nul):", "nul/latin1.txt", "  1: caf\ufffd hit"
    ]  # fmt: skip


def test_the_python_backend_stops_reading_a_binary_at_its_first_block(tmp_path: Path) -> None:
    """A sparse terabyte of NULs: read whole (as it was), it cannot even be allocated."""
    write(tmp_path, "app.py", "print('handler')\n")
    with (tmp_path / "data.bin").open("wb") as f:
        f.truncate(1 << 40)
    out = finishes(lambda: search(tmp_path, "python", "handler"))
    assert out.splitlines() == [
        "1 match in 1 file for 'handler' (2 files under .):", "app.py", "  1: print('handler')"
    ]  # fmt: skip


def test_the_python_backend_holds_no_more_than_a_block_and_a_capped_line(tmp_path: Path) -> None:
    from toy_agent.search import PYTHON_BLOCK_BYTES, PYTHON_LINE_MAX_BYTES, _line_blocks

    long_line = b"x" * (PYTHON_LINE_MAX_BYTES + 3 * PYTHON_BLOCK_BYTES) + b" hit\r\n"
    write(tmp_path, "long.txt", b"first hit\n" + long_line + b"hit after\n")
    fd = os.open(tmp_path / "long.txt", os.O_RDONLY)
    try:
        sizes = [len(block) for block in _line_blocks(fd)]
    finally:
        os.close(fd)
    assert max(sizes) <= PYTHON_LINE_MAX_BYTES + PYTHON_BLOCK_BYTES
    # the lines after an overlong one keep their numbers
    out = search(tmp_path, "python", "^(first|hit)")
    assert out.splitlines()[1:] == ["long.txt", "  1: first hit", "  3: hit after"]


def test_the_python_backend_ends_lines_alike_across_its_blocks(tmp_path: Path) -> None:
    """A CRLF split between two reads is one line end; a lone CR there is one too."""
    from toy_agent.search import PYTHON_BLOCK_BYTES as BLOCK

    data = b"x" * (BLOCK - 1) + b"\r\nhit one\r\n"  # the CR ends the first read
    data += b"y" * (2 * BLOCK - 1 - len(data)) + b"\rhit two\n"  # a lone CR ends the second
    write(tmp_path, "ends.txt", data)
    out = search(tmp_path, "python", "^hit")
    assert out.splitlines() == [
        "2 matches in 1 file for '^hit' (1 file under .):", "ends.txt", "  2: hit one",
        "  4: hit two",
    ]  # fmt: skip


@pytest.mark.slow
def test_long_lines_are_cut(tree: Path) -> None:
    out = search(tree, "python", "x{400}")
    line = "  1: handler " + "x" * 192 + " [… 308 characters cut: read_file shows the line]"
    assert line in out.splitlines()


def test_search_refuses_empty_multiline_and_escaping_patterns(tree: Path) -> None:
    tools = CodeRepositoryTools(tree)
    with pytest.raises(ToolError, match="empty"):
        tools.search_in_files("")
    with pytest.raises(ToolError, match="one line"):
        tools.search_in_files("a\nb")
    with pytest.raises(ToolError, match="outside the repository"):
        tools.search_in_files("handler", path="..")
    with pytest.raises(ToolError, match="No such file"):
        tools.search_in_files("handler", path="nowhere")


@pytest.mark.slow
def test_search_in_an_explicitly_named_ignored_folder(tree: Path) -> None:
    out = search(tree, "python", "handler", path="node_modules")
    assert "node_modules/pkg/index.js" in out


def test_unknown_backend_is_a_programming_error(tree: Path) -> None:
    with pytest.raises(ValueError, match="search_backend"):
        CodeRepositoryTools(tree, search_backend="ack")


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\n" + script + "\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


@pytest.mark.slow
@pytest.mark.parametrize(
    "grep_script",
    [
        'echo "grep: this grep is broken" >&2; exit 2',
        'echo "Binary file app.py matches"; exit 0',  # output without --null must not pass
    ],
)
def test_automatic_search_falls_back_when_grep_fails(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog, grep_script: str
) -> None:
    expected = search(tree, "python", "handler")
    fake_tool(tmp_path / "bin", "grep", grep_script)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    caplog.set_level("INFO", logger="toy_agent.tools")
    assert CodeRepositoryTools(tree).search_in_files("handler") == expected
    assert "search backend grep failed" in caplog.text
    assert "python backend" in caplog.text


@pytest.mark.slow
def test_automatic_search_without_grep_or_rg_uses_python(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    expected = search(tree, "python", "todo")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    caplog.set_level("INFO", logger="toy_agent.tools")
    assert CodeRepositoryTools(tree).search_in_files("todo") == expected
    assert "python backend" in caplog.text


# ------------------------------------------------------------------------- hostile repositories
LIST_AND_SEARCH = """
import json, sys
from toy_agent.tools import CodeRepositoryTools
tools = CodeRepositoryTools(sys.argv[1], search_backend=sys.argv[2])
print(json.dumps([tools.list_files(), tools.search_in_files("hit")]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gitignore_pattern_that_backtracks_exponentially_cannot_stall_list_or_search(
    tmp_path: Path, backend: str
) -> None:
    """A plain glob-to-regex translation of the first line (pathspec's) takes hours on a name of
    sixty a's; git takes no time. The others never match here, after trying every split of a
    long deep path."""
    lines = [
        "*a*a*a*a*a*a*a*a*a*a*a*a*b",
        "**/*a*a*a*a*a*a*b/**/*a*a*a*a*a*a*b",
        "*a*a*a*a*/**/*a*a*y",
        "**/a*/**/y/",
    ]
    write(tmp_path, ".gitignore", "\n".join(lines) + "\n")
    write(tmp_path, "a" * 60, "hit\n")  # no b: kept
    write(tmp_path, "a" * 59 + "b", "hit\n")  # twelve a's and a b: ignored
    write(tmp_path, "/".join(["a" * 200] * 15) + "/x", "hit\n")  # long, deep and kept
    try:  # in a child: a regex loop holds the GIL, so no thread could time it out
        done = subprocess.run(
            [sys.executable, "-c", LIST_AND_SEARCH, str(tmp_path), backend],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("list_files and search_in_files did not finish within 20s")
    listing, out = json.loads(done.stdout)
    assert "a" * 60 in listing.splitlines() and "a" * 59 + "b" not in listing
    assert out.splitlines()[0] == "2 matches in 2 files for 'hit' (2 files under .):"


def test_gitignore_lines_that_are_broken_or_absurd_are_skipped_and_the_rest_apply(
    repo: Path,
) -> None:
    """pathspec raised on the first three, failing the whole walk."""
    absurd = "*" * (IGNORE_PATTERN_MAX_STARS + 1) + ".py"
    write(repo, ".gitignore", f"[z-a]\nfoo\\\n!\n*.log\n[unclosed\n{absurd}\n")
    write(repo, "debug.log", "x\n")
    assert CodeRepositoryTools(repo).list_files().splitlines()[1:] == ["app.py"]


def test_only_the_start_of_a_huge_gitignore_counts(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    padding = ["# " + "x" * 200] * (IGNORE_FILE_MAX_BYTES // 200)  # over the byte cap
    write(repo, ".gitignore", "\n".join(["*.log", *padding, "*.tmp"]) + "\n")
    write(repo, "lib/.gitignore", "\n".join(["*.bak", *["#"] * IGNORE_FILE_MAX_LINES, "*.old"]))
    for rel in ("a.log", "a.tmp", "lib/a.bak", "lib/a.old"):
        write(repo, rel, "x\n")
    listing = CodeRepositoryTools(repo).list_files().splitlines()[1:]
    assert listing == ["a.tmp", "app.py", "lib/", "lib/a.old"]
    assert f"over {IGNORE_FILE_MAX_BYTES} bytes; only its start is used" in caplog.text
    assert f"over {IGNORE_FILE_MAX_LINES} lines; the rest are not used" in caplog.text


def test_a_gitignore_within_the_caps_compiles_to_a_bounded_regex(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """10,000 distinct lines of 32 stars each compiled to 11 M characters of regex (25 s, for
    each such file); a file is now used only up to the bound, as one too long is read so far."""
    hostile = ["*a" * IGNORE_PATTERN_MAX_STARS + f"q_{i}" for i in range(IGNORE_FILE_MAX_LINES)]
    rules = ignore_rules(("*.log", *hostile, "*.tmp"))
    assert rules is not None and len(rules.regex.pattern) <= IGNORE_FILE_MAX_REGEX
    assert 100 < rules.used < 1000  # the lines before the bound are used, the rest are not
    write(repo, "lib/.gitignore", "\n".join(["*.log", *hostile[:1000], "*.tmp"]) + "\n")
    many_a = "a" * IGNORE_PATTERN_MAX_STARS
    for rel in ("lib/a.log", "lib/a.tmp", f"lib/{many_a}q_1", f"lib/{many_a}q_999"):
        write(repo, rel, "x\n")
    listing = CodeRepositoryTools(repo).list_files("lib").splitlines()[1:]
    assert listing == ["lib/a.tmp", f"lib/{many_a}q_999"]
    assert f"lib/.gitignore would compile to over {IGNORE_FILE_MAX_REGEX} characters" in (
        caplog.text
    )


def test_a_gitignore_is_read_only_when_it_is_a_regular_file(repo: Path) -> None:
    """A FIFO named .gitignore would block the walk; a symlinked one git does not follow."""
    os.mkfifo(repo / ".gitignore")
    write(repo, "rules", "*.py\n")
    (repo / "lib").mkdir()
    (repo / "lib" / ".gitignore").symlink_to(repo / "rules")
    write(repo, "lib/mod.py", "x\n")
    listing = finishes(CodeRepositoryTools(repo).list_files)
    assert listing.splitlines()[1:] == ["app.py", "lib/", "lib/mod.py", "rules"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root, "app.py", "handler\n")
    return root


@pytest.fixture
def special_repo(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A real FIFO, a real socket and, as root, a copy of /dev/zero, each with its kind."""
    os.mkfifo(repo / "pipe")
    made = {"pipe": "fifo", "sock": "socket"}
    monkeypatch.chdir(repo)  # a socket path must be short
    server = socket.socket(socket.AF_UNIX)
    server.bind("sock")
    if IS_ROOT:
        os.mknod(repo / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
        made["zero"] = "char device"
    yield made
    server.close()


def test_list_files_shows_special_files_with_their_kind(
    repo: Path, special_repo: dict[str, str]
) -> None:
    listing = finishes(CodeRepositoryTools(repo).list_files).splitlines()
    assert listing[0] == f"Repository root: {1 + len(special_repo)} files, 0 directories:"
    assert listing[1:] == ["app.py"] + [f"{name}  ({kind})" for name, kind in special_repo.items()]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_search_never_opens_special_files(
    repo: Path, special_repo: dict[str, str], backend: str
) -> None:
    """grep and rg block on a FIFO and exhaust memory on /dev/zero, so they never see one."""
    tools = CodeRepositoryTools(repo, search_backend=backend)
    out = finishes(lambda: tools.search_in_files("handler"))
    assert out.splitlines()[0] == "1 match in 1 file for 'handler' (1 file under .):"
    for name, kind in special_repo.items():
        with pytest.raises(ToolError, match=f"^{name} is a {kind}, not a regular file"):
            finishes(lambda n=name: tools.search_in_files("handler", path=n))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["grep", BACKENDS[0]])
def test_grep_and_rg_get_no_keys_and_no_loader_variables(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """What a repository's .env or the user's shell exported must not reach grep or rg: an
    LD_PRELOAD would run code in them, a key could be printed by them."""
    real = shutil.which(backend)
    if real is None:
        pytest.skip(f"{backend} not installed")
    expected = search(tree, "python", "handler")
    seen = tmp_path / "env.txt"
    fake_tool(tmp_path / "bin", backend, f'env >> "{seen}"; exec "{real}" "$@"')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    assert search(tree, backend, "handler") == expected
    env = seen.read_text()
    assert "LC_ALL=C.UTF-8" in env
    assert "LD_PRELOAD" not in env and "sk-do-not-leak" not in env


# ------------------------------------------------------------------------- ignore patterns
@pytest.mark.parametrize(
    ("line", "ignored", "kept"),
    [
        ("*.log", ["a.log", "x/a.log", "x/a.log/"], ["a.log.txt", "log"]),
        ("/build/", ["build/"], ["build", "x/build/", "build/x"]),  # build/x: never walked
        ("doc/*.txt", ["doc/a.txt"], ["doc/x/a.txt", "x/doc/a.txt"]),
        ("a/**/b", ["a/b", "a/x/y/b", "a/x/b/"], ["a/xb", "x/a/b"]),
        ("**/x/**/y/**/z", ["x/y/z", "q/x/q/y/q/z/"], ["x/z/y", "z/y/x"]),
        ("foo/*", ["foo/a", "foo/a/"], ["foo/", "foo"]),
        ("*/", ["a/", "a/b/"], ["a", "a/b"]),
        ("!x", ["x", "x/"], ["x/a", "y"]),  # re-includes the folder x, not what is in it
        ("x/**/", ["x/a/", "x/a/b/"], ["x/", "x/a"]),
        ("[[:digit:]]", ["1", "x/2/"], ["a"]),
        ("[\\]-]a", ["]a", "-a"], ["\\a"]),
        ("a[!b]c", ["axc"], ["abc", "a/c"]),
        ("[z-a]x", ["zx"], ["ax"]),
        ("\\*a", ["*a"], ["xa"]),
        ("x\\ ", ["x "], ["x"]),
    ],
)
def test_ignore_patterns_follow_git(line: str, ignored: list[str], kept: list[str]) -> None:
    translated = ignore_regex(line)
    assert translated is not None
    regex = re.compile(translated[0])
    assert [p for p in ignored if not regex.match(p)] == []
    assert [p for p in kept if regex.match(p)] == []


_GLOB_PARTS = ["a", "b", "py", ".", "log", "*", "?", "**", "[ab]", "[!a]", "[a-c]", "\\*", "~"]
_NAME_PARTS = ["a", "b", "py", ".", "log", "c", "*", "~", "ab"]


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    lines=st.lists(
        st.builds(
            lambda bang, lead, segments, slash: bang + lead + "/".join(segments) + slash,
            st.sampled_from(["", "", "!"]),
            st.sampled_from(["", "/", "**/"]),
            st.lists(
                st.lists(st.sampled_from(_GLOB_PARTS), min_size=1, max_size=4).map("".join),
                min_size=1,
                max_size=2,
            ),
            st.sampled_from(["", "/"]),
        ),
        min_size=1,
        max_size=4,
    ),
    names=st.lists(
        st.lists(st.sampled_from(_NAME_PARTS), min_size=1, max_size=4).map("".join),
        min_size=1,
        max_size=12,
        unique=True,
    ),
    prefix=st.sampled_from(["", "a/", "a/b/"]),
)
def test_the_walk_puts_every_name_a_pattern_could_ignore_to_the_patterns(
    lines: list[str], names: list[str], prefix: str
) -> None:
    """The walk matches only the names an ignoring pattern's last segment allows (its literal
    start or end): that shortcut must decide exactly as matching every name does."""
    rules = ignore_rules(tuple(lines))
    assume(rules is not None)
    specs = (("", rules), ("a", rules)) if prefix else (("", rules),)
    dirs, files = names[::2], names[1::2]
    each = {n for n in names if gitignored(prefix + n, n in dirs, specs)}
    block = "\0" + "\0".join(files) + "\0"
    assert ignored_names(block, set(), dirs, prefix, specs) == each


def test_a_hit_cut_in_the_middle_of_a_key_shows_no_part_of_it(tmp_path: Path) -> None:
    """search shows at most 200 characters of a line: the whole line is redacted first, so a
    key that straddles the cut leaves not even its head behind."""
    key = "sk-ant-api03-" + "Q7" * 40
    for name, lead in (("a.txt", "y" * 190 + " "), ("b.txt", "y" * 185 + " token: ")):
        (tmp_path / name).write_text(f"{lead}{key}\n")
    out = CodeRepositoryTools(tmp_path).execute("search_in_files", {"pattern": "yyyy"})
    assert "2 matches" in out
    assert "sk-ant" not in out and "Q7Q7" not in out
