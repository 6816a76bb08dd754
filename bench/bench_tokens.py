"""Tokens one scripted bug fix costs, through each action format, against a loopback server.

    python bench/bench_tokens.py

The task is the demo repository's: median() is wrong for even lengths. The scripted model
lists the files, reads the test, reads the module, edits it, runs the tests and finishes: six
requests, with the same thoughts in every format. The loopback server speaks the OpenAI Chat
Completions wire format and records every request body, so what is counted is what a real
provider would be sent: the system prompt, every message and, in native mode, the tool
schemas. No tokenizer installs offline, so tokens are estimated as characters / 4 (stated so
in the output); characters are the exact figure.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_providers import FakeProvider, openai_reply  # noqa: E402

from toy_agent.agent import ReactAgent  # noqa: E402
from toy_agent.llm import OpenAICompatibleLlmClient  # noqa: E402
from toy_agent.messages import ToolCall  # noqa: E402
from toy_agent.tools import CodeRepositoryTools  # noqa: E402

MINI_SWE_AGENT_CHARS = 27_531  # the same task through mini-swe-agent 2.4.6 (issue #16)
TASK = "Fix median() in stats.py so that tests/test_stats.py passes"
OLD = "        return ordered[middle]\n    return ordered[middle]"
NEW = "        return ordered[middle]\n    return (ordered[middle - 1] + ordered[middle]) / 2"
STEPS = [  # (thought, tool, parameters)
    ("Let me see the repository layout first.", "list_files", {}),
    ("The failing test is in tests/test_stats.py; read it.", "read_file",
     {"path": "tests/test_stats.py"}),
    ("Now the implementation of median().", "read_file", {"path": "stats.py"}),
    ("For even lengths it returns the upper middle value; average the two middle ones.",
     "edit_file", {"path": "stats.py", "old_str": OLD, "new_str": NEW}),
    ("Run the tests to confirm.", "run_command", {"command": "python -m pytest -q"}),
    ("All tests pass.", "task_complete",
     {"result": "median() now averages the two middle values for even-length input."}),
]  # fmt: skip


def reply_text(fmt: str, thought: str, tool: str, params: dict) -> str:
    if fmt == "xml":  # laid out as the prompt's example is
        return (f"<THOUGHT>{thought}</THOUGHT>\n<ACTION><tool_name>{tool}</tool_name>"
                f"<parameters>{json.dumps(params)}</parameters></ACTION>")  # fmt: skip
    if fmt == "react":
        return f"Thought: {thought}\nAction: {tool}\nAction Input: {json.dumps(params)}"
    return thought


def run(fmt: str) -> tuple[int, int, int]:
    """(characters sent, characters received, requests) for one run in format `fmt`."""
    scratch = Path(tempfile.mkdtemp())
    repo = shutil.copytree(ROOT / "toy_agent" / "demo" / "repo", scratch / "demo")
    received = 0
    with FakeProvider() as server:
        for i, (thought, tool, params) in enumerate(STEPS):
            text = reply_text(fmt, thought, tool, params)
            calls = (ToolCall(tool, params, f"call_{i}"),) if fmt == "native" else ()
            received += len(text) + sum(len(c.name) + len(json.dumps(c.arguments)) for c in calls)
            server.enqueue(openai_reply(text, tool_calls=calls))
        client = OpenAICompatibleLlmClient("key", "bench", base_url=server.url + "/v1")
        tools = CodeRepositoryTools(repo, allow_commands=True, sandbox="off")
        result = ReactAgent(client, tools=tools, tool_format=fmt, max_iterations=10).run(TASK)
        assert result["success"], result
        sent = sum(_sent_chars(r.body) for r in server.requests)
        requests = len(server.requests)
    shutil.rmtree(scratch)
    return sent, received, requests


def _sent_chars(body: dict) -> int:
    """Characters of everything a request carries for the model: message texts, tool calls'
    arguments and names, tool results, and the tool schemas."""
    total = 0
    for message in body["messages"]:
        total += len(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            total += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return total + len(json.dumps(body.get("tools") or [], separators=(",", ":")))


def main() -> None:
    print(f"{'format':8} {'requests':>8} {'chars sent':>11} {'~tokens in':>11} "
          f"{'chars out':>10} {'~tokens out':>12}  vs mini-swe-agent (chars in)")  # fmt: skip
    for fmt in ("xml", "react", "native"):
        sent, received, requests = run(fmt)
        print(f"{fmt:8} {requests:8d} {sent:11,d} {sent // 4:11,d} {received:10,d} "
              f"{received // 4:12,d}  {sent / MINI_SWE_AGENT_CHARS:.2f}x")  # fmt: skip
    print(
        "tokens = characters / 4 (no tokenizer installs offline); mini-swe-agent 2.4.6 sent "
        f"{MINI_SWE_AGENT_CHARS:,} characters for the same task"
    )


if __name__ == "__main__":
    main()
