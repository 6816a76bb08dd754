"""What the model is shown of an action (toy_agent.observations): the rules in their order,
each leaving its note. The loop's own tests (test_agent.py) see the same through a run."""

from __future__ import annotations

import base64
from pathlib import Path

from toy_agent.hooks import HOOK_OBJECTS, Hooks, RunHooks
from toy_agent.lint import EditCheck, Finding
from toy_agent.messages import CommandResult, Image, Note, ToolOutput
from toy_agent.observations import REPEAT_LIMIT, ActionResult, Observer, Repeats
from toy_agent.parsing import Action
from toy_agent.permissions import Refusal

READ = Action("read_file", {"path": "a.py"})
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()


def observer(tmp_path: Path, *hooks: str, image_types: frozenset[str] = frozenset()) -> Observer:
    """A run's observer redacting `s3cret`, with the user's hooks `hooks` on read_file."""
    redact = lambda text: text.replace("s3cret", "[REDACTED]")  # noqa: E731
    run_hooks = RunHooks(Hooks.parse(hooks), tmp_path, "auto", {"read_file"}, redact,
                         lambda event: None)  # fmt: skip
    return Observer(image_types, "a-model", redact, run_hooks)


def test_the_same_call_a_third_time_in_a_row_is_warned_about_and_noted():
    repeats = Repeats()
    said = [repeats.warning(READ) for _ in range(REPEAT_LIMIT + 1)]

    assert said[: REPEAT_LIMIT - 1] == [("", None)] * (REPEAT_LIMIT - 1)
    text, note = said[REPEAT_LIMIT - 1]
    assert text.startswith("\n\nWarning: you have called read_file with the same parameters 3 ")
    assert note == Note("repeat", "read_file called with the same parameters 3 times in a row")
    assert "4 times" in said[-1][0]


def test_another_call_between_starts_the_count_again():
    repeats = Repeats()
    for action in (READ, READ, Action("read_file", {"path": "b.py"}), READ, READ):
        text, _ = repeats.warning(action)
    assert text == ""


def test_a_commands_result_says_itself_whether_it_failed_and_carries_its_sandbox_note():
    failed = CommandResult("make", 2, 0.1, sandbox_note="the sandbox refused a write")
    result = ActionResult.of(ToolOutput("exit 2", command=failed), False, 0.1)

    assert result.is_error and result.command == failed
    assert result.notes == (Note("sandbox", "the sandbox refused a write"),)
    passed = ActionResult.of(ToolOutput("ok", command=CommandResult("true", 0, 0.1)), True, 0.1)
    assert not passed.is_error and passed.notes == ()


def test_a_refused_action_is_an_error_that_did_not_run_with_who_refused_it():
    declined = ActionResult.refused(Refusal("user", "not now", "The user declined: not now"))
    by_rule = ActionResult.refused(Refusal("rule", "deny rule `rm*`", "Refused."))

    assert declined.is_error and not declined.ran
    assert declined.notes == (Note("declined", "declined by the user: not now"),)
    assert by_rule.notes == (Note("refused", "refused by a deny rule: deny rule `rm*`"),)


def test_an_observation_is_redacted_cut_then_ends_with_the_hooks_notes(tmp_path):
    seen = observer(tmp_path, "post_tool=echo 'too long' >&2; exit 2")
    text = "s3cret " + "x" * 5_000

    observation = seen.observe(READ, ActionResult.of(text, False, 0.1), 2_000, 1)

    content = observation.content
    assert content.startswith("[REDACTED] xxx") and "s3cret" not in content
    assert content.endswith("\n\n" + HOOK_OBJECTS.format(reason="too long"))
    assert len(content) < 2_000 + 200
    assert [note.kind for note in observation.notes] == ["cut", "hook"]
    assert not observation.is_error


def test_a_refused_action_runs_no_post_tool_hook_but_gets_the_notes_waiting(tmp_path):
    seen = observer(tmp_path, "pre_tool=echo 'looked'", f"post_tool=touch {tmp_path / 'ran'}")
    assert seen.hooks.before("read_file", {"path": "a.py"}, 1) is None
    refused = ActionResult.refused(Refusal("user", "", "The user declined."))

    observation = seen.observe(READ, refused, 2_000, 1)

    assert not (tmp_path / "ran").exists()
    assert observation.content == "The user declined.\n\nNote from the user's pre_tool hook: looked"
    assert [note.kind for note in observation.notes] == ["declined", "hook"]


def test_an_observation_keeps_an_edit_check_only_when_it_has_something_to_say(tmp_path):
    seen = observer(tmp_path)
    quiet = ActionResult.of("Edited a.py", False, 0.1, EditCheck("a.py"))
    found = EditCheck("a.py", errors=(Finding(2, "missing ')'"),))

    assert seen.observe(READ, quiet, 2_000, 1).edit_check is None
    assert seen.observe(READ, ActionResult.of("x", False, 0.1, found), 2_000, 1).edit_check == found


def test_a_steps_images_go_to_a_model_that_takes_them_and_each_step_starts_afresh(tmp_path):
    seen = observer(tmp_path, image_types=frozenset({"image/png"}))
    shot = ToolOutput("a screenshot", (Image("image/png", PNG, 72),))

    first = seen.observe(READ, ActionResult.of(shot, False, 0.1), 2_000, 1)
    blind = observer(tmp_path).observe(READ, ActionResult.of(shot, False, 0.1), 2_000, 1)

    assert len(first.images) == 1 and seen.images.count == 1
    assert blind.images == () and blind.content.startswith("a screenshot\n")
    seen.new_step()
    assert seen.images.count == 0
