"""What a run tells the person and the script watching it: complete streams, the diff in the
JSON, one error line per failure, a diverged replay's difference, keys masked sensibly. All
through the real CLI, its stdout and its stderr."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from cli_helpers import ROOT, cli_environment, quickest_provider_env, run_cli, run_main, toy_agent
from fake_providers import FakeProvider, error_reply
from fakes import wait_until, write_replay, xml_action

from toy_agent.llm import first_difference
from toy_agent.redaction import mask_key

pytestmark = pytest.mark.usefixtures("clean_env")


# --- 7: complete streams ----------------------------------------------------------------------


def test_stream_json_has_an_event_for_every_step_an_unparsable_reply_too(repo, tmp_path, capsys):
    recording = write_replay(
        tmp_path / "r.json",
        "I will just say it: the file prints helo.",  # no action: the model is told
        xml_action("read_file", path="hello.py"),
        xml_action("task_complete", result="it prints helo"),
    )
    done = run_main(capsys, "--task", "what does it print?", "--repo", str(repo), "--replay",
                    str(recording), "--output", "stream-json")  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines()]

    assert done.returncode == 0, done.stderr
    assert [e["type"] for e in events] == [
        "run_started",
        *["step_started", "llm_response", "step_finished"],
        *["step_started", "llm_response", "tool_started", "tool_finished", "step_finished"],
        *["step_started", "llm_response", "step_finished"],
        "run_finished",
    ]
    started, finished = events[0], events[-1]
    assert started["schema_version"] == finished["schema_version"] == 1
    assert started["session"] == finished["session"] and started["session"]
    assert started["permission_mode"] == "auto"
    unparsed = events[3]
    assert unparsed["iteration"] == 1 and unparsed["tools"] == []
    assert "No <ACTION> block found" in unparsed["parse_error"]
    assert events[8]["parse_error"] is None and events[8]["tools"] == ["read_file"]
    assert events[-2]["tools"] == ["task_complete"]


def test_output_json_carries_the_run_s_diff_with_secrets_redacted(repo, tmp_path, capsys):
    key = "sk-proj-" + "A1b2C3d4" * 5
    recording = write_replay(
        tmp_path / "r.json",
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
        xml_action("write_file", path="settings.py", content=f"API_KEY = '{key}'\n"),
        xml_action("task_complete", result="done"),
    )
    done = run_main(capsys, "--task", "fix", "--repo", str(repo), "--replay", str(recording),
                    "--output", "json")  # fmt: skip
    result = json.loads(done.stdout)

    assert done.returncode == 0, done.stderr
    assert result["schema_version"] == 1 and result["diff_truncated"] is False
    diff = result["diff"]
    assert "--- a/hello.py\n+++ b/hello.py\n" in diff
    assert "-print('helo')\n+print('hello')\n" in diff
    assert "--- /dev/null\n+++ b/settings.py\n" in diff
    assert key not in done.stdout and "[REDACTED]" in diff


def test_output_json_s_diff_is_bounded_and_says_it_was_cut(repo, tmp_path, capsys):
    big = "".join(f"line {n}: {'x' * 60}\n" for n in range(3000))  # about 200 KB
    recording = write_replay(
        tmp_path / "r.json",
        xml_action("write_file", path="big.txt", content=big),
        xml_action("task_complete", result="done"),
    )
    done = run_main(capsys, "--task", "write", "--repo", str(repo), "--replay", str(recording),
                    "--output", "json", "--context-budget", "400000")  # fmt: skip
    result = json.loads(done.stdout)

    assert result["diff_truncated"] is True
    assert len(result["diff"]) < 100_100
    last = result["diff"].splitlines()[-1]
    assert last.startswith("[… ") and last.endswith(
        " characters cut: git diff in the repository shows all of it]"
    )
    assert result["diff"].splitlines()[-2].startswith("+line ")  # cut at a line's end


# --- 8: one error, once -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_rejected_key_is_one_error_line_and_the_summary(repo):
    with FakeProvider() as server:
        server.enqueue(error_reply(401, "invalid x-api-key"))
        done = run_cli("--task", "x", "--repo", str(repo), env=quickest_provider_env(server))

    assert done.returncode == 3
    mentions = [line for line in done.stderr.splitlines() if "invalid x-api-key" in line]
    assert mentions == [
        "toy-agent: error: openai API error 401: invalid x-api-key — check OPENAI_API_KEY"
    ]
    assert "invalid x-api-key" not in done.stdout
    assert "✗ not completed (provider_error)" in done.stdout


def test_retries_run_out_once_naming_what_to_do(repo, capsys):
    with FakeProvider() as server:
        server.enqueue(*[error_reply(503, "overloaded", retry_after="0")] * 3)
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--max-retries", "2", "-q",
                        env=quickest_provider_env(server))  # fmt: skip

    assert done.returncode == 3
    lines = done.stderr.splitlines()
    assert lines == [
        "WARNING openai API error 503: overloaded; retry 1/2 in 0.0s",
        "WARNING openai API error 503: overloaded; retry 2/2 in 0.0s",
        "toy-agent: error: openai API error 503: overloaded — try again later, or raise "
        "--max-retries (gave up after 2 retries)",
    ]
    assert "overloaded" not in done.stdout


def test_with_output_json_the_error_line_is_on_stderr_and_the_error_in_the_object(repo, capsys):
    with FakeProvider() as server:
        server.enqueue(error_reply(401, "invalid x-api-key"))
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--output", "json",
                        env=quickest_provider_env(server))  # fmt: skip

    result = json.loads(done.stdout)
    assert result["outcome"] == "provider_error" and "invalid x-api-key" in result["error"]
    assert done.stderr.count("invalid x-api-key") == 1


# --- 9: a diverged replay shows the difference --------------------------------------------------


@pytest.mark.slow
def test_a_diverged_replay_shows_the_first_differing_line_of_both(repo, tmp_path, capsys):
    filler = "".join(f"# filler line {n} that pushes the change far down the file\n"
                     for n in range(30))  # fmt: skip
    (repo / "greet.py").write_text(filler + "GREETING = 'helo, world'  # said at start-up\n")
    recording = write_replay(
        tmp_path / "r.json",
        xml_action("read_file", path="greet.py"),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "t.json"
    first = run_main(capsys, "--task", "read", "--repo", str(repo), "--replay", str(recording),
                     "--trajectory", str(trajectory))  # fmt: skip
    assert first.returncode == 0, first.stderr
    (repo / "greet.py").write_text(filler + "GREETING = 'hello, world'  # said at start-up\n")

    done = run_cli("--task", "read", "--repo", str(repo), "--replay", str(trajectory),
                   "--output", "json")  # fmt: skip
    error = json.loads(done.stdout)["error"]

    assert done.returncode == 1
    assert "first in line 32 of the observation" in error  # read_file heads with a line
    recorded, now = error.split("Recorded: ", 1)[1].split("; now: ")
    assert "GREETING = 'hel" in recorded and "lo, world'  # said" in recorded
    assert "GREETING = 'hel" in now and "llo, world'  # said" in now


def test_the_first_difference_is_shown_with_context_either_side():
    recorded = "a\nthe quick brown fox jumps over the lazy dog\nz"
    now = "<OBSERVATION>a\nthe quick brown cat jumps over the lazy dog\nz</OBSERVATION>"
    assert first_difference(recorded, now, context=8) == (
        2, "…k brown fox jump…", "…k brown cat jump…"
    )  # fmt: skip
    assert first_difference("abc", "xyz", context=2) == (1, "ab…", "xy…")


# --- 10: masking that means it ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "masked"),
    [
        ("Incorrect API key provided: x. See https://x.example/x-key",
         "x", "Incorrect API key provided: ***. See https://x.example/x-key"),
        ("bad key 'abc' for max_tokens", "abc", "bad key '***' for max_tokens"),
        ("index x of box", "x", "index *** of box"),
        ("the key sk-long-enough-key leaked", "sk-long-enough-key", "the key *** leaked"),
        ("tokens: xx, max: x1", "x", "tokens: xx, max: x1"),
    ],
)  # fmt: skip
def test_a_key_under_8_characters_is_masked_only_as_a_whole_token(text, key, masked):
    assert mask_key(text, key) == masked


def test_a_one_letter_key_leaves_the_provider_s_error_readable(repo, capsys):
    with FakeProvider() as server:
        server.enqueue(error_reply(401, "Incorrect API key provided: x. Find yours at "
                                   "https://platform.example/account/api-keys."))  # fmt: skip
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--model", "gpt-5-mini",
                        env=server.env("openai", key="x"))  # fmt: skip

    assert done.returncode == 3
    assert ("Incorrect API key provided: ***. Find yours at "
            "https://platform.example/account/api-keys.") in done.stderr  # fmt: skip


@pytest.mark.slow
def test_on_a_terminal_a_provider_failure_and_an_unparsable_reply_show_once_each(repo, tmp_path):
    from test_view import CSI, Terminal

    recording = write_replay(
        tmp_path / "r.json",
        "Prose without any action.",
        xml_action("task_complete", result="ok"),
    )
    term = Terminal(toy_agent("--task", "x", "--repo", str(repo), "--replay", str(recording)),
                    tmp_path)  # fmt: skip
    screen = CSI.sub("", term.finish())
    assert term.proc.returncode == 0, screen
    assert screen.count("No <ACTION> block found") == 1
    assert "· reply not understood, the model was told: No <ACTION> block found" in screen
    assert "WARNING" not in screen

    with FakeProvider() as server:
        server.enqueue(error_reply(401, "invalid x-api-key"))
        term = Terminal(toy_agent("--task", "x", "--repo", str(repo)), tmp_path,
                        quickest_provider_env(server))  # fmt: skip
        screen = CSI.sub("", term.finish())
    assert term.proc.returncode == 3, screen
    assert screen.count("invalid x-api-key") == 1
    assert "toy-agent: error: openai API error 401: invalid x-api-key" in screen


def test_every_line_and_object_follows_the_documented_schema(repo, tmp_path, capsys):
    import jsonschema  # a dependency of mcp, so always there

    schema = json.loads((ROOT / "docs" / "output.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    recording = write_replay(
        tmp_path / "r.json",
        "Prose first.",
        xml_action("run_command", command="ls; curl -s http://example.invalid"),
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
        xml_action("task_complete", result="done"),
    )
    args = ["--task", "fix", "--repo", str(repo), "--replay", str(recording), "--allow-commands",
            "--deny-command", "curl*", "--sandbox", "off",
            "--hook", "post_tool:edit_file=echo checked"]  # fmt: skip
    lines = run_main(capsys, *args, "--output", "stream-json").stdout.splitlines()
    (repo / "hello.py").write_text("print('helo')\n")
    objects = [json.loads(line) for line in lines]
    objects.append(json.loads(run_main(capsys, *args, "--output", "json").stdout))
    objects.append(json.loads(run_main(capsys, "--mdoel", "x", "--output", "json").stdout))
    undo = ["--undo", "--repo", str(repo), "--output"]
    undone = json.loads(run_main(capsys, *undo, "json").stdout)  # the json run's edit
    assert (undone["outcome"], undone["restored"]) == ("undone", ["hello.py"])
    (repo / "hello.py").write_text("changed since\n")  # the stream-json run's edit is gone
    refused = json.loads(run_main(capsys, *undo, "stream-json").stdout)
    assert (refused["type"], refused["outcome"]) == ("run_finished", "undo_refused")
    (tmp_path / "empty").mkdir()
    undo[2] = str(tmp_path / "empty")
    nothing = json.loads(run_main(capsys, *undo, "json").stdout)
    assert nothing["outcome"] == "nothing_to_undo"
    objects += [undone, refused, nothing]
    for obj in objects:
        validator.validate(obj)
    types = {obj.get("type") for obj in objects}
    assert types == {
        "run_started",
        "step_started",
        "llm_response",
        "tool_started",
        "tool_refused",
        "hook",
        "tool_finished",
        "step_finished",
        "run_finished",
        None,
    }
    wrong = {**objects[0], "permission_mode": "yolo"}
    assert not validator.is_valid(wrong)  # the schema can say no


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["term", "hup"]
)
def test_after_sigterm_or_sighup_the_json_exit_code_is_the_process_s(signum, code, repo, tmp_path):
    import jsonschema

    replay = write_replay(tmp_path / "r.json",
                          xml_action("run_command", command="touch started; sleep 30"))  # fmt: skip
    proc = subprocess.Popen(
        toy_agent("x", "--repo", str(repo), "--replay", str(replay), "--allow-commands",
                  "--sandbox", "off", "--output", "json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_environment(),
    )  # fmt: skip
    try:
        wait_until(lambda: (repo / "started").exists(), "the command's start")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    result = json.loads(out)
    assert proc.returncode == code, err
    assert (result["outcome"], result["exit_code"]) == ("cancelled", code)
    schema = json.loads((ROOT / "docs" / "output.schema.json").read_text())
    jsonschema.validate(result, schema, cls=jsonschema.Draft202012Validator)
