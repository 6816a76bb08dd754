"""Your own tool, from Python: a typed function with a docstring, given to ReactAgent.

    python examples/custom_tool.py

It runs offline: a scripted LlmClient stands in for the model (swap in ClaudeLlmClient() or
any other client for a real run). The agent offers `count_lines` next to the built-in tools,
in every action format; the model calls it, and its result (or its exception, as an error
the model can act on) comes back as the observation, redacted, timed and recorded like a
built-in tool's.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from toy_agent import LlmClient, LlmResponse, ReactAgent, tool
from toy_agent.events import Event, ToolFinished

DEMO = Path(__file__).resolve().parent.parent / "toy_agent" / "demo" / "repo"


@tool
def count_lines(path: str, repo: Path, blank: bool = True) -> int:
    """Count the lines of a file in the repository.

    Args:
        path: The file, relative to the repository root.
        blank: Whether blank lines count too.
    """
    # `repo` is annotated Path, so the agent passes the repository root; the model never
    # sees it. (A parameter annotated CodeRepositoryTools gets the confined file tools.)
    target = (repo / path).resolve()
    if not target.is_relative_to(repo):
        raise ValueError(f"{path} is outside the repository")  # the model is told, it goes on
    lines = target.read_text().splitlines()
    return len([line for line in lines if blank or line.strip()])


class ScriptedModel(LlmClient):
    """Two replies in the XML action format: call the tool, then finish."""

    provider, model = "scripted", "example"

    def __init__(self) -> None:
        self.replies = [
            "<THOUGHT>Count the non-blank lines of stats.py.</THOUGHT>\n"
            "<ACTION><tool_name>count_lines</tool_name>"
            '<parameters>{"path": "stats.py", "blank": false}</parameters></ACTION>',
            "<THOUGHT>The tool answered.</THOUGHT>\n"
            "<ACTION><tool_name>task_complete</tool_name>"
            '<parameters>{"result": "The demo\'s stats.py has 11 non-blank lines."}'
            "</parameters></ACTION>",
        ]

    def call_llm(self, system_prompt, messages, *, tools=None, on_text=None, on_retry=None):
        return LlmResponse(self.replies.pop(0))


def show_tool_calls(event: Event) -> None:
    """An event subscriber: each call of a tool, its observation and how long it took."""
    if isinstance(event, ToolFinished):
        observation = event.observation
        print(f"{observation.action.tool_name}({observation.action.parameters}) -> "
              f"{observation.content!r} in {event.seconds:.3f}s")  # fmt: skip


def main() -> None:
    schema = count_lines.parameters
    shown = ", ".join(p if p in schema["required"] else f"{p}?" for p in schema["properties"])
    print(f"{count_lines.name}({shown}): {count_lines.description}")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "demo"
        shutil.copytree(DEMO, repo)
        agent = ReactAgent(ScriptedModel(), repo, tools=[count_lines], on_event=show_tool_calls)
        result = agent.run("How many non-blank lines has stats.py?")
    print(f"{'completed' if result['success'] else 'failed'}: {result['result']}")


if __name__ == "__main__":
    main()
