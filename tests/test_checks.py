"""Work that checks itself: a command's result as data, refusals counted, a check that decides
the run, every edit parsed, and a batch that counts a fix only when it flips a failing test.
Through the real CLI with a scripted (replayed) model."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import quickest_provider_env, run_main, toy_agent
from fake_providers import FakeProvider, error_reply, openai_reply
from fakes import ScriptedLlm, folder, run_in_pty, write_replay, xml_action

from toy_agent.events import CheckFinished
from toy_agent.parsing import Action
from toy_agent.permissions import CommandRules, Permissions
from toy_agent.task_check import TaskCheck
from toy_agent.tools import CodeRepositoryTools

pytestmark = pytest.mark.usefixtures("home")  # see conftest

FAILING = "printf 'collected 1 item\\nE   assert 1 == 2\\n1 failed\\n'; exit 1"


def replayed(repo: Path, replay: Path, *flags: str) -> list[str]:
    return ["--task", "work", "--repo", str(repo), "--llm-provider", "replay",
            "--replay", str(replay), "--sandbox", "off", *flags]  # fmt: skip


def test_a_failing_command_is_an_error_with_its_exit_code_in_stream_json_and_trajectory(
    capsys, repo, tmp_path
):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=FAILING),
        xml_action("run_command", command="echo fine"),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "t.json"
    run = run_main(capsys, *replayed(repo, replay, "--allow-commands", "--output",
                                     "stream-json", "--trajectory", str(trajectory)))  # fmt: skip

    lines = [json.loads(line) for line in run.stdout.splitlines()]
    finished = [line for line in lines if line["type"] == "tool_finished"]
    assert [f["is_error"] for f in finished] == [True, False]
    assert finished[0]["command"]["exit_code"] == 1
    assert finished[0]["command"]["timed_out"] is False
    assert "1 failed" in finished[0]["command"]["output_tail"]
    assert finished[1]["command"]["exit_code"] == 0
    result = lines[-1]
    assert [c["exit_code"] for c in result["commands"]] == [1, 0]
    assert result["commands"][0]["iteration"] == 1
    steps = json.loads(trajectory.read_text())["steps"]
    recorded = steps[0]["observations"][0]
    assert recorded["is_error"] is True and recorded["command"]["exit_code"] == 1
    assert steps[1]["observations"][0]["command"]["exit_code"] == 0


def test_a_timed_out_command_is_data_too(capsys, repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command="sleep 5", timeout=1),
        xml_action("task_complete", result="done"),
    )
    run = run_main(capsys, *replayed(repo, replay, "--allow-commands", "--output", "json"))

    command = json.loads(run.stdout)["commands"][0]
    assert command["timed_out"] is True and command["killed"] is True
    assert command["exit_code"] is None


@pytest.mark.slow
def test_the_live_view_shows_a_failing_command_with_its_exit_code_and_output_tail(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=FAILING),
        xml_action("task_complete", result="done"),
    )
    output = run_in_pty(toy_agent(*replayed(repo, replay, "--allow-commands")))

    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", output)
    assert re.search(r"✗ run_command printf .* · exit 1", plain)
    assert "│ E   assert 1 == 2" in plain and "│ 1 failed" in plain


def test_the_report_marks_a_failed_command_and_unfolds_its_tail(capsys, repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command=FAILING),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "t.json"
    run_main(capsys, *replayed(repo, replay, "--allow-commands", "--output", "json",
                               "--trajectory", str(trajectory)))  # fmt: skip
    page = tmp_path / "page.html"
    run = run_main(capsys, "report", str(trajectory), "-o", str(page))

    assert run.returncode == 0, run.stderr
    html = page.read_text()
    assert '<span class="tag error">exit 1</span>' in html
    assert '<pre class="tail">' in html and "E   assert 1 == 2" in html


def test_refused_actions_are_counted_and_listed_and_strict_makes_the_run_fail(
    capsys, repo, tmp_path
):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command="rm -rf build"),
        xml_action("task_complete", result="done"),
    )
    flags = ("--allow-commands", "--deny-command", "rm", "--output", "json")
    run = run_main(capsys, *replayed(repo, replay, *flags))

    result = json.loads(run.stdout)
    assert run.returncode == 0 and result["outcome"] == "completed"
    assert result["refused"] == 1
    [refusal] = result["refused_actions"]
    assert refusal["tool"] == "run_command" and refusal["by"] == "rule"
    assert refusal["iteration"] == 1

    strict = run_main(capsys, *replayed(repo, replay, *flags, "--strict"))
    assert strict.returncode == 1 and json.loads(strict.stdout)["exit_code"] == 1

    text = run_main(capsys, *replayed(repo, replay, *flags[:3]))
    assert "✓ completed, but 1 action not run (refused or declined)" in text.stdout
    assert "run_command: refused by a rule" in text.stdout


def test_strict_keeps_a_clean_run_at_exit_0(capsys, repo, tmp_path):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    run = run_main(capsys, *replayed(repo, replay, "--strict", "--output", "json"))

    assert run.returncode == 0 and json.loads(run.stdout)["refused_actions"] == []


# -B: no __pycache__. The fix `a - b` -> `a + b` keeps calc.py's size, and an edit within the
# second of the first check's compile would otherwise import the stale bytecode.
# This Python by its path: `python3` on PATH may be a pyenv shim, which costs each check
# three times the interpreter's own start.
PYTHON = shlex.quote(sys.executable)
CHECK = f"{PYTHON} -B -c 'import calc; assert calc.add(1, 2) == 3, calc.add(1, 2)'"


def calc_repo(root: Path) -> Path:
    return folder(root, {"calc.py": "def add(a, b):\n    return a - b\n"})


def test_a_failing_check_is_shown_to_the_model_which_fixes_the_code_and_the_run_exits_0(
    capsys, tmp_path
):
    repo = calc_repo(tmp_path / "repo")
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("task_complete", result="done, I think"),
        xml_action("edit_file", path="calc.py", old_str="a - b", new_str="a + b"),
        xml_action("task_complete", result="fixed"),
    )
    trajectory = tmp_path / "t.json"
    run = run_main(capsys, *replayed(repo, replay, "--check", CHECK, "--output", "json",
                                     "--trajectory", str(trajectory)))  # fmt: skip

    result = json.loads(run.stdout)
    assert run.returncode == 0, run.stderr
    assert result["outcome"] == "completed" and result["result"] == "fixed"
    assert result["check"]["passed"] is True and result["check"]["attempts"] == 2
    assert result["check"]["command"] == CHECK and result["check"]["exit_code"] == 0
    data = json.loads(trajectory.read_text())
    told = data["steps"][0]["observations"][0]
    assert told["tool_name"] == "task_complete" and told["is_error"] is True
    assert "exited with 1" in told["content"] and "AssertionError: -1" in told["content"]
    assert "attempt 1 of 3" in told["content"]
    assert [c["passed"] for c in data["checks"]] == [False, True]


def test_a_check_that_never_passes_ends_the_run_with_exit_1_and_the_check_in_the_json(
    capsys, tmp_path
):
    repo = calc_repo(tmp_path / "repo")
    replay = write_replay(tmp_path / "r.json", *[xml_action("task_complete", result="done")] * 2)
    run = run_main(capsys, *replayed(repo, replay, "--check", CHECK, "--check-retries", "1",
                                     "--output", "stream-json"))  # fmt: skip

    lines = [json.loads(line) for line in run.stdout.splitlines()]
    result = lines[-1]
    assert run.returncode == 1 and result["exit_code"] == 1
    assert result["outcome"] == "check_failed" and result["success"] is False
    check = result["check"]
    assert check["passed"] is False and check["exit_code"] == 1 and check["attempts"] == 2
    assert "AssertionError: -1" in check["output_tail"]
    schema = json.loads((Path(__file__).parents[1] / "docs/output.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for line in lines:
        validator.validate(line)
    checks = [line for line in lines if line["type"] == "check_finished"]
    assert [(c["attempt"], c["limit"], c["passed"]) for c in checks] == [
        (1, 2, False),
        (2, 2, False),
    ]


def test_a_deny_rule_binds_the_check_too(capsys, tmp_path):
    repo = calc_repo(tmp_path / "repo")
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    run = run_main(capsys, *replayed(repo, replay, "--check", CHECK, "--check-retries", "0",
                                     "--deny-command", sys.executable,
                                     "--output", "json"))  # fmt: skip

    check = json.loads(run.stdout)["check"]
    assert run.returncode == 1 and check["passed"] is False and check["exit_code"] is None
    assert "refused" in check["output_tail"]


def test_the_python_api_takes_a_check(tmp_path):

    from toy_agent import ReactAgent  # noqa: PLC0415

    repo = calc_repo(tmp_path / "repo")
    llm = ScriptedLlm(
        xml_action("task_complete", result="done"),
        xml_action("edit_file", path="calc.py", old_str="a - b", new_str="a + b"),
        xml_action("task_complete", result="fixed"),
    )
    result = ReactAgent(llm, repo, check=CHECK).run("fix add")

    assert result["success"] is True and result["check"]["attempts"] == 2
    assert "AssertionError: -1" in llm.sent_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here: checks use /bin/sh")
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_a_check_runs_in_bash_so_pipefail_and_double_brackets_work(tmp_path, sandbox):
    from toy_agent.tools import CodeRepositoryTools  # noqa: PLC0415

    tools = CodeRepositoryTools(folder(tmp_path / "repo", {"a.txt": "a\n"}), sandbox=sandbox)
    assert tools.run_check("[[ -f a.txt ]] && echo $BASH_VERSION | grep -q .", 30).ok
    failing = tools.run_check("set -o pipefail; false | cat", 30)
    assert not failing.ok and failing.exit_code == 1


def task_check(
    repo: Path, command: str | None, retries: int = 1, deny: tuple[str, ...] = ()
) -> tuple[TaskCheck, list[CheckFinished]]:
    """A run's check on `repo` (no sandbox), redacting `s3cret`, and the events it told."""
    told: list[CheckFinished] = []
    tools = CodeRepositoryTools(repo, sandbox="off")
    check = TaskCheck(command, retries, 10.0, tools, Permissions("auto", CommandRules(deny=deny)),
                      lambda text: text.replace("s3cret", "[REDACTED]"), 2_000,
                      told.append)  # fmt: skip
    return check, told


DONE = Action("task_complete", {"result": "done"})


def test_a_task_check_that_fails_rejects_task_complete_until_its_retries_are_spent(tmp_path):
    repo = calc_repo(tmp_path / "repo")
    check, told = task_check(repo, CHECK + " s3cret", retries=1)

    rejected = check.verdict(DONE, 4)

    assert rejected is not None and rejected.is_error and rejected.action == DONE
    assert rejected.content.startswith("task_complete was not accepted yet: the user's check")
    assert "(attempt 1 of 2)" in rejected.content and "[REDACTED]" in rejected.content
    [note] = rejected.notes
    assert note.kind == "check" and note.text.endswith("exited with 1")
    assert check.may_retry and check.record is not None and check.record["attempts"] == 1
    assert [(e.iteration, e.attempt, e.limit) for e in told] == [(4, 1, 2)]
    assert check.verdict(DONE, 5) is not None and not check.may_retry
    assert check.error == f"the check `{CHECK} s3cret` did not pass (exit 1) after 2 attempts"


def test_a_task_check_that_passes_accepts_task_complete(tmp_path):
    repo = folder(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a + b\n"})
    check, _ = task_check(repo, CHECK)

    assert check.verdict(DONE, 1) is None
    assert check.error is None and not check.may_retry
    assert check.record is not None and check.record["passed"] and check.record["attempts"] == 1


def test_no_task_check_accepts_task_complete_and_records_nothing(tmp_path):
    check, told = task_check(folder(tmp_path / "repo", {}), None)

    assert check.verdict(DONE, 1) is None
    assert (check.record, check.error, told) == (None, None, [])


def test_a_task_check_a_deny_rule_refuses_never_runs_and_fails_the_run(tmp_path):
    repo = folder(tmp_path / "repo", {})
    check, _ = task_check(repo, "touch ran", retries=0, deny=("touch*",))

    rejected = check.verdict(DONE, 1)

    assert rejected is not None and "was refused" in rejected.content
    assert not (repo / "ran").exists() and not check.may_retry
    assert check.error == "the check `touch ran` did not pass (refused) after 1 attempt"


# --- every edit checked -----------------------------------------------------------------
CALC_PY = "class Calc:\n    def add(self, a, b):\n        return a + b\n\n    def sub(self, a, b):\n        return a - b\n"  # noqa: E501
CALC_TS = "export function add(a: number, b: number): number {\n  return a + b;\n}\n"


def edited(capsys, tmp_path, files, edit, *flags):
    """One edit_file by the model in a repository of `files`: the observation, as the
    trajectory records it, and the run's JSON result."""
    repo = folder(tmp_path / "repo", files)
    replay = write_replay(tmp_path / "r.json", xml_action("edit_file", **edit),
                          xml_action("task_complete", result="done"))  # fmt: skip
    trajectory = tmp_path / "t.json"
    run = run_main(capsys, *replayed(repo, replay, "--output", "json", "--trajectory",
                                     str(trajectory), *flags))  # fmt: skip
    observation = json.loads(trajectory.read_text())["steps"][0]["observations"][0]
    return observation, json.loads(run.stdout), repo


def test_an_edit_that_breaks_a_python_file_is_told_exactly_the_error_it_introduced(
    capsys, tmp_path
):
    edit = {"path": "calc.py", "old_str": "return a + b", "new_str": "return (a + b"}
    observation, result, repo = edited(capsys, tmp_path, {"calc.py": CALC_PY}, edit)

    assert observation["is_error"] is False and result["outcome"] == "completed"
    assert observation["content"].startswith("Edited calc.py (line 3).")
    assert observation["content"].endswith(
        "\n\nThe edit was applied; it introduced 1 syntax error: line 3 (in method "
        'Calc.add): cannot parse "return (a + b"'
    )
    assert observation["edit_check"]["syntax_errors"] == [
        'line 3 (in method Calc.add): cannot parse "return (a + b"'
    ]
    assert "return (a + b" in (repo / "calc.py").read_text()  # applied


def test_an_edit_that_breaks_a_typescript_file_is_told_exactly_the_error_it_introduced(
    capsys, tmp_path
):
    edit = {"path": "calc.ts", "old_str": "return a + b;", "new_str": "return a + ;"}
    observation, _, _ = edited(capsys, tmp_path, {"calc.ts": CALC_TS}, edit)

    assert observation["edit_check"]["syntax_errors"] == [
        "line 2 (in function add): missing identifier"
    ]
    assert "it introduced 1 syntax error: line 2 (in function add)" in observation["content"]


def test_an_edit_to_a_file_broken_elsewhere_reports_nothing_new(capsys, tmp_path):
    broken = "def ok():\n    return 1\n\n\ndef broken(:\n    pass\n"
    edit = {"path": "old.py", "old_str": "def ok():\n", "new_str": "# moved down\n\ndef ok():\n"}
    observation, _, _ = edited(capsys, tmp_path, {"old.py": broken}, edit)

    assert "edit_check" not in observation
    assert "syntax error" not in observation["content"]


def test_lint_strict_refuses_an_edit_that_breaks_the_file_and_leaves_it_as_it_was(capsys, tmp_path):
    edit = {"path": "calc.py", "old_str": "return a + b", "new_str": "return (a + b"}
    observation, result, repo = edited(capsys, tmp_path, {"calc.py": CALC_PY}, edit,
                                       "--lint", "strict")  # fmt: skip

    assert (repo / "calc.py").read_text() == CALC_PY
    assert observation["is_error"] is True
    assert observation["content"].startswith("The edit was not applied (--lint strict)")
    assert observation["edit_check"]["refused"] is True
    assert result["files_changed"] == []


@pytest.mark.parametrize("kind", ["over 8 MB", "hard-linked from outside"])
def test_lint_strict_never_deletes_a_file_it_could_not_keep_and_says_the_edit_stands(
    tmp_path, kind
):
    from toy_agent import ReactAgent  # noqa: PLC0415

    repo = folder(tmp_path / "repo", {})
    if kind == "over 8 MB":  # sparse: its size alone makes it too big to keep
        with (repo / "big.py").open("wb") as f:
            f.truncate(9 << 20)
    else:
        folder(tmp_path / "outside", {"big.py": "y = 2\n"})
        (repo / "big.py").hardlink_to(tmp_path / "outside" / "big.py")
    broken = "def broken(:\n    pass\n"
    llm = ScriptedLlm(xml_action("write_file", path="big.py", content=broken),
                      xml_action("task_complete", result="done"))  # fmt: skip
    ReactAgent(llm, repo, lint="strict").run("rewrite")

    assert (repo / "big.py").read_text() == broken  # the edit stands: nothing is deleted
    told = llm.requests[1]["messages"][-1].content
    assert "The edit was applied, and --lint strict could not undo it: big.py" in told
    assert "is as it was" not in told and "line 1 (in function broken)" in told


def test_lint_off_checks_nothing(capsys, tmp_path):
    edit = {"path": "calc.py", "old_str": "return a + b", "new_str": "return (a + b"}
    observation, _, _ = edited(capsys, tmp_path, {"calc.py": CALC_PY}, edit, "--lint", "off")

    assert "edit_check" not in observation and "syntax error" not in observation["content"]


def test_the_users_linter_runs_on_the_edited_file_and_only_new_findings_are_told(capsys, tmp_path):
    notes = "# TODO: first\nx = 1\n"
    edit = {"path": "notes.py", "old_str": "x = 1\n", "new_str": "x = 1\n\n# TODO: second\n"}
    linter = "*.py=! grep -n TODO {file}"
    observation, _, _ = edited(capsys, tmp_path, {"notes.py": notes}, edit,
                               "--lint-cmd", linter, "--lint-cmd", "*.js=false")  # fmt: skip

    assert observation["edit_check"]["lint"] == ["4:# TODO: second"]
    assert observation["content"].endswith(
        "The edit was applied; it introduced 1 new linter finding: 4:# TODO: second"
    )


def test_a_users_tool_that_changes_files_is_checked_too(tmp_path):
    from toy_agent import ReactAgent  # noqa: PLC0415
    from toy_agent.tools import tool  # noqa: PLC0415

    repo = folder(tmp_path / "repo", {"calc.py": CALC_PY})

    @tool(changes_files=True)
    def append_line(path: str, line: str, repo: Path) -> str:
        """Append a line to the file at path.

        Args:
            path: the file.
            line: the line.
        """
        with (repo / path).open("a") as f:
            f.write(line + "\n")
        return "appended"

    llm = ScriptedLlm(xml_action("append_line", path="calc.py", line="def mul(a, b:"),
                      xml_action("task_complete", result="done"))  # fmt: skip
    ReactAgent(llm, repo, tools=[append_line]).run("add mul")

    assert "appended\n\nThe edit was applied; it introduced 1 syntax error: line 7" in (
        llm.sent_text().replace("\\n", "\n")
    )


LANGUAGES = {  # file: (parses, one syntax error)
    "a.py": ("def f():\n    return 1\n", "def f(:\n    return 1\n"),
    "a.js": ("function f() { return 1; }\n", "function f() { return 1; \n"),
    "a.ts": ("function f(): number { return 1; }\n", "function f(): number { return ; ) }\n"),
    "a.tsx": ("const A = () => <div>hi</div>;\n", "const A = () => <div>hi</div;\n"),
    "a.go": ("package a\n\nfunc F() int { return 1 }\n", "package a\n\nfunc F() int { return 1\n"),
    "a.rs": ("fn f() -> i32 { 1 }\n", "fn f() -> i32 { 1 \n"),
    "A.java": ("class A { int f() { return 1; } }\n", "class A { int f() { return 1 } }\n"),
    "a.c": ("int f(void) { return 1; }\n", "int f(void) { return 1 }\n"),
    "a.cpp": ("int f() { return 1; }\n", "int f() { return 1 }\n"),
    "a.rb": ("def f\n  1\nend\n", "def f\n  (1\nend\n"),
    "a.json": ('{"a": 1}\n', '{"a": 1,,}\n'),
    "a.yaml": ("a: 1\nb: [1, 2]\n", "a: 1\nb: [1, 2\n"),
    "a.toml": ('a = 1\n[b]\nc = "x"\n', 'a = 1\n[b\nc = "x"\n'),
}


@pytest.mark.parametrize("name", LANGUAGES)
def test_each_shipped_grammar_parses_its_language_and_finds_an_error(name):
    from toy_agent.lint import syntax_errors  # noqa: PLC0415

    good, bad = LANGUAGES[name]
    assert syntax_errors(name, good.encode()) == []
    assert syntax_errors(name, bad.encode())


def test_the_report_names_the_syntax_error_an_edit_introduced(capsys, tmp_path):
    edit = {"path": "calc.py", "old_str": "return a + b", "new_str": "return (a + b"}
    edited(capsys, tmp_path, {"calc.py": CALC_PY}, edit)
    page = tmp_path / "page.html"
    run = run_main(capsys, "report", str(tmp_path / "t.json"), "-o", str(page))

    assert run.returncode == 0, run.stderr
    assert "edit_file introduced: line 3 (in method Calc.add): cannot parse" in page.read_text()


# --- a batch counts a fix only when it flips; attempts ----------------------------------
class AttemptScripts(FakeProvider):
    """An OpenAI-compatible server with a script per task and attempt: the task is picked by
    a marker in its text, the attempt by how many conversations of that task began before,
    the reply by how many replies the conversation holds."""

    def __init__(self, scripts: dict[str, list[list[str]]]):
        super().__init__()
        self.scripts = scripts
        self.started: dict[str, int] = {}

    def reply_to(self, request):
        self.record(request)
        messages = request.body["messages"]
        task = json.dumps(next(m for m in messages if m["role"] == "user"))
        marker = next(m for m in self.scripts if f"[{m}]" in task)
        step = sum(1 for m in messages if m["role"] == "assistant")
        if step == 0:
            self.started[marker] = self.started.get(marker, 0) + 1
        attempt = self.scripts[marker][self.started[marker] - 1]
        if step >= len(attempt):
            return error_reply(501, f"{marker} has no reply {step + 1}")
        return openai_reply(attempt[step])


FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
BUGGY = FIXED.replace("return a + b", "return a - b")
KEEP = f"{PYTHON} -B -c 'import calc; assert calc.sub(3, 1) == 2'"


def test_a_batch_reports_already_passing_resolved_on_a_second_attempt_and_a_broken_keep(
    capsys, tmp_path
):
    passing = folder(tmp_path / "passing", {"calc.py": FIXED})
    buggy = folder(tmp_path / "buggy", {"calc.py": BUGGY})
    fix = xml_action("edit_file", path="calc.py", old_str="return a - b\n\n\n",
                     new_str="return a + b\n\n\n")  # fmt: skip
    breaks_sub = xml_action("write_file", path="calc.py",
                            content=FIXED.replace("return a - b", "return 0"))  # fmt: skip
    done = xml_action("task_complete", result="done")
    tasks = [
        {"id": "passing", "repo": str(passing), "task": "[passing] fix add", "check": CHECK},
        {"id": "second", "repo": str(buggy), "task": "[second] fix add", "check": CHECK,
         "keep": [KEEP], "attempts": 3},
        {"id": "keep", "repo": str(buggy), "task": "[keep] fix add", "check": CHECK,
         "keep": [KEEP]},
    ]  # fmt: skip
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    scripts = {"passing": [], "second": [[done], [fix, done]], "keep": [[breaks_sub, done]]}
    out = tmp_path / "out"
    with AttemptScripts(scripts) as server:
        run = run_main(capsys, "--tasks-file", str(tmp_path / "tasks.jsonl"), "--out",
                       str(out), "--sandbox", "off", "--check-retries", "0",
                       env=quickest_provider_env(server))  # fmt: skip

    assert run.returncode == 1  # two of the three are not resolved
    records = {r["id"]: r for r in map(json.loads, (out / "results.jsonl").read_text()
                                       .splitlines())}  # fmt: skip
    passed, second, keep = records["passing"], records["second"], records["keep"]
    assert passed["outcome"] == "already_passing" and passed["already_passing"] is True
    assert passed["success"] is False and passed["baseline"]["passed"] is True
    assert server.started.get("passing") is None  # no agent ran: nothing to fix

    assert second["success"] is True and second["resolved"] is True
    assert second["baseline"]["passed"] is False and second["check"]["passed"] is True
    assert second["attempt"] == 2
    assert [(a["attempt"], a["resolved"], a["outcome"]) for a in second["attempts"]] == [
        (1, False, "check_failed"), (2, True, "completed")]  # fmt: skip
    assert "+    return a + b" in (out / second["patch"]).read_text()
    assert (out / second["attempts"][1]["patch"]).read_text() == (out / second["patch"]
                                                                  ).read_text()  # fmt: skip
    assert second["attempts"][0]["patch"] is None  # the first attempt changed nothing
    assert (out / second["attempts"][0]["trajectory"]).is_file()

    assert keep["check"]["passed"] is True and keep["keep_broken"] == [KEEP]
    assert keep["resolved"] is False and keep["success"] is False

    assert "already passing" in run.stdout and "broke keep" in run.stdout
    assert "resolved" in run.stdout

    page = tmp_path / "page.html"
    report = run_main(capsys, "report", str(out), "-o", str(page))
    assert report.returncode == 0, report.stderr
    html = page.read_text()
    assert "already passing" in html and "broke keep" in html
    assert "resolved · attempt 2 of 2" in html
    assert "pass@1 0/3 (0%) · pass@N (up to 2 attempts) 1/3" in html

    shutil.copytree(out, tmp_path / "again")
    compared = run_main(capsys, "report", str(out), str(tmp_path / "again"), "-o", str(page))
    assert compared.returncode == 0, compared.stderr
    assert "pass@1 (the first attempt): A 0/3 (0%) vs B 0/3 (0%)" in page.read_text()
    assert "pass@N (any attempt, up to A 2, B 2): A 1/3 vs B 1/3" in page.read_text()


def test_max_total_cost_caps_a_tasks_attempts_too(tmp_path):
    from toy_agent.batch.driver import RunSettings, run_batch  # noqa: PLC0415
    from toy_agent.messages import LlmResponse, Usage  # noqa: PLC0415

    repo = calc_repo(tmp_path / "repo")
    reply = LlmResponse(xml_action("task_complete", result="done"), usage=Usage(1000, 100))
    settings = RunSettings(
        make_llm=lambda: ScriptedLlm(reply),
        sandbox="off",
        check_retries=0,
        price_input=3.0,
        price_output=15.0,
    )  # $0.0045 an attempt
    tasks = [{"id": "t", "repo": str(repo), "task": "fix", "check": CHECK, "attempts": 9}]
    summary = run_batch(tasks, tmp_path / "out", settings, max_total_cost=0.01)

    [record] = summary.records
    assert len(record["attempts"]) == 3  # 0.0135 >= 0.01: no fourth attempt starts
    assert record["cost_usd"] == pytest.approx(0.0135)
    assert record["resolved"] is False and record["attempt"] == 3


def test_check_in_a_session_makes_the_next_task_run_until_it_passes(tmp_path):
    import io  # noqa: PLC0415

    from toy_agent import ReactAgent  # noqa: PLC0415
    from toy_agent.interactive import Repl  # noqa: PLC0415
    from toy_agent.sessions import SessionRecorder, SessionStore  # noqa: PLC0415
    from toy_agent.tools import CodeRepositoryTools  # noqa: PLC0415

    repo = calc_repo(tmp_path / "repo")
    llm = ScriptedLlm(
        xml_action("task_complete", result="done"),
        xml_action("edit_file", path="calc.py", old_str="a - b", new_str="a + b"),
        xml_action("task_complete", result="fixed"),
    )
    tools = CodeRepositoryTools(repo)
    store = SessionStore(tmp_path / "sessions")
    sessions = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, on_event=[sessions])
    typed = iter(["/check", f"/check {CHECK}", "fix add", "/check off"])

    def read(prompt: str) -> str:
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    out = io.StringIO()
    assert Repl(agent, sessions, read=read, out=out).run() == 0

    said = out.getvalue()
    assert "no check: a task is done when the model says so" in said
    assert f"check: {CHECK} (run when the model calls task_complete)" in said
    assert "AssertionError: -1" in llm.sent_text()
    assert (repo / "calc.py").read_text().count("a + b") == 1
    assert agent.check is None  # /check off
