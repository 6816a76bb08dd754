"""Plan, then act: `--permission-mode plan` and `/plan` (docs/sessions.md#plan-then-act).

The model explores read-only and ends with a plan (its task_complete result), which is saved
in the state folder and shown; on approval the same session carries it out in the mode the
user picks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from toy_agent.sessions import state_dir

CARRY_OUT_MODES = ("edits", "auto", "ask")
QUESTION = "Carry out this plan? edits, auto or ask (the mode to run it in), or no: "


def plans_dir() -> Path:
    """$XDG_STATE_HOME/toy-agent/plans, beside the sessions."""
    return state_dir().parent / "plans"


def save_plan(plan: str, session_id: str) -> Path:
    """The plan as a Markdown file of its own, readable by the user only; its path."""
    folder = plans_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}-{time.strftime('%Y%m%d-%H%M%S')}.md"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(plan.rstrip("\n") + "\n")
    return path


def chosen_mode(answer: str) -> str | None:
    """The mode the answer picks (a whole name or its first letters: `e`, `au`, `as`), or
    None: anything else, an empty line included, is no."""
    word = answer.strip().lower()
    if not word or "no".startswith(word):
        return None
    matches = [mode for mode in CARRY_OUT_MODES if mode.startswith(word)]
    return matches[0] if len(matches) == 1 else None


def carry_out_task(plan: str, path: Path) -> str:
    """The task that carries out an approved plan."""
    return (f"The user approved your plan (saved in {path}). Carry it out now, step by step, "
            f"and check the result as it says; finish with task_complete.\n\n{plan}")  # fmt: skip
