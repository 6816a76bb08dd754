"""Unified diffs: the one writer of every diff toy_agent shows or saves (an edit's result and
--confirm's preview for the model and the user, a run's diff, a session's `/diff`), in the
format `git apply` and `patch` read back, and the one counter of the lines a diff adds and
removes."""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(path: str, before: str | None, after: str | None, *, git: bool = False) -> str:
    """The diff of the file `path` from `before` to `after` (None: the file does not exist on
    that side, /dev/null); "" when nothing changed.

    Lines end at "\\n" only, as git's do (a "\\r" stays in its line, so CRLF files diff as
    they are), and the last line of a side that does not end in one is followed by
    `\\ No newline at end of file`, as git writes it. With `git`, a `diff --git` line and
    `new file mode` or `deleted file mode` come first, as git writes them: they let a new or
    deleted empty file, which has no lines to show, be part of the diff too."""
    if before == after:
        return ""
    tab = "\t" if " " in path else ""  # where the name ends, for `patch`, as git writes it
    lines = difflib.unified_diff(
        _lines(before),
        _lines(after),
        fromfile=f"a/{path}{tab}" if before is not None else "/dev/null",
        tofile=f"b/{path}{tab}" if after is not None else "/dev/null",
    )
    body = "".join(lines)
    if not git:
        return body
    head = f"diff --git a/{path} b/{path}\n"
    if before is None:
        head += "new file mode 100644\n"
    elif after is None:
        head += "deleted file mode 100644\n"
    return head + body


def line_counts(diff: str) -> tuple[int, int]:
    """The lines a one-file diff adds and removes (its header's `---`/`+++` are not lines)."""
    added = removed = 0
    in_hunks = False
    for line in diff.split("\n"):
        if line.startswith("@@"):
            in_hunks = True
        elif in_hunks and line.startswith("+"):
            added += 1
        elif in_hunks and line.startswith("-"):
            removed += 1
    return added, removed


def _lines(text: str | None) -> list[str]:
    """Lines for difflib, each keeping its "\\n"; a last one without it gets the marker."""
    if not text:
        return []
    lines = text.split("\n")
    last = lines.pop()  # "" after a final "\n"
    lines = [line + "\n" for line in lines]
    if last:
        lines.append(f"{last}\n{NO_NEWLINE}")
    return lines
