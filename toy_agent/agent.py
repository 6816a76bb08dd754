"""ReactAgent: the THINK -> ACT -> OBSERVE loop, nothing else."""

from __future__ import annotations

import contextlib
import difflib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from toy_agent.context import DEFAULT_CONTEXT_BUDGET, cap_text, fit_to_budget, observation_cap
from toy_agent.events import (
    ChangeTracker,
    Event,
    LlmRequested,
    LlmResponded,
    RunFinished,
    RunStarted,
    Step,
    StepFinished,
    StepStarted,
    Subscriber,
    TextDelta,
    ToolFinished,
    ToolStarted,
    log_event,
)
from toy_agent.llm import (
    INVALID_ARGUMENTS_KEY,
    LlmClient,
    LlmError,
    LlmResponse,
    Message,
    Usage,
)
from toy_agent.mcp_tools import McpToolError, McpTools
from toy_agent.parsing import (
    Action,
    ActionFormat,
    Observation,
    ParsedResponse,
    ParseError,
    get_format,
)
from toy_agent.redaction import Redactor
from toy_agent.tools import CodeRepositoryTools, ToolError, get_available_tools

SYSTEM_PROMPT_INTRO = """\
You are toy_agent, an autonomous software engineer working on a local code repository. You \
solve the user's task with the ReAct pattern: you THINK about what to do next, ACT by calling \
exactly one of the tools below, then OBSERVE its result, which the system sends back to you. \
Repeat until the task is done, then call task_complete with a concise summary of what you did \
and the answer to the task.

Rules:
- Paths are relative to the repository root; you cannot leave the repository.
- Look before you change: list and read the relevant files first; never guess file contents.
- Prefer edit_file for small changes to existing files; use write_file for new files.
- If a tool fails, read the error and fix the call instead of repeating it unchanged.
- Do not invent observations: after an action, stop and wait for the result."""

CONFIRM_TOOLS = frozenset({"write_file", "edit_file", "run_command"})
REPEAT_LIMIT = 3
LLM_POLL_SECONDS = 0.1

Confirm = Callable[[Action], bool]


def collect_tool_specs(allow_commands: bool, mcp_tools: McpTools | None) -> list[dict[str, Any]]:
    """Every tool offered to the LLM: the local ones, then MCP ones, task_complete last."""
    local = get_available_tools(allow_commands)
    remote = mcp_tools.get_mcp_tools() if mcp_tools else []
    return local[:-1] + remote + local[-1:]


class RunCancelled(Exception):
    """Raised inside the loop when cancel() was called; ends the run as 'cancelled'."""


class ReactAgent:
    """Runs one task at a time against a repository.

    `run()` never raises for the model's or the provider's failures: the returned dict says
    how the run ended (`outcome`: completed, max_iterations, cancelled, provider_error).
    """

    def __init__(
        self,
        llm_client: LlmClient,
        repo_path: str | Path = ".",
        max_iterations: int = 10,
        mcp_server_url: str | None = None,
        *,
        tools: CodeRepositoryTools | None = None,
        mcp_tools: McpTools | None = None,
        tool_format: str | ActionFormat = "xml",
        context_budget: int = DEFAULT_CONTEXT_BUDGET,
        allow_commands: bool = False,
        redactor: Redactor | None = None,
        on_event: Subscriber | Iterable[Subscriber] | None = None,
        confirm: Confirm | None = None,
        stream: bool = False,
    ):
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.llm_client = llm_client
        self.repo_path = Path(repo_path).resolve()
        self.max_iterations = max_iterations
        self.tools = tools or CodeRepositoryTools(self.repo_path, allow_commands=allow_commands)
        self.mcp_server_url = mcp_server_url
        self.mcp_tools_client = mcp_tools
        self.format = get_format(tool_format) if isinstance(tool_format, str) else tool_format
        self.context_budget = context_budget
        self.redactor = redactor or Redactor()
        self.confirm = confirm
        self.stream = stream
        if on_event is None:
            on_event = []
        self._subscribers = [on_event] if callable(on_event) else list(on_event)
        self._cancel = threading.Event()
        self.conversation_history: list[Message] = []
        self.system_prompt = ""
        self._tool_specs: list[dict[str, Any]] = []
        self._local_names = {s["name"] for s in get_available_tools(self.tools.allow_commands)}
        self._reset()

    # -- public -------------------------------------------------------------------------

    def run(self, task: str) -> dict[str, Any]:
        """Work on `task` until task_complete, the iteration limit, cancel() or Ctrl-C."""
        self._reset()
        started = time.monotonic()
        changes = ChangeTracker(self.repo_path)
        self._subscribers[:0] = [log_event, changes]
        try:
            with self._mcp_session():
                self._tool_specs = self.tool_specs()
                self.system_prompt = self._build_system_prompt()
                self.conversation_history = [Message("user", task)]
                self._emit(RunStarted(task, self.system_prompt, self.settings()))
                outcome, answer, error = self._loop()
            result = {
                "success": outcome == "completed",
                "outcome": outcome,
                "iterations": self.iteration,
                "conversation_length": len(self.conversation_history),
                "result": answer,
                "error": error,
                "usage": self.usage.to_dict(),
                "elapsed_seconds": round(time.monotonic() - started, 3),
                "files_changed": changes.diff_stat(),
            }
            self.diffs = changes.diffs()
            self._emit(RunFinished(result))
            return result
        finally:
            self._subscribers.remove(log_event)
            self._subscribers.remove(changes)

    def cancel(self) -> None:
        """Stop the run from another thread: the LLM call in flight is abandoned."""
        self._cancel.set()

    def tool_specs(self) -> list[dict[str, Any]]:
        return collect_tool_specs(self.tools.allow_commands, self.mcp_tools_client)

    def settings(self) -> dict[str, Any]:
        return {
            "provider": getattr(self.llm_client, "provider", type(self.llm_client).__name__),
            "model": getattr(self.llm_client, "model", ""),
            "repo": str(self.repo_path),
            "max_iterations": self.max_iterations,
            "tool_format": self.format.name,
            "context_budget": self.context_budget,
            "allow_commands": self.tools.allow_commands,
            "tools": [spec["name"] for spec in self._tool_specs],
        }

    # -- the loop -----------------------------------------------------------------------

    def _loop(self) -> tuple[str, str, str | None]:
        try:
            for iteration in range(1, self.max_iterations + 1):
                self.iteration = iteration
                self._check_cancelled()
                self._emit(StepStarted(self.iteration, self.max_iterations))
                response = self._call_llm()
                final_answer = self._process_response(response)
                if final_answer is not None:
                    return "completed", final_answer, None
            limit = f"reached the iteration limit ({self.max_iterations}) without task_complete"
            return "max_iterations", "", limit
        except (RunCancelled, KeyboardInterrupt):
            return "cancelled", "", "the run was cancelled"
        except LlmError as exc:
            return "provider_error", "", str(exc)

    def _build_system_prompt(self) -> str:
        return f"{SYSTEM_PROMPT_INTRO}\n\n{self.format.prompt_section(self._tool_specs)}"

    def _call_llm(self) -> LlmResponse:
        """Send the history (fitted to the budget), record the reply in the history."""
        messages = fit_to_budget(self.conversation_history, self.context_budget)
        self._emit(LlmRequested(self.iteration, messages))
        tools = self._tool_specs if self.format.native_tools else None
        on_text = (lambda text: self._emit(TextDelta(text))) if self.stream else None
        started = time.monotonic()
        response = self._cancellable(
            lambda: self.llm_client.call_llm(
                self.system_prompt, messages, tools=tools, on_text=on_text
            )
        )
        self._llm_seconds = time.monotonic() - started
        self.usage += response.usage
        self.conversation_history.append(
            Message("assistant", response.text, tool_calls=response.tool_calls)
        )
        self._emit(LlmResponded(self.iteration, response, self._llm_seconds))
        return response

    def _parse_response(self, response: LlmResponse) -> ParsedResponse:
        """The spec's parse step; raises ParseError (with a message for the LLM) on failure."""
        if response.stop_reason == "max_tokens":
            raise ParseError(
                "Your reply was cut off at the output-token limit, so no action was run. "
                "Reply again with a shorter response: keep the THOUGHT brief, and write big "
                "files in parts (write_file a first part, then edit_file to extend it)."
            )
        if response.stop_reason == "safety":
            raise ParseError(
                "Your reply was blocked by the provider's safety filter, so no action was run. "
                "Continue the task with a different approach or wording."
            )
        return self.format.parse(response)

    def _process_response(self, response: LlmResponse) -> str | None:
        """Parse, run each action, record the observations. Returns the final answer, if any."""
        started = time.monotonic()
        try:
            parsed = self._parse_response(response)
        except ParseError as exc:
            self.conversation_history.append(self._error_message(response, exc))
            self._emit(StepFinished(Step(self.iteration, response, parse_error=str(exc),
                                         llm_seconds=self._llm_seconds)))
            return None
        observations: list[Observation] = []
        final_answer = None
        for action in parsed.actions:
            if action.tool_name == "task_complete":
                final_answer = self._final_answer(action)
                break
            observations.append(self._run_action(action))
        if observations and parsed.notice:
            last = observations[-1]
            observations[-1] = Observation(last.action, f"{last.content}\n\n{parsed.notice}",
                                           last.is_error)
        if observations:
            self.conversation_history.append(self.format.observation_message(observations))
        step = Step(self.iteration, response, parsed.thought, parsed.actions,
                    tuple(observations), llm_seconds=self._llm_seconds,
                    tool_seconds=time.monotonic() - started)
        self._emit(StepFinished(step))
        return final_answer

    def _run_action(self, action: Action) -> Observation:
        self._emit(ToolStarted(self.iteration, action))
        started = time.monotonic()
        is_error = True
        if self.confirm and action.tool_name in CONFIRM_TOOLS and not self.confirm(action):
            content = "The user declined this action; it was not run. Ask yourself why, and "
            content += "try something else or finish with task_complete."
        else:
            try:
                content = self._execute_tool(action.tool_name, action.parameters)
                is_error = False
            except (ToolError, McpToolError) as exc:
                content = f"Error: {exc}"
        content = cap_text(self.redactor.redact(content), observation_cap(self.context_budget))
        content += self._repetition_warning(action)
        observation = Observation(action, content, is_error)
        self._emit(ToolFinished(self.iteration, observation, time.monotonic() - started))
        return observation

    def _execute_tool(self, tool_name: str, parameters: dict[str, Any]) -> str:
        """Run one local or MCP tool by name. Failures raise ToolError or McpToolError."""
        if INVALID_ARGUMENTS_KEY in parameters:
            raw = str(parameters[INVALID_ARGUMENTS_KEY])[:500]
            raise ToolError(f"the arguments of this {tool_name} call are not a JSON object: "
                            f"{raw!r}. Call it again with valid JSON arguments.")
        names = [s["name"] for s in self._tool_specs]
        if tool_name in self._local_names:
            return self.tools.execute(tool_name, parameters)
        if self.mcp_tools_client and tool_name in names:  # offered, not local: an MCP tool
            return self.mcp_tools_client.execute_mcp_tool(tool_name, parameters)
        close = difflib.get_close_matches(tool_name, names, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ToolError(f"Unknown tool '{tool_name}'.{hint} Available tools: {', '.join(names)}")

    # -- helpers ------------------------------------------------------------------------

    def _error_message(self, response: LlmResponse, error: ParseError) -> Message:
        """Native tool calls must each be answered, even when none of them was run."""
        if not response.tool_calls:
            return self.format.error_message(error)
        unanswered = [
            Observation(Action(call.name, call.arguments, call.id), f"Error: {error}", True)
            for call in response.tool_calls
        ]
        return self.format.observation_message(unanswered)

    def _final_answer(self, action: Action) -> str:
        params = action.parameters
        if "result" in params:
            return str(params["result"])
        if len(params) == 1:  # a model that names the parameter "answer" or "summary"
            return str(next(iter(params.values())))
        return json.dumps(params) if params else ""

    def _repetition_warning(self, action: Action) -> str:
        key = json.dumps([action.tool_name, action.parameters], sort_keys=True, default=str)
        self._repeats = self._repeats + 1 if key == self._last_action_key else 1
        self._last_action_key = key
        if self._repeats < REPEAT_LIMIT:
            return ""
        return (
            f"\n\nWarning: you have called {action.tool_name} with the same parameters "
            f"{self._repeats} times in a row. Repeating it will not change the result; "
            "try a different approach, or call task_complete if you are done."
        )

    def _cancellable(self, call: Callable[[], LlmResponse]) -> LlmResponse:
        """Run `call` in a daemon thread so cancel() and Ctrl-C do not wait for the network."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as exc:  # handed to the waiting thread, re-raised there
                box["error"] = exc

        worker = threading.Thread(target=target, name="toy-agent-llm", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(LLM_POLL_SECONDS)
            self._check_cancelled()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _check_cancelled(self) -> None:
        if self._cancel.is_set():
            raise RunCancelled()

    @contextlib.contextmanager
    def _mcp_session(self) -> Iterator[None]:
        """Open the MCP servers named by `mcp_server_url` for this run only."""
        if self.mcp_tools_client or not self.mcp_server_url:
            yield
            return
        reserved = [spec["name"] for spec in get_available_tools(allow_commands=True)]
        self.mcp_tools_client = McpTools(self.mcp_server_url, reserved_names=reserved)
        try:
            yield
        finally:
            self.mcp_tools_client.close()
            self.mcp_tools_client = None

    def _emit(self, event: Event) -> None:
        for subscriber in self._subscribers:
            subscriber(event)

    def _reset(self) -> None:
        self._cancel.clear()
        self.usage = Usage()
        self.iteration = 0
        self.diffs: dict[str, str] = {}  # path -> unified diff of the last run's changes
        self._llm_seconds = 0.0
        self._last_action_key = ""
        self._repeats = 0
