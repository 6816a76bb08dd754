"""The route table: which tools a run offers, under which names, and where each call goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedLlm, native_call, xml_action

from toy_agent.agent import ReactAgent
from toy_agent.routes import RouteTable
from toy_agent.tools import CodeRepositoryTools, ToolError


class FakeToolbox:
    """A Toolbox through the seam: fixed specs, calls recorded and echoed."""

    def __init__(self, server: str, *names: str):
        self.server, self.names, self.calls = server, names, []

    def specs(self) -> list[dict[str, Any]]:
        return [{"name": n, "description": f"{n} of {self.server}", "parameters": {},
                 "server": self.server} for n in self.names]  # fmt: skip

    def call(self, name: str, parameters: dict[str, Any]) -> str:
        self.calls.append((name, parameters))
        return f"{self.server}:{name}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text("x = 1\n")
    return tmp_path


def test_local_names_and_task_complete_stay_local_and_others_are_qualified(repo):
    fake = FakeToolbox("srv", "read_file", "task_complete", "weather")
    routes = RouteTable.build(CodeRepositoryTools(repo), [fake])
    assert routes.names.count("read_file") == 1 and routes.names.count("task_complete") == 1
    assert routes.names[-1] == "task_complete"
    assert {"srv__read_file", "srv__task_complete", "weather"} <= set(routes.names)
    assert routes.call("srv__read_file", {"path": "a.py"}) == "srv:read_file"
    assert "x = 1" in routes.call("read_file", {"path": "a.py"})
    assert fake.calls == [("read_file", {"path": "a.py"})]


def test_run_command_stays_reserved_even_when_commands_are_off(repo):
    routes = RouteTable.build(CodeRepositoryTools(repo), [FakeToolbox("s", "run_command")])
    assert "run_command" not in routes.names and "s__run_command" in routes.names


def test_unknown_tool_names_the_closest_and_lists_the_rest(repo):
    routes = RouteTable.build(CodeRepositoryTools(repo), [FakeToolbox("s", "weather")])
    with pytest.raises(ToolError, match=r"Unknown tool 'wether'\. Did you mean weather\?"):
        routes.call("wether", {})


def test_native_requests_never_carry_duplicate_tool_names(repo):
    """McpTools handed to ReactAgent as mcp_tools= (the README's API) with a server tool named
    like a local one: the request must not offer two read_file tools."""
    llm = ScriptedLlm(native_call(("task_complete", {"result": "ok"})))
    agent = ReactAgent(
        llm,
        tools=CodeRepositoryTools(repo),
        tool_format="native",
        mcp_tools=FakeToolbox("srv", "read_file"),
    )  # type: ignore[arg-type]
    assert agent.run("x")["success"]
    names = [tool["name"] for tool in llm.requests[0]["tools"]]
    assert len(names) == len(set(names))
    assert "srv__read_file" in names


def test_xml_runs_route_a_qualified_call_to_its_toolbox(repo):
    fake = FakeToolbox("srv", "read_file")
    llm = ScriptedLlm(xml_action("srv__read_file", path="a.py"),
                      xml_action("task_complete", result="ok"))  # fmt: skip
    ReactAgent(llm, repo, mcp_tools=fake).run("x")  # type: ignore[arg-type]
    assert fake.calls == [("read_file", {"path": "a.py"})]
    assert "srv:read_file" in llm.sent_text()
    assert llm.requests[0]["system"].count("<name>read_file</name>") == 1
