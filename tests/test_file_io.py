"""The file tools under faults, over real files: line endings, encodings, long names, failed and
killed writes, unreadable paths, huge lines and concurrent edits."""

from __future__ import annotations

import codecs
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from toy_agent.files import rewrite
from toy_agent.tools import SCAN_MAX_BYTES, STALE_TEMP_SECONDS, CodeRepositoryTools, ToolError

PROJECT = Path(__file__).parent.parent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 1\n")
    return root


@pytest.fixture
def tools(repo: Path) -> CodeRepositoryTools:
    return CodeRepositoryTools(repo)


def run_python(script: str, *, prefix: tuple[str, ...] = ()) -> str:
    """Run `script` in a fresh interpreter (for limits and signals that must not touch the
    test process); its stdout."""
    result = subprocess.run(
        [*prefix, sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------------------------ line endings
def test_edit_keeps_each_lines_own_ending_in_a_mixed_file(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "mixed.txt").write_bytes(b"one\r\ntwo\nthree\r\nfour\r\n")
    out = tools.edit_file("mixed.txt", "two\nthree", "TWO\nthree\ninserted")
    # changed in place: keeps "\n"; kept: keeps "\r\n"; inserted: the dominant "\r\n"
    assert (repo / "mixed.txt").read_bytes() == b"one\r\nTWO\nthree\r\ninserted\r\nfour\r\n"
    assert out.splitlines()[0] == "Edited mixed.txt (line 2). It now reads:"


def test_edit_of_a_cr_only_file_keeps_cr_and_reports_true_line_numbers(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "mac.txt").write_bytes(b"alpha\rbeta\rgamma\r")
    out = tools.edit_file("mac.txt", "beta", "beta\nBETA2")
    assert (repo / "mac.txt").read_bytes() == b"alpha\rbeta\rBETA2\rgamma\r"
    assert out.splitlines() == [
        "Edited mac.txt (line 2). It now reads:",
        "   1 | alpha", "   2 | beta", "   3 | BETA2", "   4 | gamma", "   5 | ",
    ]  # fmt: skip
    (repo / "dup.txt").write_bytes(b"x = 1\ry = 2\rx = 1\r")
    with pytest.raises(ToolError, match=r"occurs 2 times .*lines 1, 3"):
        tools.edit_file("dup.txt", "x = 1", "x = 3")


def test_an_edit_never_joins_a_lone_cr_and_the_next_lines_lf_into_one_ending(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    """Bytes "\\r" + "" + "\\n" would read back as one "\\r\\n": a line would vanish from the
    file the model was just told it edited. The empty line takes the lone CR before it."""
    (repo / "emptied.txt").write_bytes(b"a\rb\nc\n")
    tools.edit_file("emptied.txt", "b", "")
    assert (repo / "emptied.txt").read_bytes() == b"a\r\rc\n"
    (repo / "inserted.txt").write_bytes(b"a\rb\n")
    tools.edit_file("inserted.txt", "a\nb", "a\n\nb")
    assert (repo / "inserted.txt").read_bytes() == b"a\r\rb\n"


_LINES = st.lists(
    st.tuples(st.sampled_from(["", "x", "y z"]), st.sampled_from(["\n", "\r", "\r\n"])),
    min_size=1,
    max_size=8,
)


@pytest.mark.slow  # a long sweep: the whole suite runs it
@given(lines=_LINES, start=st.integers(0, 20), length=st.integers(1, 20), new=st.text("xy\n"))
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_an_edited_file_reads_back_as_exactly_the_text_the_edit_made(
    tmp_path: Path, lines: list[tuple[str, str]], start: int, length: int, new: str
) -> None:
    """Whatever the mix of endings, the file read back (every ending seen as "\\n", as the
    model sees it) is the old text with old_str replaced by new_str: no line is lost or
    gained by the endings kept or chosen."""
    root = tmp_path / "prop"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    data = "".join(text + ending for text, ending in lines)
    (root / "f.txt").write_bytes(data.encode())
    seen = data.replace("\r\n", "\n").replace("\r", "\n")
    old = seen[start : start + length]
    overlapping = sum(seen.startswith(old, i) for i in range(len(seen)))
    assume(old and overlapping == 1 and old != new)
    CodeRepositoryTools(root).edit_file("f.txt", old, new)
    written = (root / "f.txt").read_bytes().decode()
    expected = seen[:start] + new + seen[start + len(old) :]
    assert written.replace("\r\n", "\n").replace("\r", "\n") == expected


def test_read_and_info_count_cr_only_lines(tools: CodeRepositoryTools, repo: Path) -> None:
    (repo / "mac.txt").write_bytes(b"a\rb\rc")
    assert tools.read_file("mac.txt").splitlines() == [
        "mac.txt (lines 1-3 of 3):", "   1 | a", "   2 | b", "   3 | c",
    ]  # fmt: skip
    info = tools.get_file_info("mac.txt")
    assert "lines: 3" in info and "line endings: 2 CR" in info
    (repo / "mixed.txt").write_bytes(b"a\r\nb\r\nc\n")
    assert "line endings: 2 CRLF, 1 LF" in tools.get_file_info("mixed.txt")
    assert "line endings" not in tools.get_file_info("src/app.py")


def test_edit_matches_crlf_old_str_on_any_file_and_refuses_an_endings_only_change(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    tools.edit_file("src/app.py", "def main():\r\n    return 1", "def main():\r\n    return 2")
    assert (repo / "src/app.py").read_bytes() == b"def main():\n    return 2\n"
    with pytest.raises(ToolError, match="differ only in line endings"):
        tools.edit_file("src/app.py", "main():\n", "main():\r\n")


def test_write_file_keeps_crlf_or_cr_used_throughout(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "win.txt").write_bytes(b"old\r\nlines\r\n")
    out = tools.write_file("win.txt", "new\ntext\n")
    assert (repo / "win.txt").read_bytes() == b"new\r\ntext\r\n"
    assert out == (
        "Wrote win.txt: 11 bytes, 2 lines (overwrote the previous 12 bytes; "
        "kept its CRLF line endings)."
    )
    (repo / "mac.txt").write_bytes(b"old\r")
    tools.write_file("mac.txt", "a\nb")
    assert (repo / "mac.txt").read_bytes() == b"a\rb"


@pytest.mark.parametrize(
    ("before", "content"),
    [
        (b"a\r\nb\n", "x\ny\n"),  # mixed: not CRLF throughout
        (b"a\r\nb\r\n", "x\r\ny\n"),  # content chose its own endings
        (None, "x\ny\n"),  # a new file
        (b"a\nb\n", "x\r\ny\r\n"),
    ],
)
def test_write_file_otherwise_writes_content_as_given(
    tools: CodeRepositoryTools, repo: Path, before: bytes | None, content: str
) -> None:
    if before is not None:
        (repo / "f.txt").write_bytes(before)
    out = tools.write_file("f.txt", content)
    assert (repo / "f.txt").read_bytes() == content.encode()
    assert "kept" not in out


# ------------------------------------------------------------------------------ encodings
BOMS = {
    "UTF-16 LE": ("utf-16-le", codecs.BOM_UTF16_LE),
    "UTF-16 BE": ("utf-16-be", codecs.BOM_UTF16_BE),
    "UTF-32 LE": ("utf-32-le", codecs.BOM_UTF32_LE),
    "UTF-32 BE": ("utf-32-be", codecs.BOM_UTF32_BE),
    "UTF-8": ("utf-8", codecs.BOM_UTF8),
}


def bom_text(name: str, text: str) -> bytes:
    codec, bom = BOMS[name]
    return bom + text.encode(codec)


@pytest.mark.parametrize("name", BOMS)
def test_read_file_decodes_text_with_a_byte_order_mark(
    tools: CodeRepositoryTools, repo: Path, name: str
) -> None:
    (repo / "notes.txt").write_bytes(bom_text(name, "héllo\r\nwörld 🌍\r\n"))
    assert tools.read_file("notes.txt").splitlines() == [
        "notes.txt (lines 1-2 of 2):", "   1 | héllo", "   2 | wörld 🌍",
        f"[Note: notes.txt is {name} text with a byte-order mark, shown decoded; edit_file "
        "and write_file keep its encoding.]",
    ]  # fmt: skip
    info = tools.get_file_info("notes.txt")
    assert f"type: file (text, {name} with a byte-order mark)" in info
    assert "lines: 2" in info and "line endings: 2 CRLF" in info


@pytest.mark.parametrize("name", BOMS)
def test_edit_and_write_keep_the_encoding_and_byte_order_mark(
    tools: CodeRepositoryTools, repo: Path, name: str
) -> None:
    (repo / "notes.txt").write_bytes(bom_text(name, "héllo\r\nwörld\r\n"))
    out = tools.edit_file("notes.txt", "wörld", "wörld\nnew 🌍")
    assert (repo / "notes.txt").read_bytes() == bom_text(name, "héllo\r\nwörld\r\nnew 🌍\r\n")
    assert "   3 | new 🌍" in out
    out = tools.write_file("notes.txt", "\ufeffrewritten\n")  # a BOM in content is not doubled
    assert (repo / "notes.txt").read_bytes() == bom_text(name, "rewritten\r\n")
    assert f"kept its {name} encoding with byte-order mark and its CRLF line endings" in out


def test_nul_characters_after_a_byte_order_mark_are_binary(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "blob.bin").write_bytes(codecs.BOM_UTF16_LE + bytes(100))
    with pytest.raises(ToolError, match="binary file"):
        tools.read_file("blob.bin")
    assert "type: file (binary)" in tools.get_file_info("blob.bin")


def test_edit_refuses_utf16_it_cannot_write_back(tools: CodeRepositoryTools, repo: Path) -> None:
    broken = bom_text("UTF-16 LE", "ok\n") + b"\x00\xd8" + "x\n".encode("utf-16-le")
    (repo / "broken.txt").write_bytes(broken)  # a lone surrogate
    with pytest.raises(ToolError, match=r"not valid UTF-16 LE \(at byte 8\)"):
        tools.edit_file("broken.txt", "ok", "fine")
    assert (repo / "broken.txt").read_bytes() == broken
    assert "some bytes are not valid UTF-16 LE" in tools.read_file("broken.txt")


# ------------------------------------------------------------------------------ names, paths
@pytest.mark.parametrize(
    "name", ["a" * 251 + ".txt", "日" * 85, "🌍" * 63 + "abc", "é" * 126 + "abc"]
)
def test_a_255_byte_file_name_can_be_written_and_edited(
    tools: CodeRepositoryTools, repo: Path, name: str
) -> None:
    assert len(os.fsencode(name)) == 255
    assert "(created)" in tools.write_file(f"src/{name}", "one\n")
    tools.write_file(f"src/{name}", "two\n")
    tools.edit_file(f"src/{name}", "two", "three")
    assert (repo / "src" / name).read_text() == "three\n"
    assert names(repo / "src") == sorted(["app.py", name])  # no temp file left


@pytest.mark.parametrize("path", ["newdir/", "newdir/.", "src/", "newdir//", "."])
def test_a_path_naming_a_folder_is_refused_for_writing(
    tools: CodeRepositoryTools, repo: Path, path: str
) -> None:
    with pytest.raises(ToolError, match="names a folder, not a file"):
        tools.write_file(path, "x")
    assert names(repo) == ["src"] and names(repo / "src") == ["app.py"]


def test_a_file_path_with_a_trailing_slash_is_not_edited(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    with pytest.raises(ToolError, match="names a folder"):
        tools.edit_file("src/app.py/", "return 1", "return 2")
    assert (repo / "src/app.py").read_text() == "def main():\n    return 1\n"


# ------------------------------------------------------------------------------ failed writes
def test_a_failed_write_removes_the_folders_it_made(repo: Path) -> None:
    """The file-size limit makes the write itself fail (EFBIG, as ENOSPC would), even for root."""
    out = run_python(f"""
        import resource, signal
        from toy_agent.tools import CodeRepositoryTools, ToolError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        tools = CodeRepositoryTools({str(repo)!r})
        for path in ("new/deeper/data.txt", "src/gen/data.txt"):
            try:
                tools.execute("write_file", {{"path": path, "content": "y" * 5000}})
            except ToolError as exc:
                print("ToolError:", exc)
    """)
    assert out.splitlines() == [
        "ToolError: Could not write new/deeper/data.txt: File too large; nothing was created.",
        "ToolError: Could not write src/gen/data.txt: File too large; nothing was created.",
    ]
    assert names(repo) == ["src"] and names(repo / "src") == ["app.py"]


def test_a_killed_writes_temp_file_is_hidden_and_cleared_once_stale(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    script = f"""
        import os, signal
        from toy_agent.tools import CodeRepositoryTools
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # kill -9 mid-write
        CodeRepositoryTools({str(repo)!r}).write_file("src/app.py", "half written")
    """
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=PROJECT)
    assert killed.returncode == -9
    [temp] = [p for p in (repo / "src").iterdir() if p.name != "app.py"]
    assert temp.name.startswith(".app.py.") and temp.name.endswith(".tmp")
    assert (repo / "src/app.py").read_text() == "def main():\n    return 1\n"
    assert temp.name not in tools.list_files()

    tools.write_file("src/other.py", "x = 1\n")  # a fresh temp file may be a live write
    assert temp.exists()
    old = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(temp, (old, old))
    tools.write_file("src/other.py", "x = 2\n")
    assert names(repo / "src") == ["app.py", "other.py"]


def test_stale_temp_clearing_touches_only_our_own_regular_files(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    src = repo / "src"
    ours = ".app.py.0123abcd.tmp"
    lookalikes = [".app.py.tmp", ".app.py.0123ABCD.tmp", "app.py.0123abcd.tmp",
                  ".app.py.0123abcd.tmp.bak", "." + "x" * 101 + ".0123abcd.tmp"]  # fmt: skip
    for name in [ours, *lookalikes]:
        (src / name).write_text("x")
    (src / ".dir.0123abcd.tmp").mkdir()
    (src / ".link.0123abcd.tmp").symlink_to(src / "app.py")
    old = time.time() - STALE_TEMP_SECONDS - 60
    for p in src.iterdir():
        os.utime(p, (old, old), follow_symlinks=False)
    tools.write_file("src/new.py", "x\n")
    assert names(src) == sorted(
        ["app.py", "new.py", ".dir.0123abcd.tmp", ".link.0123abcd.tmp", *lookalikes]
    )
    assert (src / "app.py").exists()


# ------------------------------------------------------------------------------ unreadable
@pytest.mark.slow
def test_unreadable_paths_are_reported_as_unreadable(repo: Path) -> None:
    """Permission bits bind root too once it gives up CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("needs setpriv to drop root's permission override")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")
    (repo / "locked").mkdir()
    (repo / "locked" / "inner.txt").write_text("x\n")
    (repo / "secret.txt").write_text("s\n")
    (repo / "locked").chmod(0)
    (repo / "secret.txt").chmod(0)
    try:
        out = run_python(f"""
            from toy_agent.tools import CodeRepositoryTools, ToolError
            tools = CodeRepositoryTools({str(repo)!r})
            edit = {{"old_str": "s", "new_str": "t"}}
            for name, path in [
                ("read_file", "secret.txt"), ("get_file_info", "secret.txt"),
                ("edit_file", "secret.txt"), ("get_file_info", "locked"),
                ("read_file", "locked/inner.txt"),
            ]:
                params = {{"path": path, **(edit if name == "edit_file" else {{}})}}
                try:
                    print(tools.execute(name, params).replace(chr(10), " | "))
                except ToolError as exc:
                    print("ToolError:", exc)
        """, prefix=prefix)  # fmt: skip
    finally:
        (repo / "locked").chmod(0o755)
    assert out.splitlines() == [
        "ToolError: Cannot read secret.txt: Permission denied.",
        "ToolError: Cannot read secret.txt: Permission denied.",
        "ToolError: Cannot read secret.txt: Permission denied.",
        "ToolError: Cannot open folder locked: Permission denied.",
        "ToolError: Cannot read locked/inner.txt: Permission denied.",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_and_folder_are_not_called_binary_or_empty(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    (repo / "locked").mkdir()
    (repo / "secret.txt").write_text("s\n")
    (repo / "secret.txt").chmod(0)
    (repo / "locked").chmod(0)
    try:
        for call in (lambda: tools.read_file("secret.txt"),
                     lambda: tools.get_file_info("secret.txt")):  # fmt: skip
            with pytest.raises(ToolError, match="Cannot read secret.txt: Permission denied"):
                call()
        with pytest.raises(ToolError, match="Cannot open folder locked: Permission denied"):
            tools.get_file_info("locked")
    finally:
        (repo / "locked").chmod(0o755)


@pytest.mark.slow
def test_an_unreadable_file_can_still_be_replaced(repo: Path) -> None:
    """write_file reads the old file only for its format: not being able to is no reason to
    refuse, as a plain rename would succeed."""
    prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")
    if os.geteuid() != 0:
        prefix = ()
    elif not shutil.which("setpriv"):
        pytest.skip("needs setpriv to drop root's permission override")
    (repo / "secret.txt").write_text("s\n")
    (repo / "secret.txt").chmod(0)
    out = run_python(f"""
        from toy_agent.tools import CodeRepositoryTools
        print(CodeRepositoryTools({str(repo)!r}).write_file("secret.txt", "t\\n"))
    """, prefix=prefix)  # fmt: skip
    assert out == "Wrote secret.txt: 2 bytes, 1 lines (overwrote the previous 2 bytes).\n"
    assert stat.S_IMODE((repo / "secret.txt").stat().st_mode) == 0


# ------------------------------------------------------------------------------ huge lines
def sparse_text_file(path: Path, size: int) -> None:
    """Text for its first 16 KB (text to the binary sniff), then a hole up to `size` bytes."""
    with path.open("wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(1, 2001)))
        f.truncate(size)
    if path.stat().st_blocks * 512 > 100 * 1024**2:
        pytest.skip("this filesystem does not keep sparse files sparse")


@pytest.mark.slow
def test_a_huge_file_is_never_read_whole_by_a_run_that_replaces_it(repo: Path) -> None:
    """A 1 TB sparse file (a repository can hold one): edit_file refuses it, write_file
    replaces it, and neither the diff nor the undo backup reads it; nothing takes long."""
    from fakes import ScriptedLlm, finishes, xml_action

    from toy_agent.agent import ReactAgent

    huge = repo / "huge.log"
    sparse_text_file(huge, 1 << 40)
    tools = CodeRepositoryTools(repo)
    with pytest.raises(ToolError, match=r"huge.log is 1,099,511,627,776 bytes; edit_file"):
        tools.edit_file("huge.log", "line 1", "first")
    llm = ScriptedLlm(
        xml_action("read_file", path="huge.log", start_line=2, end_line=2),
        xml_action("get_file_info", path="huge.log"),
        xml_action("write_file", path="huge.log", content="short now\n"),
        xml_action("task_complete", result="replaced"),
    )
    result = finishes(lambda: ReactAgent(llm, tools=tools).run_result("shrink it"), 60)

    assert result.outcome == "completed"
    assert "   2 | line 2" in llm.requests[1]["messages"][-1].content
    assert "lines: at least 2,001 (in the first 256 MB)" in llm.requests[2]["messages"][-1].content
    assert huge.read_text() == "short now\n"
    diff = result.diffs["huge.log"]
    assert "-(1,099,511,627,776 bytes, too big to diff" in diff and "+short now" in diff


@pytest.mark.slow
def test_reading_around_a_2gb_line_keeps_memory_bounded(repo: Path) -> None:
    """3000 short lines, then a sparse 2 GB run of NULs ending in one byte: that last "line"
    must never be loaded whole, checked under a 1 GB address-space limit, nor read to its
    end (a sparse file can claim terabytes): the read stops after SCAN_MAX_BYTES."""
    big = repo / "big.log"
    head = b"".join(b"line %d\n" % i for i in range(1, 3001))
    with big.open("wb") as f:
        f.write(head)
        f.seek(2 * 1024**3)
        f.write(b"x")
    if big.stat().st_blocks * 512 > 100 * 1024**2:
        big.unlink()
        pytest.skip("this filesystem does not keep sparse files sparse")
    try:
        out = run_python(f"""
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
            from toy_agent.tools import CodeRepositoryTools
            tools = CodeRepositoryTools({str(repo)!r})
            for start, end in ((2001, 2010), (2995, None), (3001, None)):
                print(tools.read_file("big.log", start, end))
            print(tools.get_file_info("big.log"))
        """)
    finally:
        big.unlink()  # and its cached pages with it
    assert "big.log (lines 2001-2010 of at least 3001):\n2001 | line 2001\n" in out
    assert "2010 | line 2010\n" in out and "big.log (lines 2995-3000 of at least 3001):" in out
    assert "read_file with start_line=3001" in out
    assert f"only its first {SCAN_MAX_BYTES >> 20} MB" in out
    read = SCAN_MAX_BYTES - len(head)
    assert f"3001 | {chr(0) * 4000} [… over {read - 4000:,} characters cut: read_file" in out
    assert f"lines: at least 3,001 (in the first {SCAN_MAX_BYTES >> 20} MB)" in out


@pytest.mark.parametrize("split", [b"\r\n", "é".encode()])
def test_a_line_ending_or_character_split_between_read_chunks_stays_whole(
    tools: CodeRepositoryTools, repo: Path, split: bytes
) -> None:
    chunk = 1 << 20  # what the tools read at a time
    first = b"a" * (chunk - 1) + split[:1]
    (repo / "f.txt").write_bytes(first + split[1:] + b"\r\nlast\r\n")
    info = tools.get_file_info("f.txt")
    lines = 3 if split == b"\r\n" else 2
    assert f"lines: {lines}" in info and "UTF-8" in info and "not valid" not in info
    assert tools.read_file("f.txt", lines).endswith(f"{lines} | last")


# ------------------------------------------------------------------------------ concurrency
@pytest.mark.slow
def test_concurrent_edits_of_one_file_are_never_lost(
    tools: CodeRepositoryTools, repo: Path
) -> None:
    n = 200
    anchors = {who: [f"anchor {who} {i:03d}" for i in range(n)] for who in "AB"}
    (repo / "shared.txt").write_text("".join(f"{a}\n" for a in anchors["A"] + anchors["B"]))
    done: dict[str, list[str]] = {"A": [], "B": []}
    refused: list[str] = []

    def agent(who: str) -> None:
        own = CodeRepositoryTools(repo)  # as a second agent would have
        for anchor in anchors[who]:
            marker = anchor.replace("anchor", "marker")
            try:
                own.edit_file("shared.txt", anchor + "\n", f"{anchor}\n{marker}\n")
                done[who].append(marker)
            except ToolError as exc:
                refused.append(str(exc))

    threads = [threading.Thread(target=agent, args=(who,)) for who in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = (repo / "shared.txt").read_text().splitlines()
    present = {line for line in final if line.startswith("marker")}
    assert refused == []
    assert present == set(done["A"] + done["B"]) and len(present) == 2 * n
    assert len(final) == 4 * n


@pytest.mark.slow
def test_concurrent_writes_to_one_folder_all_land(repo: Path) -> None:
    def agent(who: str) -> None:
        own = CodeRepositoryTools(repo)
        for i in range(100):
            own.write_file(f"out/{who}{i}.txt", f"{who} {i}\n")

    threads = [threading.Thread(target=agent, args=(who,)) for who in "ABC"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(names(repo / "out")) == 300  # and no temp files


def test_a_rewrite_refuses_to_overwrite_a_change_made_after_its_read(repo: Path) -> None:
    """edit_file and write_file replace a file through `files.rewrite`: a program that takes
    no lock (an editor saving with a rename) and writes the file after the read, before the
    replace, keeps its change, and the tool says why it wrote nothing."""
    with rewrite(repo, ("src", "app.py")) as file:
        with file.open() as f:
            edited = f.read().replace(b"return 1", b"return 2")
        (repo / "src/.editor-save").write_text("def main():\n    return 'editor'\n")
        os.replace(repo / "src/.editor-save", repo / "src/app.py")  # the editor's save
        with pytest.raises(ToolError, match="changed by another program .* not written"):
            file.replace(edited)
    assert (repo / "src/app.py").read_text() == "def main():\n    return 'editor'\n"
    assert names(repo / "src") == ["app.py"]


def test_files_are_replaced_atomically_in_one_place_only():
    """Every atomic write (repository files, trajectories, sessions, undo, batch results) goes
    through toy_agent.files, so a fix to how files are replaced is made once."""
    replacing = sorted(
        path.name
        for path in (PROJECT / "toy_agent").glob("*.py")
        if "os.replace(" in path.read_text() or "os.rename(" in path.read_text()
    )
    assert replacing == ["files.py"]


def test_atomic_write_replaces_a_file_whole_and_keeps_or_sets_its_mode(tmp_path: Path):
    from toy_agent.files import atomic_write

    target = tmp_path / "trajectory.json"
    target.write_text("old\n")
    target.chmod(0o640)
    atomic_write(target, "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    atomic_write(tmp_path / "session.json", b"private\n", mode=0o600)
    assert stat.S_IMODE((tmp_path / "session.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.json", "trajectory.json"]
