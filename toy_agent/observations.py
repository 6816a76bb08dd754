"""What the model is shown of an action: its result made into an observation.

The rules, in the order they apply: the images the step may still send (context.tool_images),
the text as the wire carries it, secrets redacted, the text capped (cuts), the user's post_tool
hooks told what the model will see, their notes, and a warning when the same call comes a
third time in a row. Each rule that fires leaves a Note (messages.Note) beside the text: the
record reads the notes, never the prose.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from toy_agent import cuts
from toy_agent.budget import ImageBudget, cap_text, tool_images
from toy_agent.hooks import RunHooks
from toy_agent.lint import EditCheck
from toy_agent.messages import CommandResult, Note, ToolOutput, wire_text
from toy_agent.parsing import Action, Observation
from toy_agent.permissions import Refusal

REPEAT_LIMIT = 3
REPEATED = (
    "\n\nWarning: you have called {tool} with the same parameters {times} times in a row. "
    "Repeating it will not change the result; try a different approach, or call "
    "task_complete if you are done."
)


@dataclass(frozen=True)
class ActionResult:
    """What came of one action before the model is shown it: the tool's output or error (or
    the words of its refusal), whether it failed, the seconds the tool took, the check of the
    file it edited, the notes of what the rules did to it; `ran`: False when it was refused."""

    content: str | ToolOutput
    is_error: bool
    seconds: float = 0.0
    edit_check: EditCheck | None = None
    notes: tuple[Note, ...] = ()
    ran: bool = True

    @classmethod
    def of(
        cls,
        content: str | ToolOutput,
        is_error: bool,
        seconds: float,
        edit_check: EditCheck | None = None,
        notes: Iterable[Note] = (),
    ) -> ActionResult:
        """A tool's result. A command's says itself whether it failed (a failing command is
        an error result, as data) and carries its sandbox note."""
        notes = tuple(notes)
        command = content.command if isinstance(content, ToolOutput) else None
        if command is not None:
            is_error = not command.ok
            if command.sandbox_note:
                notes += (Note("sandbox", command.sandbox_note),)
        return cls(content, is_error, seconds, edit_check, notes)

    @classmethod
    def refused(cls, refusal: Refusal) -> ActionResult:
        return cls(refusal.observation, True, notes=(refusal_note(refusal),), ran=False)

    @property
    def command(self) -> CommandResult | None:
        return self.content.command if isinstance(self.content, ToolOutput) else None


@dataclass
class Repeats:
    """The same call made again and again: from the REPEAT_LIMIT-th time in a row on, its
    observation ends with a warning."""

    last_key: str = ""
    count: int = 0

    def warning(self, action: Action) -> tuple[str, Note | None]:
        """The warning to end this action's observation with ("" when none), and its note."""
        key = json.dumps([action.tool_name, action.parameters], sort_keys=True, default=str)
        self.count = self.count + 1 if key == self.last_key else 1
        self.last_key = key
        if self.count < REPEAT_LIMIT:
            return "", None
        note = f"{action.tool_name} called with the same parameters {self.count} times in a row"
        return REPEATED.format(tool=action.tool_name, times=self.count), Note("repeat", note)


@dataclass
class Observer:
    """Makes the observations of one run's actions: sends the images of the models that take
    them (`image_types`), within each step's budget (`new_step` starts one)."""

    image_types: frozenset[str]
    model: str
    redact: Callable[[str], str]
    hooks: RunHooks
    repeats: Repeats = field(default_factory=Repeats)
    images: ImageBudget = field(default_factory=ImageBudget)  # the current step's

    def new_step(self) -> None:
        self.images = ImageBudget()

    def observe(
        self, action: Action, result: ActionResult, cap: int, iteration: int
    ) -> Observation:
        """The observation of `action`, its text cut to `cap` characters (before the hooks'
        notes and the repeat warning)."""
        content, images = tool_images(result.content, self.image_types, self.model, self.images)
        content = self.redact(wire_text(content))
        with cuts.recording() as capped:
            content = cap_text(content, cap, action.tool_name)
        notes = [*result.notes, *cut_notes(capped)]
        if result.ran:
            self.hooks.after(action.tool_name, action.parameters, content, result.is_error,
                             iteration)  # fmt: skip
        for note in self.hooks.notes():
            content += f"\n\n{note}"
            notes.append(Note("hook", note))
        warning, repeated = self.repeats.warning(action)
        content += warning
        notes += [repeated] if repeated else []
        edit_check = result.edit_check if result.edit_check and result.edit_check.note() else None
        return Observation(action, content, result.is_error, images, result.command, edit_check,
                           tuple(notes))  # fmt: skip


def refusal_note(refusal: Refusal) -> Note:
    """The note of an action that did not run: the user declined it, or a rule, the
    permission mode or a hook refused it."""
    reason = refusal.reason
    if refusal.by == "user":
        return Note("declined", "declined by the user" + (f": {reason}" if reason else ""))
    who = {"rule": "a deny rule", "mode": "the permission mode", "hook": "a hook"}
    return Note("refused", f"refused by {who.get(refusal.by, refusal.by)}" +
                (f": {reason}" if reason else ""))  # fmt: skip


def cut_notes(cuts_made: Iterable[tuple[str, str]]) -> list[Note]:
    """The notes of the cuts made: (what was cut, how to see more)."""
    return [Note("cut", f"{what} of its output cut" + (f" ({how})" if how else ""))
            for what, how in cuts_made]  # fmt: skip
