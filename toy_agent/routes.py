"""Which tools a run offers and where each call goes: one table, built once per run.

The local tools and each MCP server's tools are `Toolbox`es. The table applies the one naming
rule (a tool from elsewhere never takes a local tool's name or `task_complete`: it becomes
`server__tool`), orders the specs (`task_complete` last), and answers an unknown name with the
list the model can choose from.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from toy_agent.mcp_config import unique_name
from toy_agent.messages import ToolOutput, ToolSpec
from toy_agent.tools import RESERVED_TOOL_NAMES, TASK_COMPLETE_SPEC, ToolError


class Toolbox(Protocol):
    """Anything that offers tools: `CodeRepositoryTools`, `McpTools`, a test's fake.

    `call` returns the observation text (or a ToolOutput: text and images), or raises ToolError
    (or McpToolError) with a message the model can act on. A spec may carry a "server" key:
    the name used to qualify the tool when its own name is taken.
    """

    def specs(self) -> list[ToolSpec]: ...

    def call(self, name: str, parameters: dict[str, Any]) -> str | ToolOutput: ...


@dataclass(frozen=True)
class RouteTable:
    specs: tuple[ToolSpec, ...]  # what the model is offered, task_complete last
    routes: Mapping[str, tuple[Toolbox, str]]  # offered name -> (toolbox, its own name)

    @classmethod
    def build(cls, local: Toolbox, others: Iterable[Toolbox] = ()) -> RouteTable:
        specs: list[ToolSpec] = []
        routes: dict[str, tuple[Toolbox, str]] = {}
        taken = set(RESERVED_TOOL_NAMES)
        for spec in local.specs():  # the user's own tools too: no one else takes their names
            taken.add(spec["name"])
            specs.append(spec)
            routes[spec["name"]] = (local, spec["name"])
        for toolbox in others:
            for spec in toolbox.specs():
                own = spec["name"]
                name = own
                if name in taken:
                    name = unique_name(f"{spec.get('server') or 'mcp'}__{own}", taken)
                taken.add(name)
                specs.append({**spec, "name": name})
                routes[name] = (toolbox, own)
        return cls((*specs, TASK_COMPLETE_SPEC), routes)

    @property
    def names(self) -> list[str]:
        return [spec["name"] for spec in self.specs]

    def call(self, name: str, parameters: dict[str, Any]) -> str | ToolOutput:
        """Run the tool offered as `name`. task_complete is the agent's, not routed here."""
        if name not in self.routes:
            close = difflib.get_close_matches(name, self.names, n=1)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise ToolError(f"Unknown tool '{name}'.{hint} Available tools: "
                            f"{', '.join(self.names)}")  # fmt: skip
        toolbox, own = self.routes[name]
        return toolbox.call(own, parameters)
