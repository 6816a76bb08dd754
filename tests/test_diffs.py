"""The one unified-diff writer: what it writes applies with the real `git apply` and `patch`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from toy_agent.diffs import NO_NEWLINE, line_counts, unified_diff

# (before, after) per file; None: the file does not exist on that side.
CHANGES = {
    "final newline on both sides": ("a\nb\nc\n", "a\nB\nc\n"),
    "no final newline on either side": ("a\nb", "a\nc"),
    "final newline added": ("a\nb", "a\nb\n"),
    "final newline removed": ("a\nb\n", "a\nb"),
    "CRLF": ("one\r\ntwo\r\nthree\r\n", "one\r\n2\r\nthree\r\n"),
    "CRLF without a final one": ("one\r\ntwo", "one\r\nzwei"),
    "a lone CR stays inside its line": ("old\rmac\nnext\n", "new\rmac\nnext\n"),
    "a form feed is not a line end": ("page\x0cbreak\nx\n", "page\x0cbreak\ny\n"),
    "emptied": ("a\nb\n", ""),
    "filled from empty": ("", "text"),
    "new": (None, "new file\nlast"),
    "new and empty": (None, ""),
    "deleted": ("gone\n", None),
    "deleted, without a final newline": ("gone", None),
    "deleted and empty": ("", None),
    "a name with spaces": ("x\n", "y\n"),
}


def _name(case: str) -> str:
    return "with spaces.txt" if "spaces" in case else "f.txt"


def _write(folder: Path, name: str, text: str | None) -> None:
    if text is not None:
        (folder / name).write_bytes(text.encode())


def _after(folder: Path, name: str) -> str | None:
    path = folder / name
    return path.read_bytes().decode() if path.exists() else None


@pytest.mark.parametrize("case", list(CHANGES))
def test_git_apply_turns_before_into_after(tmp_path: Path, case: str) -> None:
    before, after = CHANGES[case]
    name = _name(case)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _write(tmp_path, name, before)
    patch = unified_diff(name, before, after, git=True)
    done = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"], cwd=tmp_path, input=patch.encode(),
        capture_output=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode() + patch
    assert _after(tmp_path, name) == after


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
@pytest.mark.parametrize("case", [c for c in CHANGES if "and empty" not in c])
def test_patch_turns_before_into_after(tmp_path: Path, case: str) -> None:
    """GNU patch reads the same text, with or without git's header (a new or deleted empty
    file, which has no lines, needs git's header and is left to git apply)."""
    before, after = CHANGES[case]
    name = _name(case)
    for git in (True, False):
        folder = tmp_path / str(git)
        folder.mkdir()
        _write(folder, name, before)
        patch = unified_diff(name, before, after, git=git)
        done = subprocess.run(
            ["patch", "-p1", "--batch", "--no-backup-if-mismatch"], cwd=folder,
            input=patch.encode(), capture_output=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode() + patch
        assert _after(folder, name) == after


def test_a_side_without_a_final_newline_is_marked_as_git_marks_it() -> None:
    assert unified_diff("f", "x", "y") == (
        f"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x\n{NO_NEWLINE}+y\n{NO_NEWLINE}"
    )
    assert unified_diff("f", "x\n", "x") == f"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x\n+x\n{NO_NEWLINE}"
    assert unified_diff("f", "same", "same") == ""


def test_new_and_deleted_files_name_dev_null_and_git_says_which() -> None:
    new = unified_diff("f", None, "a\n", git=True)
    assert new == (
        "diff --git a/f b/f\nnew file mode 100644\n--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+a\n"
    )
    assert unified_diff("f", "", None, git=True) == "diff --git a/f b/f\ndeleted file mode 100644\n"


def test_the_counts_leave_out_the_header_but_not_a_removed_line_that_looks_like_one() -> None:
    diff = unified_diff("f", "-- x\n++ y\nz\n", "new\n", git=True)
    assert "\n--- x\n" in diff and "\n-++ y\n" in diff
    assert line_counts(diff) == (1, 3)
    assert line_counts(unified_diff("f", "x", "x\n")) == (1, 1)
