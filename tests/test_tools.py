"""The file tools over real files: confinement, listing, reading, writing, editing, metadata."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from fakes import folder, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toy_agent.tools import (
    LIST_LIMIT,
    READ_MAX_LINES,
    CodeRepositoryTools,
    ToolError,
    get_available_tools,
)

SECRET = "TOP-SECRET-OUTSIDE-THE-REPO"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder(tmp_path / "outside", {"secret.txt": SECRET + "\n"})
    return folder(tmp_path / "repo", {"src/app.py": "def main():\n    return 1\n",
                                      "README.md": "# demo\n"})  # fmt: skip


@pytest.fixture
def tools(repo: Path) -> CodeRepositoryTools:
    return CodeRepositoryTools(repo)


# ------------------------------------------------------------------------------ confinement
@pytest.mark.parametrize("path", ["../outside/secret.txt", "src/../../outside/secret.txt"])
def test_dotdot_escape_is_refused(tools: CodeRepositoryTools, path: str) -> None:
    with pytest.raises(ToolError, match="outside the repository"):
        tools.read_file(path)


def test_absolute_path_outside_is_refused(tools: CodeRepositoryTools, repo: Path) -> None:
    with pytest.raises(ToolError, match="outside the repository"):
        tools.read_file(str(repo.parent / "outside" / "secret.txt"))


def test_absolute_path_inside_is_accepted(tools: CodeRepositoryTools, repo: Path) -> None:
    assert "def main" in tools.read_file(str(repo / "src" / "app.py"))


def test_symlinked_file_leading_outside_is_refused(tools: CodeRepositoryTools, repo: Path) -> None:
    (repo / "link.txt").symlink_to(repo.parent / "outside" / "secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        tools.read_file("link.txt")
    with pytest.raises(ToolError, match="symlink"):
        tools.write_file("link.txt", "overwrite")
    assert (repo.parent / "outside" / "secret.txt").read_text() == SECRET + "\n"


def test_symlinked_directory_in_the_middle_is_refused(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "src" / "ext").symlink_to(repo.parent / "outside", target_is_directory=True)
    for call in (
        lambda: tools.read_file("src/ext/secret.txt"),
        lambda: tools.write_file("src/ext/new.txt", "x"),
        lambda: tools.list_files("src/ext"),
        lambda: tools.search_in_files("secret", path="src/ext"),
        lambda: tools.get_file_info("src/ext/secret.txt"),
    ):
        with pytest.raises(ToolError, match="symlink"):
            call()
    assert not (repo.parent / "outside" / "new.txt").exists()


def test_symlink_inside_the_repo_is_followed(tools: CodeRepositoryTools, repo: Path) -> None:
    (repo / "alias.py").symlink_to(repo / "src" / "app.py")
    assert "def main" in tools.read_file("alias.py")


def test_listing_and_search_do_not_follow_symlinks_out(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "src" / "ext").symlink_to(repo.parent / "outside", target_is_directory=True)
    (repo / "leak.txt").symlink_to(repo.parent / "outside" / "secret.txt")
    listing = tools.list_files()
    assert "ext" not in listing and "leak" not in listing and "secret" not in listing
    assert SECRET not in tools.search_in_files("TOP-SECRET")


@pytest.mark.slow
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.sampled_from(["..", ".", "src", "app.py", "out", "in", "missing", "/", "~", "a b"]),
        min_size=1,
        max_size=6,
    ),
    absolute=st.booleans(),
)
def test_resolved_paths_never_leave_the_repo(
    tools: CodeRepositoryTools, repo: Path, parts: list[str], absolute: bool
) -> None:
    if not (repo / "out").is_symlink():
        (repo / "out").symlink_to(repo.parent / "outside", target_is_directory=True)
        (repo / "in").symlink_to(repo / "src", target_is_directory=True)
    path = "/".join(parts)
    if absolute:
        path = str(repo) + "/" + path
    try:
        rel = tools.relative(path)
    except ToolError:
        return
    resolved = (repo / rel).resolve()
    assert not Path(rel).is_absolute() and ".." not in Path(rel).parts
    assert resolved.is_relative_to(repo.resolve())
    if resolved.is_file():
        assert SECRET not in tools.read_file(path)


# ------------------------------------------------------------------------------ list_files
def test_list_files_skips_git_hidden_noise_and_gitignored(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, ".gitignore", "*.log\n/generated/\n")
    write(repo, "pkg/.gitignore", "local.txt\n!keep.log\n")
    for rel in [
        ".git/config", ".hidden/a.py", ".env", "node_modules/x/index.js", "src/__pycache__/a.pyc",
        "build/out.o", "dist/a.whl", "demo.egg-info/PKG-INFO", "env/pyvenv.cfg", "env/lib/x.py",
        "app.log", "generated/g.py", "pkg/local.txt", "pkg/keep.log", "pkg/mod.py",
        "deep/generated/ok.py",
    ]:  # fmt: skip
        write(repo, rel)
    listing = tools.list_files().splitlines()[1:]
    assert listing == [
        "README.md", "deep/", "deep/generated/", "deep/generated/ok.py", "pkg/", "pkg/keep.log",
        "pkg/mod.py", "src/", "src/app.py",
    ]  # fmt: skip


def test_list_files_of_a_subfolder_applies_parent_gitignore(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, ".gitignore", "*.tmp\n")
    write(repo, "src/scratch.tmp")
    assert "scratch" not in tools.list_files("src")


def test_list_files_lists_an_ignored_folder_when_asked(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, "node_modules/lib/index.js")
    listing = tools.list_files("node_modules")
    assert "node_modules/lib/index.js" in listing
    assert "normally ignored" in listing


@pytest.mark.slow
def test_list_files_summarises_big_trees(tools: CodeRepositoryTools, repo: Path) -> None:
    for i in range(30):
        for j in range(20):
            write(repo, f"pkg{i:02d}/mod{j:02d}.py")
    listing = tools.list_files()
    assert len(listing.splitlines()) <= LIST_LIMIT + 5
    assert "pkg07/  (20 files inside)" in listing
    assert "list_files(path='pkg00')" in listing
    assert "mod05" not in listing


def test_list_files_of_an_empty_folder_says_so(tools: CodeRepositoryTools, repo: Path) -> None:
    (repo / "empty").mkdir()
    assert tools.list_files("empty") == (
        "empty: 0 files, 0 directories. Nothing to list (empty, or everything in it is ignored)."
    )


def as_another_user(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in this interpreter as the user nobody when we are root (who reads every
    folder whatever its mode), else as ourselves."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("as root, needs setpriv (util-linux) to read as another user")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        if subprocess.run([*prefix, sys.executable, "-c", "import toy_agent"],
                          capture_output=True).returncode != 0:  # fmt: skip
            pytest.skip("the user nobody cannot run this interpreter or import toy_agent")
    return subprocess.run([*prefix, sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


@pytest.mark.slow
def test_a_folder_that_cannot_be_read_is_named_never_listed_as_empty() -> None:
    repo = Path(tempfile.mkdtemp(prefix="toy-agent-locked-", dir="/tmp"))
    try:
        repo.chmod(0o755)
        for name in ("open/a.txt", "locked/secret.txt"):
            write(repo, name, "needle\n")
        (repo / "open").chmod(0o755)
        (repo / "locked").chmod(0)
        done = as_another_user(textwrap.dedent("""
            import sys
            from toy_agent.tools import CodeRepositoryTools, ToolError
            tools = CodeRepositoryTools(sys.argv[1])
            for name, params in [("list_files", {}), ("search_in_files", {"pattern": "needle"}),
                                 ("list_files", {"path": "locked"})]:
                try:
                    print(tools.execute(name, params), end="\\n----\\n")
                except ToolError as exc:
                    print("ERROR", exc, end="\\n----\\n")
        """), str(repo))  # fmt: skip
    finally:
        (repo / "locked").chmod(0o755)
        shutil.rmtree(repo)
    assert done.returncode == 0, done.stderr
    note = "[Cannot be read (permission denied), so not listed or searched: locked/.]"
    listing, search, locked, _ = done.stdout.split("\n----\n")
    assert listing.splitlines()[1:] == ["locked/", "open/", "open/a.txt", note]
    assert search.startswith("1 match in 1 file") and search.endswith(note)
    assert locked == "ERROR locked cannot be read: permission denied."


def test_list_files_on_a_file_or_missing_path_is_an_error(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="is a file"):
        tools.list_files("README.md")
    with pytest.raises(ToolError, match="No such file"):
        tools.list_files("nowhere")


# ------------------------------------------------------------------------------ read_file
def test_read_file_numbers_lines_and_reads_a_range(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "n.txt", "".join(f"line {i}\n" for i in range(1, 21)))
    out = tools.read_file("n.txt", 5, 7)
    assert out.splitlines() == ["n.txt (lines 5-7 of 20):", "   5 | line 5", "   6 | line 6",
                                "   7 | line 7"]  # fmt: skip


def test_read_file_notes_an_end_past_the_end(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "n.txt", "a\nb\nc")
    out = tools.read_file("n.txt", 2, 99)
    assert "   3 | c" in out and "end_line 99 is past the end" in out and "3 lines" in out


def test_read_file_refuses_start_past_the_end_and_bad_ranges(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, "n.txt", "a\nb\n")
    with pytest.raises(ToolError, match="past the end .*2 lines"):
        tools.read_file("n.txt", 5)
    with pytest.raises(ToolError, match="before start_line"):
        tools.read_file("n.txt", 2, 1)
    with pytest.raises(ToolError, match="1 or more"):
        tools.read_file("n.txt", 0)


def test_read_file_caps_lines_and_says_where_to_continue(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, "big.txt", "".join(f"{i}\n" for i in range(1, 1001)))
    out = tools.read_file("big.txt")
    assert f"start_line={READ_MAX_LINES + 1}" in out and "of 1000" in out
    nxt = tools.read_file("big.txt", READ_MAX_LINES + 1)
    assert nxt.splitlines()[1].endswith(f"| {READ_MAX_LINES + 1}")


def test_read_file_caps_characters(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "wide.txt", ("x" * 1000 + "\n") * 100)
    out = tools.read_file("wide.txt")
    assert len(out) < 45_000 and "start_line=" in out


def test_read_file_refuses_binary_files_with_their_size(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, "img.png", b"\x89PNG\r\n\x00\x00" + bytes(2000))
    with pytest.raises(ToolError, match=r"binary file \(2,008 bytes\)"):
        tools.read_file("img.png")


def test_read_file_decodes_non_utf8_with_a_note(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "latin.txt", "café\n".encode("latin-1"))
    out = tools.read_file("latin.txt")
    assert "caf\ufffd" in out and "not valid UTF-8" in out


def test_read_file_on_a_directory_suggests_list_files(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="list_files"):
        tools.read_file("src")


def test_read_file_missing_suggests_close_matches(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="Did you mean: src/app.py"):
        tools.read_file("app.py")


def test_read_file_refuses_a_fifo_instead_of_hanging(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    os.mkfifo(repo / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        tools.read_file("pipe")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_read_file_reports_permission_denied(tools: CodeRepositoryTools, repo: Path) -> None:
    (repo / "README.md").chmod(0)
    with pytest.raises(ToolError, match="Permission denied"):
        tools.execute("read_file", {"path": "README.md"})


def test_read_file_empty_file(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "empty.txt", "")
    assert tools.read_file("empty.txt") == "empty.txt is empty (0 lines)."


# ------------------------------------------------------------------------------ write_file
def test_write_file_creates_parents_and_reports(tools: CodeRepositoryTools, repo: Path) -> None:
    out = tools.write_file("new/deep/x.py", "a = 1\nb = 2\n")
    assert (repo / "new/deep/x.py").read_text() == "a = 1\nb = 2\n"
    assert out == "Wrote new/deep/x.py: 12 bytes, 2 lines (created)."


def test_write_file_overwrites_keeping_the_mode(tools: CodeRepositoryTools, repo: Path) -> None:
    script = write(repo, "run.sh", "echo old\n")
    script.chmod(0o750)
    out = tools.write_file("run.sh", "echo new\n")
    assert "overwrote the previous 9 bytes" in out
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.read_text() == "echo new\n"
    assert sorted(p.name for p in repo.iterdir()) == ["README.md", "run.sh", "src"]


def test_write_file_refuses_git_internals_and_directories(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    with pytest.raises(ToolError, match=".git"):
        tools.write_file(".git/hooks/pre-commit", "evil")
    with pytest.raises(ToolError, match="is a directory"):
        tools.write_file("src", "x")
    with pytest.raises(ToolError, match="a file is in the way"):
        tools.write_file("README.md/x.txt", "x")
    assert not (repo / ".git").exists()


@pytest.mark.slow
def test_failed_write_leaves_the_old_file_and_no_temp_file(repo: Path) -> None:
    """The file-size limit makes the write itself fail, even for root."""
    write(repo, "data.txt", "original\n")
    script = textwrap.dedent(f"""
        import resource, signal
        from toy_agent.tools import CodeRepositoryTools, ToolError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            CodeRepositoryTools({str(repo)!r}).execute(
                "write_file", {{"path": "data.txt", "content": "y" * 5000}})
        except ToolError as exc:
            print("ToolError:", exc)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert "ToolError: Could not write data.txt: File too large; it is unchanged." in result.stdout
    assert (repo / "data.txt").read_text() == "original\n"
    assert sorted(p.name for p in repo.iterdir()) == ["README.md", "data.txt", "src"]


# ------------------------------------------------------------------------------ edit_file
def test_edit_replaces_one_occurrence_and_shows_the_result(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    out = tools.edit_file("src/app.py", "return 1", "return 2")
    assert (repo / "src/app.py").read_text() == "def main():\n    return 2\n"
    assert out.splitlines()[0] == "Edited src/app.py (line 2). It now reads:"
    assert "   2 |     return 2" in out


def test_edit_refuses_ambiguous_match_and_names_the_lines(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, "dup.py", "x = 1\ny = 2\nx = 1\n")
    with pytest.raises(ToolError, match=r"occurs 2 times .*lines 1, 3"):
        tools.edit_file("dup.py", "x = 1", "x = 3")
    assert (repo / "dup.py").read_text() == "x = 1\ny = 2\nx = 1\n"


def test_edit_zero_matches_points_at_a_whitespace_only_difference(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    with pytest.raises(ToolError, match="if whitespace is ignored") as err:
        tools.edit_file("src/app.py", "def main():\n  return 1", "x")
    assert "   2 |     return 1" in str(err.value)
    assert (repo / "src/app.py").read_text() == "def main():\n    return 1\n"


def test_edit_zero_matches_suggests_read_file(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="not found in src/app.py. Use read_file"):
        tools.edit_file("src/app.py", "return 42", "return 43")


def test_edit_refuses_empty_or_identical_strings(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="old_str is empty"):
        tools.edit_file("src/app.py", "", "x")
    with pytest.raises(ToolError, match="identical"):
        tools.edit_file("src/app.py", "main", "main")


def test_edit_keeps_crlf_line_endings_and_undecodable_bytes(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, "win.txt", b"caf\xe9\r\nold line\r\nend\r\n")
    tools.edit_file("win.txt", "old line\nend", "new line\nend")
    assert (repo / "win.txt").read_bytes() == b"caf\xe9\r\nnew line\r\nend\r\n"


def test_edit_missing_or_binary_file_is_an_error(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "blob.bin", b"\x00\x01abc")
    with pytest.raises(ToolError, match="binary"):
        tools.edit_file("blob.bin", "abc", "def")
    with pytest.raises(ToolError, match="No such file"):
        tools.edit_file("ghost.py", "a", "b")


# ------------------------------------------------------------------------------ get_file_info
def test_file_info_for_a_text_file(tools: CodeRepositoryTools, repo: Path) -> None:
    (repo / "src" / "app.py").chmod(0o640)
    os.utime(repo / "src" / "app.py", (0, 86400))
    info = tools.get_file_info("src/app.py").splitlines()
    assert info == [
        "path: src/app.py", "type: file (text, UTF-8)", "language: Python", "lines: 2",
        "size: 25 bytes", "modified: 1970-01-02T00:00:00+00:00", "permissions: -rw-r----- (0640)",
    ]  # fmt: skip


def test_file_info_for_a_missing_path_is_an_error(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="No such file or directory: ghost"):
        tools.get_file_info("ghost")


def test_file_info_for_binary_and_directory(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "blob.bin", b"\x00" * 10)
    assert "type: file (binary)" in tools.get_file_info("blob.bin")
    info = tools.get_file_info("src")
    assert "type: directory" in info and "entries: 1 (1 files, 0 directories" in info


def test_file_info_for_non_utf8_text(tools: CodeRepositoryTools, repo: Path) -> None:
    write(repo, "latin.txt", "é\n".encode("latin-1"))
    assert "not valid UTF-8" in tools.get_file_info("latin.txt")


# ------------------------------------------------------------------------------ execute
def test_execute_dispatches_and_coerces_numeric_strings(tools: CodeRepositoryTools) -> None:
    out = tools.execute("read_file", {"path": "src/app.py", "start_line": "2", "end_line": None})
    assert out.splitlines()[1] == "   2 |     return 1"


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("read_file", {}, "Missing required parameter 'path'"),
        ("read_file", {"path": None}, "Missing required parameter 'path'"),
        ("read_file", {"path": "a", "lines": 3}, r"Unknown parameter\(s\) .*: lines. Accepted: "
         r"path, start_line \(optional\), end_line \(optional\)"),
        ("read_file", {"path": "a", "start_line": "ten"}, "must be an integer, got 'ten'"),
        ("read_file", {"path": "a", "start_line": True}, "must be an integer"),
        ("read_file", {"path": "a", "start_line": "9" * 5000}, "'start_line' of read_file must "
         "be an integer, got '9999"),
        ("write_file", {"path": "a", "content": {"k": 1}}, "must be a string, got an object"),
        ("read_file", ["a"], "must be a JSON object"),
        ("delete_file", {}, "Unknown tool 'delete_file'. Local tools: list_files, read_file"),
        ("task_complete", {"result": "x"}, "Unknown tool"),
    ],
)  # fmt: skip
def test_execute_rejects_bad_calls_precisely(
    tools: CodeRepositoryTools, name: str, params: object, message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        tools.execute(name, params)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "params", "what"),
    [
        ("read_file", {"path": "\ud800.txt"}, "path"),
        ("get_file_info", {"path": "src/\udfff"}, "path"),
        ("list_files", {"path": "\ud800"}, "path"),
        ("write_file", {"path": "\ud800.txt", "content": "x"}, "path"),
        ("edit_file", {"path": "\ud800.txt", "old_str": "x", "new_str": "y"}, "path"),
        ("search_in_files", {"pattern": "x", "path": "\ud800"}, "path"),
        ("search_in_files", {"pattern": "main\ud800"}, "pattern"),
        ("search_in_files", {"pattern": "main", "file_pattern": "*.py\ud800"}, "file_pattern"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_in_a_path_or_pattern_is_an_observation_not_a_crash(
    tools: CodeRepositoryTools, repo: Path, name: str, params: dict[str, str], what: str
) -> None:
    with pytest.raises(ToolError, match=f"^{what} is not valid text: it holds a lone surrogate"):
        tools.execute(name, params)
    assert sorted(p.name for p in repo.iterdir()) == ["README.md", "src"]  # nothing written


def test_a_name_with_an_undecodable_byte_is_still_reached_by_its_surrogate_escape(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    write(repo, os.fsdecode(b"caf\xff.txt"), "bytes in the name\n")
    assert "bytes in the name" in tools.read_file(os.fsdecode(b"caf\xff.txt"))  # os.listdir's


def test_execute_refuses_commands_unless_allowed(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="--allow-commands"):
        tools.execute("run_command", {"command": "echo hi"})
    with pytest.raises(ToolError, match="--allow-commands"):
        tools.run_command("echo hi")


def test_execute_logs_calls_and_failures_at_debug(tools: CodeRepositoryTools, caplog) -> None:
    # at INFO the agent's log subscriber reports each call once; tools add the details
    caplog.set_level("DEBUG", logger="toy_agent.tools")
    tools.execute("read_file", {"path": "README.md"})
    with pytest.raises(ToolError):
        tools.execute("read_file", {"path": "nope"})
    text = caplog.text
    assert "tool read_file path='README.md'" in text and "tool read_file succeeded" in text
    assert "tool read_file failed: No such file" in text


def test_schemas_match_the_method_signatures() -> None:
    tools = get_available_tools()
    names = [t["name"] for t in tools]
    assert names == ["list_files", "read_file", "write_file", "edit_file", "search_in_files",
                     "get_file_info", "task_complete"]  # fmt: skip
    read = tools[1]["parameters"]
    assert read["required"] == ["path"]
    assert read["properties"]["start_line"]["type"] == "integer"
    assert tools[0]["parameters"]["properties"]["path"]["default"] == "."
    with_commands = [t["name"] for t in get_available_tools(allow_commands=True)]
    assert with_commands[-2:] == ["run_command", "task_complete"]


# --- the confirm preview is the tool's own dry run -----------------------------------------

_LINE_TEXT = st.text(alphabet="ab \t", max_size=4)
# Each file's endings: LF, CRLF, lone CR, or LF and CRLF mixed. (A lone CR next to an LF reads
# back as one CRLF, whatever writes it: a file mixing them is left out.)
_FILE_LINES = st.sampled_from([("\n",), ("\r\n",), ("\r",), ("\n", "\r\n")]).flatmap(
    lambda endings: st.lists(st.tuples(_LINE_TEXT, st.sampled_from(endings)), max_size=6)
)


@pytest.mark.slow  # a long sweep: the whole suite runs it
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    _FILE_LINES,
    st.text(alphabet="ab \t\n\r", max_size=6),
    st.text(alphabet="abc\n", max_size=6),
    st.booleans(),
)
def test_the_edit_preview_is_exactly_the_change_edit_file_then_makes(
    tmp_path: Path, lines, old_str, new_str, take_from_file
) -> None:
    """Whatever the file and the edit, the confirm prompt shows the diff edit_file then makes,
    or the error it then gives: both come from edit_file itself (a dry run)."""
    from toy_agent.diffs import unified_diff
    from toy_agent.parsing import Action
    from toy_agent.view import preview_action

    content = "".join(text + ending for text, ending in lines)
    if take_from_file and content:
        old_str = content[len(content) // 3 : len(content) // 3 + 4]
    target = tmp_path / "f.txt"
    target.write_bytes(content.encode())
    tools = CodeRepositoryTools(tmp_path)
    params = {"path": "f.txt", "old_str": old_str, "new_str": new_str}
    preview = preview_action(Action("edit_file", params), tools)
    assert target.read_bytes() == content.encode()  # the preview wrote nothing
    try:
        tools.edit_file(**params)
    except ToolError as exc:
        assert preview == f"edit_file: {exc} (the tool will refuse it)"
        assert target.read_bytes() == content.encode()
        return
    unified = [
        text.replace("\r\n", "\n").replace("\r", "\n")
        for text in (content, target.read_bytes().decode())
    ]
    assert preview == unified_diff("f.txt", *unified)


def test_the_edit_preview_refuses_what_edit_file_refuses(tmp_path: Path) -> None:
    """The old preview replaced the first of several matches; edit_file refuses them."""
    from toy_agent.parsing import Action
    from toy_agent.view import preview_action

    (tmp_path / "a.py").write_text("x = 1\nx = 1\n")
    edit = Action("edit_file", {"path": "a.py", "old_str": "x = 1", "new_str": "x = 2"})
    preview = preview_action(edit, CodeRepositoryTools(tmp_path))
    assert preview.startswith("edit_file: old_str occurs 2 times in a.py")
    assert preview.endswith("(the tool will refuse it)")


def test_the_write_and_command_previews_say_what_would_happen(tmp_path: Path) -> None:
    from toy_agent.parsing import Action
    from toy_agent.view import preview_action

    (tmp_path / "a.py").write_text("old\n")
    tools = CodeRepositoryTools(tmp_path, allow_commands=True)
    write = preview_action(Action("write_file", {"path": "a.py", "content": "new\n"}), tools)
    assert write == "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-old\n+new\n"
    escape = preview_action(Action("write_file", {"path": "../x", "content": ""}), tools)
    assert "outside the repository" in escape and escape.endswith("(the tool will refuse it)")
    command = preview_action(Action("run_command", {"command": "pytest -q"}), tools)
    assert command == "$ pytest -q"
    assert (tmp_path / "a.py").read_text() == "old\n" and not (tmp_path.parent / "x").exists()
