"""Re-record toy_agent/demo/trajectory.json: the real agent on a copy of toy_agent/demo/repo.

The LLM side of this recording is written by hand (there is no network where it was made),
so the replay shows the whole loop — real tools, real observations, the trajectory format —
without a key. Record a run of your own with `--trajectory FILE` and replay it the same way.

    python examples/record_demo.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from toy_agent import ReactAgent
from toy_agent.events import TrajectoryRecorder
from toy_agent.llm import LlmClient
from toy_agent.messages import LlmResponse

HERE = Path(__file__).parent
DEMO = HERE.parent / "toy_agent" / "demo"  # the demo the package ships (toy-agent --demo)
TASK = "Fix median() in stats.py so that tests/test_stats.py passes"

REPLIES = [
    """I'll start by looking at the repository layout.

<THOUGHT>I need to see which files exist before touching anything.</THOUGHT>
<ACTION>
<tool_name>list_files</tool_name>
<parameters>{"path": "."}</parameters>
</ACTION>""",
    """<THOUGHT>The task names stats.py and its tests. Let me read the tests first to learn the
expected behaviour.</THOUGHT>
<ACTION>
<tool_name>read_file</tool_name>
<parameters>{"path": tests/test_stats.py}</parameters>
</ACTION>""",
    """I forgot the quotes around the path. Trying again.

<THOUGHT>Read the tests to learn the expected behaviour.</THOUGHT>
<ACTION>
<tool_name>read_file</tool_name>
<parameters>{"path": "tests/test_stats.py"}</parameters>
</ACTION>""",
    """<THOUGHT>test_median_even expects the mean of the two middle values (2.5 for
[1, 2, 3, 4]). Now the implementation.</THOUGHT>
<ACTION>
<tool_name>read_file</tool_name>
<parameters>{"path": "stats.py"}</parameters>
</ACTION>""",
    """<THOUGHT>For even lengths median() returns ordered[middle] instead of the mean of
ordered[middle - 1] and ordered[middle]. One precise edit fixes it.</THOUGHT>
```xml
<ACTION>
<tool_name>edit_file</tool_name>
<parameters>{
  "path": "stats.py",
  "old_str": "        return ordered[middle]\\n    return ordered[middle]\\n",
  "new_str": "        return ordered[middle]\\n    return (ordered[middle - 1] + ordered[middle]) / 2\\n"
}</parameters>
</ACTION>
```""",
    """<THOUGHT>Check that nothing else calls median() with assumptions about the old
behaviour.</THOUGHT>
<ACTION>
<tool_name>search_in_files</tool_name>
<parameters>{"pattern": "median\\\\(", "file_pattern": "*.py"}</parameters>
</ACTION>""",
    """<THOUGHT>Only report.py uses it, and it formats a float, so the fix is complete.</THOUGHT>
<ACTION>
<tool_name>task_complete</tool_name>
<parameters>{"result": "Fixed median() in stats.py: for an even number of values it now returns the mean of the two middle values ((ordered[middle - 1] + ordered[middle]) / 2) instead of the upper middle value, which makes test_median_even pass. The only other caller, report.py, is unaffected."}</parameters>
</ACTION>""",
]


class AuthoredReplies(LlmClient):
    provider = "authored"
    model = "hand-written-demo"

    def __init__(self, replies: list[str]):
        self.replies = list(replies)

    def call_llm(
        self, system_prompt, messages, *, tools=None, on_text=None, on_retry=None
    ) -> LlmResponse:
        return LlmResponse(self.replies.pop(0))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "demo_repo"
        shutil.copytree(DEMO / "repo", repo)
        recorder = TrajectoryRecorder(DEMO / "trajectory.json")
        result = ReactAgent(AuthoredReplies(REPLIES), repo, on_event=recorder).run(TASK)
    print(result)


if __name__ == "__main__":
    main()
