"""The user's own tools from Python: a typed, documented function (or a Tool) given to
ReactAgent(tools=[...]) is offered, checked, run, redacted, timed and recorded like a built-in."""

from __future__ import annotations

import io
import json
import keyword
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, Optional

import pytest
from fakes import ScriptedLlm, folder, native_call, xml_action
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toy_agent import CodeRepositoryTools, ReactAgent, Redactor, Tool, tool
from toy_agent.events import ToolFinished, ToolStarted, TrajectoryRecorder
from toy_agent.permissions import Answer, Permissions
from toy_agent.tools import ToolError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return folder(tmp_path / "repo", {"a.py": "one\ntwo\nthree\n"})


# --- building a tool from a function ----------------------------------------------------


def test_a_function_s_signature_and_google_docstring_make_its_schema():
    def search_issues(
        query: str,
        limit: int = 10,
        score: float | None = None,
        state: Literal["open", "closed"] = "open",
        labels: Optional[list[str]] = None,  # noqa: UP045 (the Optional spelling is supported)
        extra: dict[str, int] | None = None,
        exact: bool = False,
    ) -> str:
        """Search the issue tracker.

        Longer notes for the reader, not the model.

        Args:
            query: Words to look for; they may
                run over two lines.
            limit: At most this many.
            score: Minimum score.
            state: Which issues.
            labels: Only issues with all of these.
            extra: Anything else.
            exact: Match whole words.

        Returns:
            The matching issues.
        """
        return ""

    made = Tool.from_function(search_issues)
    assert made.name == "search_issues" and made.description == "Search the issue tracker."
    assert made.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string",
                      "description": "Words to look for; they may run over two lines."},
            "limit": {"type": "integer", "description": "At most this many.", "default": 10},
            "score": {"type": "number", "description": "Minimum score."},
            "state": {"type": "string", "enum": ["open", "closed"], "description": "Which issues.",
                      "default": "open"},
            "labels": {"type": "array", "items": {"type": "string"},
                       "description": "Only issues with all of these."},
            "extra": {"type": "object", "additionalProperties": {"type": "integer"},
                      "description": "Anything else."},
            "exact": {"type": "boolean", "description": "Match whole words.", "default": False},
        },
        "required": ["query"],
    }  # fmt: skip
    assert made.changes == "nothing" and not made.asks


def test_a_rest_docstring_describes_the_parameters_and_a_required_optional_stays_nullable():
    @tool(name="lookup", changes_files=True)
    def find(key: str, fallback: str | None) -> str:
        """Look a key up.

        :param key: The key.
        :param fallback: What to answer when it is missing,
            or null.
        :returns: the value
        """
        return key

    assert isinstance(find, Tool) and find.name == "lookup" and find.changes == "files"
    assert find.parameters["properties"] == {
        "key": {"type": "string", "description": "The key."},
        "fallback": {"type": ["string", "null"],
                     "description": "What to answer when it is missing, or null."},
    }  # fmt: skip
    assert find.parameters["required"] == ["key", "fallback"]
    assert find("k", None) == "k"  # the decorated function still works as one


def test_context_parameters_are_filled_in_and_never_shown_to_the_model(repo):
    seen: dict[str, Any] = {}

    def where(name: str, root: Path, files: CodeRepositoryTools) -> str:
        """Say where a file would go."""
        seen.update(root=root, files=files)
        return str(root / name)

    made = Tool.from_function(where)
    assert list(made.parameters["properties"]) == ["name"]
    tools = CodeRepositoryTools(repo, extra_tools=[made])
    assert tools.execute("where", {"name": "x.txt"}) == str(repo / "x.txt")
    assert seen == {"root": repo, "files": tools}


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda x: x, "no type hint"),
        (lambda *args: "", r"\*args cannot be a tool parameter"),
    ],
)
def test_what_cannot_be_a_tool_is_refused_when_it_is_built(function, message):
    function.__doc__ = "Something."
    with pytest.raises(TypeError, match=message):
        Tool.from_function(function, name="broken")


def test_a_tool_needs_a_description_and_a_name_providers_accept():
    def quiet(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="docstring"):
        Tool.from_function(quiet)
    with pytest.raises(ValueError, match="1-64 letters"):
        Tool.from_function(quiet, name="has space", description="d")
    with pytest.raises(TypeError, match="'when'.*has no JSON Schema form"):

        def dated(when: complex) -> str:
            """d"""
            return ""

        Tool.from_function(dated)


@pytest.mark.parametrize("name", ["read_file", "run_command", "task_complete"])
def test_a_user_tool_cannot_take_a_built_in_name(repo, name):
    def shadow(path: str) -> str:
        """Pretend to read."""
        return "fake"

    with pytest.raises(ValueError, match=f"cannot be called {name}: that is a built-in"):
        ReactAgent(ScriptedLlm(), repo, tools=[Tool.from_function(shadow, name=name)])


def test_two_user_tools_cannot_share_a_name(repo):
    def a(x: str) -> str:
        """A."""
        return x

    with pytest.raises(ValueError, match="two tools are called a"):
        ReactAgent(ScriptedLlm(), repo, tools=[a, Tool.from_function(a)])


# A generated function: random names, types and defaults; the schema and the call agree.
TYPES: dict[str, tuple[str, dict[str, Any], st.SearchStrategy[Any]]] = {
    "str": ("str", {"type": "string"}, st.text(max_size=20)),
    "int": ("int", {"type": "integer"}, st.integers(-(10**6), 10**6)),
    "float": ("float", {"type": "number"}, st.floats(allow_nan=False, allow_infinity=False)),
    "bool": ("bool", {"type": "boolean"}, st.booleans()),
    "list": ("list[int]", {"type": "array", "items": {"type": "integer"}},
             st.lists(st.integers(-9, 9), max_size=4)),
    "dict": ("dict[str, str]", {"type": "object", "additionalProperties": {"type": "string"}},
             st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)),
    "enum": ("Literal['a', 'b']", {"type": "string", "enum": ["a", "b"]},
             st.sampled_from(["a", "b"])),
}  # fmt: skip
names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n) and n not in ("self", "dry_run")
)


@pytest.fixture
def tools(tmp_path: Path) -> CodeRepositoryTools:
    return CodeRepositoryTools(tmp_path)  # once per test: the examples only read it


# The fixture is built once for all examples, which is what is wanted (they never change it).
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(names, st.sampled_from(sorted(TYPES)), st.booleans()),
        min_size=1,
        max_size=5,
        unique_by=lambda p: p[0],
    ),  # fmt: skip
    st.data(),
)
def test_generated_functions_get_the_schema_their_hints_say_and_receive_what_the_model_sent(
    tools, params, data
):
    ordered = sorted(params, key=lambda p: p[2])  # required (no default) first
    source = ", ".join(
        f"{n}: {TYPES[k][0]}" + (" = None" if optional else "") for n, k, optional in ordered
    )
    doc = "Echo.\n\nArgs:\n" + "".join(f"    {n}: The {n}.\n" for n, _, _ in ordered)
    scope: dict[str, Any] = {"Literal": Literal}
    exec(f"def generated({source}):\n    {doc!r}\n    return locals()\n", scope)
    made = Tool.from_function(scope["generated"])

    assert made.description == "Echo."
    assert made.parameters["required"] == [n for n, _, optional in ordered if not optional]
    for n, k, _ in ordered:
        assert made.parameters["properties"][n] == {**TYPES[k][1], "description": f"The {n}."}
    sent = {
        n: data.draw(TYPES[k][2])
        for n, k, optional in ordered
        if not optional or data.draw(st.booleans())
    }
    received = json.loads(str(made.run(tools, json.loads(json.dumps(sent)))))
    assert received == {n: sent.get(n) for n, _, _ in ordered}


def test_values_that_do_not_fit_the_schema_are_the_model_s_mistake(repo):
    def scale(factor: float, mode: Literal["up", "down"] = "up") -> str:
        """Scale."""
        return f"{factor} {mode}"

    tools = CodeRepositoryTools(repo, extra_tools=[scale])
    assert tools.execute("scale", {"factor": "2.5"}) == "2.5 up"  # numbers written as text
    with pytest.raises(ToolError, match="'factor' of scale must be a number"):
        tools.execute("scale", {"factor": [1]})
    with pytest.raises(ToolError, match='must be one of "up", "down"'):
        tools.execute("scale", {"factor": 1, "mode": "sideways"})
    with pytest.raises(ToolError, match="Missing required parameter 'factor'"):
        tools.execute("scale", {})


# --- through the real loop -------------------------------------------------------------


def lines_tool(calls: list[dict[str, Any]]) -> Tool:
    @tool
    def count_lines(path: str, repo: Path, blank: bool = True) -> int:
        """Count the lines of a file in the repository.

        Args:
            path: The file, relative to the repository root.
            blank: Whether blank lines count too.
        """
        calls.append({"path": path, "blank": blank})
        lines = (repo / path).read_text().splitlines()
        return len([line for line in lines if blank or line.strip()])

    return count_lines


REPLIES = {
    "xml": lambda: [xml_action("count_lines", path="a.py"),
                    xml_action("task_complete", result="3 lines")],
    "react": lambda: ['Thought: count\nAction: count_lines\nAction Input: {"path": "a.py"}',
                      "Thought: done\nFinal Answer: 3 lines"],
    "native": lambda: [native_call(("count_lines", {"path": "a.py"})),
                       native_call(("task_complete", {"result": "3 lines"}))],
}  # fmt: skip


@pytest.mark.parametrize("tool_format", sorted(REPLIES))
def test_a_user_tool_is_offered_and_runs_in_every_action_format(repo, tool_format):
    calls: list[dict[str, Any]] = []
    llm = ScriptedLlm(*REPLIES[tool_format]())
    events: list[Any] = []
    agent = ReactAgent(llm, repo, tools=[lines_tool(calls)], tool_format=tool_format,
                       on_event=events.append)  # fmt: skip
    result = agent.run("how many lines in a.py?")

    assert result["success"] and result["result"] == "3 lines"
    assert calls == [{"path": "a.py", "blank": True}]
    if tool_format == "native":
        offered = [t["name"] for t in llm.requests[0]["tools"]]
        assert offered.index("count_lines") == offered.index("task_complete") - 1
    else:
        assert "count_lines" in llm.requests[0]["system"]
        assert "Count the lines of a file" in llm.requests[0]["system"]
    assert "3" in llm.sent_text().split("how many lines")[-1]
    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.action.tool_name for e in started] == ["count_lines"]
    assert finished[0].observation.content == "3" and not finished[0].observation.is_error
    assert finished[0].seconds >= 0
    assert "count_lines" in agent.settings()["tools"]


def test_the_live_view_shows_a_user_tool_s_call_and_its_time(repo):
    from toy_agent.view import TerminalView

    screen = io.StringIO()
    llm = ScriptedLlm(*REPLIES["xml"]())
    ReactAgent(llm, repo, tools=[lines_tool([])],
               on_event=TerminalView(screen, color=False, width=100)).run("count")  # fmt: skip
    shown = screen.getvalue()
    assert re.search(r"✓ count_lines a\.py \d+\.\d\ds", shown), shown


def test_a_failing_user_tool_is_an_observation_and_the_run_goes_on(repo, tmp_path):
    calls: list[dict[str, Any]] = []
    llm = ScriptedLlm(xml_action("count_lines", path="missing.py"),
                      xml_action("count_lines", path="a.py", blank=False),
                      xml_action("task_complete", result="3"))  # fmt: skip
    trajectory = tmp_path / "t.json"
    agent = ReactAgent(llm, repo, tools=[lines_tool(calls)],
                       on_event=TrajectoryRecorder(trajectory))  # fmt: skip
    result = agent.run("count")

    assert result["success"] and result["tool_errors"] == 1
    recorded = json.loads(trajectory.read_text())["steps"]
    first = recorded[0]["observations"][0]
    assert first["is_error"] and "count_lines failed: No such file or directory" in first["content"]
    action = recorded[1]["actions"][0]
    assert (action["tool_name"], action["parameters"]) == (
        "count_lines",
        {"path": "a.py", "blank": False},
    )
    assert recorded[1]["observations"][0]["content"] == "3"


def test_a_user_tool_s_own_exception_is_told_to_the_model_not_raised(repo):
    def divide(a: int, b: int) -> float:
        """Divide a by b."""
        return a / b

    llm = ScriptedLlm(xml_action("divide", a=1, b=0), xml_action("task_complete", result="x"))
    result = ReactAgent(llm, repo, tools=[divide]).run("divide")
    assert result["success"]
    assert "Error: divide failed: ZeroDivisionError: division by zero" in llm.sent_text()


def test_a_user_tool_s_output_is_redacted_before_the_model_sees_it(repo, tmp_path):
    secret = "sk-test-0123456789abcdefghijklmnop"

    def leak() -> str:
        """Show the configuration."""
        return f"api_key = {secret}"

    llm = ScriptedLlm(xml_action("leak"), xml_action("task_complete", result="done"))
    trajectory = tmp_path / "t.json"
    redactor = Redactor(environ={"MY_SERVICE_TOKEN": secret})
    ReactAgent(llm, repo, tools=[leak], redactor=redactor,
               on_event=TrajectoryRecorder(trajectory, redactor.redact_obj)).run("x")  # fmt: skip
    assert secret not in llm.sent_text() and "[REDACTED]" in llm.sent_text()
    assert secret not in trajectory.read_text()


def test_a_user_tool_that_changes_files_asks_under_mode_ask_and_is_tracked(repo):
    @tool(changes_files=True)
    def append_line(path: str, line: str, files: CodeRepositoryTools) -> str:
        """Append a line to a file.

        Args:
            path: The file.
            line: The line to add.
        """
        rel = files.relative(path)  # refuses a path outside the repository
        with open(files.repo_path / rel, "a") as f:
            f.write(line + "\n")
        return f"appended to {rel}"

    asked: list[str] = []

    def confirm(action: Any) -> Answer:
        asked.append(action.tool_name)
        return Answer(action.parameters.get("line") != "no")

    llm = ScriptedLlm(xml_action("append_line", path="a.py", line="no"),
                      xml_action("append_line", path="a.py", line="four"),
                      xml_action("append_line", path="../out.txt", line="x"),
                      xml_action("task_complete", result="ok"))  # fmt: skip
    agent = ReactAgent(llm, repo, tools=[append_line], confirm=confirm,
                       permissions=Permissions("ask"))  # fmt: skip
    result = agent.run_result("append")

    assert asked == ["append_line"] * 3
    assert result.declined == 1 and (repo / "a.py").read_text() == "one\ntwo\nthree\nfour\n"
    assert "outside the repository" in llm.sent_text()
    assert result.files_changed == ({"path": "a.py", "added": 1, "removed": 0},)
    assert not (repo.parent / "out.txt").exists()


def test_a_read_only_run_does_not_offer_a_user_tool_that_changes_files(repo):
    def reads(path: str) -> str:
        """Read."""
        return path

    writes = Tool.from_function(reads, name="writes", changes_files=True)
    llm = ScriptedLlm(xml_action("writes", path="a.py"), xml_action("task_complete", result="ok"))
    agent = ReactAgent(llm, repo, tools=[reads, writes], permissions=Permissions("read-only"))
    result = agent.run_result("x")
    assert "<name>reads</name>" in llm.requests[0]["system"]
    assert "<name>writes</name>" not in llm.requests[0]["system"]
    assert result.refused == 1


def test_the_custom_tool_example_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_tool.py")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"count_lines\(path, blank\?\)", done.stdout)
    stats = (ROOT / "toy_agent" / "demo" / "repo" / "stats.py").read_text().splitlines()
    counted = len([line for line in stats if line.strip()])
    assert f"count_lines({{'path': 'stats.py', 'blank': False}}) -> '{counted}'" in done.stdout
    assert f"completed: The demo's stats.py has {counted} non-blank lines." in done.stdout


def test_an_mcp_tool_named_like_a_user_tool_is_qualified_not_swapped_in(repo):
    class Server:
        """A toolbox through the seam, as an MCP server's tools reach the route table."""

        def specs(self) -> list[dict[str, Any]]:
            return [{"name": "count_lines", "description": "theirs", "parameters": {},
                     "server": "srv"}]  # fmt: skip

        def call(self, name: str, parameters: dict[str, Any]) -> str:
            return "theirs"

    calls: list[dict[str, Any]] = []
    llm = ScriptedLlm(xml_action("count_lines", path="a.py"),
                      xml_action("task_complete", result="ok"))  # fmt: skip
    agent = ReactAgent(llm, repo, tools=[lines_tool(calls)], mcp_tools=Server())  # type: ignore[arg-type]
    assert agent.run("x")["success"]
    assert calls == [{"path": "a.py", "blank": True}]
    assert "srv__count_lines" in agent.settings()["tools"]
