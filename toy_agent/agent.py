"""ReactAgent: the THINK -> ACT -> OBSERVE loop, nothing else."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from toy_agent import cuts
from toy_agent.abandon import abandonable
from toy_agent.budget import fit_to_budget, observation_cap, recent_images
from toy_agent.events import (
    ChangeTracker,
    Event,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    LlmRetrying,
    RunFinished,
    RunStarted,
    Step,
    StepFinished,
    StepStarted,
    Subscriber,
    TextDelta,
    ToolFinished,
    ToolProgress,
    ToolRefused,
    ToolStarted,
    log_event,
)
from toy_agent.files import ToolRefusal
from toy_agent.hooks import Hooks, RunHooks
from toy_agent.lint import LintMode, edit_checker
from toy_agent.llm import AdaptedClient, LlmClient, LlmError, ReplayDiverged
from toy_agent.mcp_tools import McpProgress, McpToolError, McpTools, reporting_progress
from toy_agent.messages import (
    LlmResponse,
    Message,
    Note,
    ToolCall,
    ToolOutput,
    ToolResult,
    Usage,
    wire_text,
)
from toy_agent.observations import ActionResult, Observer, cut_notes
from toy_agent.parsing import (
    MAX_PARAMETER_DEPTH,
    Action,
    ActionFormat,
    Observation,
    ParsedResponse,
    ParseError,
    check_stop_reason,
    get_format,
    nesting_depth,
)
from toy_agent.permissions import (
    PLAN_PROMPT,
    READ_ONLY_PROMPT,
    Answer,
    OfferedTools,
    Permissions,
    Refusal,
)
from toy_agent.pricing import CostLimitReached, CostMeter, price_for
from toy_agent.providers import saved_base_url
from toy_agent.redaction import Redactor
from toy_agent.routes import RouteTable
from toy_agent.settings import AgentSettings, ToolSettings
from toy_agent.task_check import DEFAULT_CHECK_RETRIES, DEFAULT_CHECK_TIMEOUT, TaskCheck
from toy_agent.tools import CodeRepositoryTools, Tool, ToolError

logger = logging.getLogger(__name__)

SYSTEM_PROMPT_INTRO = """\
You are toy_agent, a software engineer working in a local repository with the ReAct pattern: \
THINK about the next step, ACT by calling one tool, OBSERVE its result; repeat until the task \
is done, then call task_complete with a short summary and the answer.
Paths are relative to the repository root. Read before you change; never guess file \
contents. Prefer edit_file for changes, write_file for new files. If a tool fails, fix the \
call instead of repeating it."""

# A confirm hook: True or Answer(approved=True) runs the action; False or a declining Answer
# (with the user's reason) does not.
Confirm = Callable[[Action], "bool | Answer"]
Outcome = Literal[
    "completed",
    "max_iterations",
    "cancelled",
    "provider_error",
    "replay_diverged",
    "cost_limit",
    "check_failed",
    "hook_refused",
]
UNANSWERED_CALL = "(the previous task ended here)"
LOOP_CLOSED = "(The previous task ended here. A new task follows.)"


@dataclass(frozen=True)
class RunResult:
    """How a run ended. `run()` returns `to_dict()`, the dict the system spec describes."""

    outcome: Outcome
    iterations: int
    conversation_length: int
    result: str = ""
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    elapsed_seconds: float = 0.0
    files_changed: tuple[dict[str, Any], ...] = ()  # {"path", "added", "removed"} per file
    diffs: dict[str, str] = field(default_factory=dict)  # path -> unified diff
    tool_errors: int = 0  # observations that were errors (declined ones included)
    declined: int = 0  # actions the user declined under --confirm
    cost_usd: float | None = None  # None: no price known for the model
    refused: int = 0  # actions a deny rule, the permission mode or a user's hook refused
    # Every command's result ({"iteration", "command", "exit_code", ...}, CommandResult's).
    commands: tuple[dict[str, Any], ...] = ()
    # Every action that did not run: {"iteration", "tool", "by" (user, rule, mode), "reason"}.
    refusals: tuple[dict[str, Any], ...] = ()
    # The check's last run ({"command", "passed", "exit_code", "output_tail", "attempts",
    # ...}), or None when the run has no check or never called task_complete.
    check: dict[str, Any] | None = None

    @property
    def success(self) -> bool:
        return self.outcome == "completed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "outcome": self.outcome,
            "iterations": self.iterations,
            "conversation_length": self.conversation_length,
            "result": self.result,
            "error": self.error,
            "usage": self.usage.to_dict(),
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "files_changed": list(self.files_changed),
            "tool_errors": self.tool_errors,
            "declined": self.declined,
            "refused": self.refused,
            "refused_actions": list(self.refusals),
            "commands": list(self.commands),
            "check": self.check,
            "cost_usd": self.cost_usd,
        }


class RunCancelled(Exception):
    """Raised inside the loop when cancel() was called; ends the run as 'cancelled'."""


@dataclass
class _Run:
    """What lives exactly as long as one run: made by run(), dropped when it ends."""

    routes: RouteTable
    subscribers: list[Subscriber]
    changes: ChangeTracker
    hooks: RunHooks
    observer: Observer
    check: TaskCheck
    tool_errors: int = 0
    declined: int = 0
    refused: int = 0
    commands: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)


class ReactAgent:
    """Runs one task at a time against a repository.

    `run()` never raises for the model's or the provider's failures: the returned dict says
    how the run ended (`outcome`: completed, max_iterations, cancelled, provider_error,
    replay_diverged, cost_limit, hook_refused: the user's prompt hook refused the task).
    `run_result()` does the same and returns the typed `RunResult`; given a `history` (an
    earlier conversation) it continues it with the new task.
    `instructions` (the project's AGENTS.md, the user's own) end the system prompt; `cost`
    prices each call and may stop a run before one (default: the model's price, no limit).
    `permissions` say what is offered, what runs and what asks `confirm` first (default:
    mode ask when a `confirm` hook is given, as before permission modes existed, else auto).
    `tools` is the repository's CodeRepositoryTools, or your own tools (functions with type
    hints and a docstring, or Tool objects; see toy_agent.tools.tool) offered next to the
    built-in ones on `repo_path`.
    `check` is a shell command that decides whether the task is done: it runs (sandboxed like
    run_command, under the deny rules) when the model calls task_complete; when it fails, the
    model is given its exit code and output and the run goes on, up to `check_retries` more
    times within the iteration limit. A run whose check never passed ends "check_failed".
    `hooks`: the user's own commands, run before and after each tool and around the run
    (toy_agent.hooks; never from the repository).
    """

    def __init__(
        self,
        llm_client: LlmClient,
        repo_path: str | Path | None = None,
        max_iterations: int = AgentSettings.max_iterations,
        mcp_server_url: str | None = None,
        *,
        tools: CodeRepositoryTools | Iterable[Tool | Callable[..., Any]] | None = None,
        mcp_tools: McpTools | None = None,
        tool_format: str | ActionFormat = AgentSettings.tool_format,
        context_budget: int = AgentSettings.context_budget,
        allow_commands: bool | None = None,
        redactor: Redactor | None = None,
        on_event: Subscriber | Iterable[Subscriber] | None = None,
        confirm: Confirm | None = None,
        stream: bool = False,
        instructions: str = "",
        cost: CostMeter | None = None,
        permissions: Permissions | None = None,
        check: str | None = None,
        check_retries: int = DEFAULT_CHECK_RETRIES,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        lint: LintMode = ToolSettings.lint,
        lint_commands: Sequence[str] = (),
        hooks: Hooks | None = None,
    ):
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.redactor = redactor or Redactor()
        self.tools = _repository_tools(tools, repo_path, allow_commands, self.redactor)
        self.repo_path = self.tools.repo_path
        self.llm_client = llm_client  # adapted (see the property)
        self.max_iterations = max_iterations
        self.mcp_server_url = mcp_server_url
        self.mcp_tools_client = mcp_tools
        self.format = get_format(tool_format) if isinstance(tool_format, str) else tool_format
        self.context_budget = context_budget
        self.confirm = confirm
        self.permissions = (permissions or Permissions("ask" if confirm else "auto")).for_tools(
            self.tools
        )
        self.stream = stream
        self.instructions = instructions
        self.check = check or None
        self.check_retries = check_retries
        self.check_timeout = check_timeout
        self.edits = edit_checker(self.tools, lint, lint_commands)
        # hooks get what commands get: the allow-list and the variables the user named
        self.hooks = replace(hooks or Hooks(), named=self.tools.command_env)
        self.cost = cost or CostMeter(price_for(self.llm_client.model))
        if on_event is None:
            on_event = []
        self._subscribers = [on_event] if callable(on_event) else list(on_event)
        self._cancel = threading.Event()
        self.conversation_history: list[Message] = []
        self.system_prompt = ""
        self.usage = Usage()
        self.iteration = 0
        self._run: _Run | None = None

    # -- public -------------------------------------------------------------------------

    @property
    def llm_client(self) -> AdaptedClient:
        """The client given, adapted where it enters: an AdaptedClient (the whole LlmClient
        interface whatever the client; `.client` is the one given, and its other attributes
        read through). Setting it (interactive /model) adapts the new one."""
        return self._llm

    @llm_client.setter
    def llm_client(self, client: LlmClient) -> None:
        self._llm = AdaptedClient.of(client)

    def run(self, task: str) -> dict[str, Any]:
        """Work on `task` until task_complete, the iteration limit, cancel() or Ctrl-C."""
        return self.run_result(task).to_dict()

    def run_result(self, task: str, history: Sequence[Message] = ()) -> RunResult:
        """`run()`, returning the typed RunResult (with the diffs of the changed files).
        `history`: an earlier conversation this task continues (the messages before it)."""
        self._cancel.clear()
        self.usage, self.iteration = Usage(), 0
        started, spent = time.monotonic(), self.cost.spent
        self.tools.decide_git()  # before the MCP servers, hooks and tools could change anything
        with self._mcp_session() as mcp:
            run = self._run = self._new_run(mcp)
            changes = run.changes
            try:
                self.system_prompt = self._build_system_prompt()
                task = wire_text(task)
                hooked = run.hooks.start(task)
                notes = hooked.notes()
                told = f"{task}\n\n{notes}" if notes else task
                task_message = Message("user", self.redactor.redact(told))
                self.conversation_history = _continued(history, task_message, self.format)
                self._emit(RunStarted(task, self.system_prompt, self.settings(), changes))
                run.hooks.tell(hooked, self.iteration)
                refused = hooked.blocked
                if refused is None:
                    outcome, answer, error = self._loop()
                else:
                    reason = f"the user's prompt hook refused the task: {refused.text}"
                    outcome, answer, error = "hook_refused", "", reason
                self.tools.remove_planted_git(run_ended=True)
                diffs = changes.diffs()
                result = RunResult(
                    outcome, self.iteration, len(self.conversation_history), answer, error,
                    self.usage, time.monotonic() - started, tuple(changes.diff_stat()), diffs,
                    run.tool_errors, run.declined, self.cost.since(spent), run.refused,
                    tuple(run.commands), tuple(run.refusals), run.check.record,
                )  # fmt: skip
                self._emit(RunFinished(result.to_dict(), diffs))
                run.hooks.stop(task, result.to_dict())
                return result
            finally:
                self._run = None

    def cancel(self) -> None:
        """Stop the run from another thread: the LLM call in flight is abandoned."""
        self._cancel.set()

    def settings(self) -> dict[str, Any]:
        return {
            "provider": self.llm_client.provider,
            "model": self.llm_client.model,
            "base_url": saved_base_url(self.llm_client.base_url),
            "effort": self.llm_client.effort,
            "model_options": dict(self.llm_client.model_options),
            "repo": str(self.repo_path),
            "max_iterations": self.max_iterations,
            "tool_format": self.format.name,
            "context_budget": self.context_budget,
            "allow_commands": self.tools.allow_commands,
            "sandbox": self.tools.sandbox,
            "sandbox_policy": policy.describe() if (policy := self.tools.sandbox_policy) else None,
            "command_env": sorted(self.tools.command_env),  # names only: values may be secrets
            "permission_mode": self.permissions.mode,
            "command_rules": self.permissions.rules.to_dict(),
            "tools": self._routes.names,
            "image_types": sorted(self.llm_client.image_types),
            "hooks": self.hooks.describe(),
        }

    # -- the loop -----------------------------------------------------------------------

    def _loop(self) -> tuple[Outcome, str, str | None]:
        try:
            for iteration in range(1, self.max_iterations + 1):
                self.iteration = iteration
                self._check_cancelled()
                self._emit(StepStarted(self.iteration, self.max_iterations))
                if iteration == 1:  # the model thinks a while: time to walk the repository
                    self.tools.tree.warm_up()
                response = self._call_llm()
                final_answer = self._process_response(response)
                if final_answer is not None:
                    error = self._state.check.error  # the check never passed
                    return ("check_failed" if error else "completed"), final_answer, error
            limit = f"reached the iteration limit ({self.max_iterations}) without task_complete"
            return "max_iterations", "", limit
        except (RunCancelled, KeyboardInterrupt):
            return "cancelled", "", "the run was cancelled"
        except CostLimitReached as exc:
            self.iteration -= 1  # the step that would have gone over never called the LLM
            return "cost_limit", "", str(exc)
        except ReplayDiverged as exc:
            return "replay_diverged", "", str(exc)
        except LlmError as exc:
            # The caller reports it, once (the CLI: one error line); the log keeps the details.
            logger.debug("LLM call failed: %s", exc, exc_info=True)
            self._emit(LlmFailed(self.iteration, str(exc), exc.attempts))
            return "provider_error", "", str(exc)

    def _build_system_prompt(self) -> str:
        intro = SYSTEM_PROMPT_INTRO
        if self.permissions.read_only:
            rule = PLAN_PROMPT if self.permissions.mode == "plan" else READ_ONLY_PROMPT
            intro = f"{intro}\n{rule}"
        prompt = f"{intro}\n\n{self.format.prompt_section(self._routes.specs)}"
        return f"{prompt}\n\n{self.instructions}" if self.instructions else prompt

    def _call_llm(self) -> LlmResponse:
        """Send the history (fitted to the budget), record the reply in the history. The
        reply carries how long the call took (`seconds`)."""
        messages = fit_to_budget(recent_images(self.conversation_history), self.context_budget)
        self.cost.check(self.system_prompt, messages)
        self._emit(LlmRequested(self.iteration, messages))
        tools = list(self._routes.specs) if self.format.native_tools else None
        streaming: dict[str, Any] = {}
        if self.stream:  # a retry voids the text streamed so far: the view must hear of it
            streaming["on_text"] = lambda text: self._emit(TextDelta(text))
            streaming["on_retry"] = lambda attempt: self._emit(LlmRetrying(self.iteration, attempt))
        started = time.monotonic()
        call = partial(self.llm_client.call_llm, self.system_prompt, messages, tools=tools,
                       **streaming)  # fmt: skip
        # cancel() and Ctrl-C do not wait for the network
        response = abandonable(call, name="toy-agent-llm", check=self._check_cancelled)
        calls = tuple(_bounded(call) for call in response.tool_calls)
        response = replace(response, text=wire_text(response.text), tool_calls=calls,
                           seconds=time.monotonic() - started)  # fmt: skip
        self.usage += response.usage
        self.cost.add(response.usage)
        self.conversation_history.append(response.message())
        self._emit(LlmResponded(self.iteration, response, response.seconds))
        return response

    def _parse_response(self, response: LlmResponse | str) -> ParsedResponse:
        """The spec's parse step; raises ParseError (with a message for the LLM) on failure."""
        response = LlmResponse.of(response)
        check_stop_reason(response)
        return self.format.parse(response, self._routes.specs)

    def _process_response(self, response: LlmResponse | str) -> str | None:
        """Parse, run each action, record the observations. Returns the final answer, if any."""
        response = LlmResponse.of(response)
        try:
            parsed = self._parse_response(response)
        except ParseError as exc:
            self.conversation_history.append(self._error_message(response, exc))
            self._emit(StepFinished(Step(self.iteration, response, parse_error=str(exc),
                                         llm_seconds=response.seconds)))  # fmt: skip
            return None
        observations: list[Observation] = []
        final_answer, tool_seconds = None, 0.0
        self._state.observer.new_step()
        for index, action in enumerate(parsed.actions):
            if _completes(action):
                rejected = self._state.check.verdict(action, self.iteration)
                observations += [rejected] if rejected else []  # the model is told, goes on
                if rejected is None or not self._state.check.may_retry:
                    final_answer = self._final_answer(action.parameters)
                else:  # the run goes on: each native call must have its result
                    observations += map(_not_run, parsed.actions[index + 1 :])
                break
            observation, seconds = self._run_action(action)  # a task_complete with no result too
            observations.append(observation)
            tool_seconds += seconds
        if observations and parsed.notice:
            last = observations[-1]
            observations[-1] = replace(last, content=f"{last.content}\n\n{parsed.notice}")
        if observations:
            self.conversation_history.append(self.format.observation_message(observations))
        step = Step(self.iteration, response, parsed.thought, parsed.actions,
                    tuple(observations), llm_seconds=response.seconds,
                    tool_seconds=tool_seconds)  # fmt: skip
        self._emit(StepFinished(step))
        return final_answer

    def _run_action(self, action: Action) -> tuple[Observation, float]:
        """The observation of one action, and the seconds its tool took (--confirm's wait for
        an answer is not the tool's time)."""
        run = self._state
        self._emit(ToolStarted(self.iteration, action))
        refusal = self._refusal(action)
        if refusal is not None:
            self._refused(action, refusal)
            result = ActionResult.refused(refusal)
        else:
            result = self._tool_result(action)
        if result.command is not None:
            run.commands.append({"iteration": self.iteration, **result.command.to_dict()})
        run.tool_errors += result.is_error
        task = self.conversation_history[0].content if self.conversation_history else ""
        cap = observation_cap(self.context_budget, task)
        observation = run.observer.observe(action, result, cap, self.iteration)
        self._emit(ToolFinished(self.iteration, observation, result.seconds))
        return observation, result.seconds

    def _tool_result(self, action: Action) -> ActionResult:
        """What the tool gave (its output, or its error), the seconds it took, the check of
        the file it edited, and the notes of what the rules did to it (a refusal of a path,
        the cuts the tool made)."""
        started = time.monotonic()
        edited = self.edits.target(action.tool_name, action.parameters)
        old = self.edits.before(edited) if edited else None

        def progress(p: McpProgress) -> None:
            self._emit(ToolProgress(self.iteration, action.tool_name, p.progress, p.total,
                                    p.message))  # fmt: skip

        content: str | ToolOutput
        try:
            with reporting_progress(progress), cuts.recording() as made:
                content = self._execute_tool(action.tool_name, action.parameters,
                                             action.arguments_error)  # fmt: skip
        except (ToolError, McpToolError) as exc:
            refused = [Note("refused", str(exc))] if isinstance(exc, ToolRefusal) else []
            return ActionResult.of(f"Error: {exc}", True, time.monotonic() - started,
                                   notes=refused)  # fmt: skip
        is_error, edit_check = False, None
        if edited:
            edit_check = self.edits.after(edited, old)
            content, is_error = edit_check.observed(content)
        return ActionResult.of(content, is_error, time.monotonic() - started, edit_check,
                               cut_notes(made))  # fmt: skip

    def _refused(self, action: Action, refusal: Refusal) -> None:
        """Count and record an action that did not run."""
        if refusal.by == "user":
            self._state.declined += 1
        else:
            self._state.refused += 1
        self._state.refusals.append({"iteration": self.iteration, "tool": action.tool_name,
                                     "by": refusal.by, "reason": refusal.reason})  # fmt: skip
        self._emit(ToolRefused(self.iteration, action, refusal.by, refusal.reason))

    def _refusal(self, action: Action) -> Refusal | None:
        """None when the action may run; else who refused it, why, and the observation."""
        if action.tool_name not in self._routes.routes and not self.permissions.read_only:
            return None  # not offered: no one is asked, the route table answers
        confirm = None if self.confirm is None else partial(self.confirm, action)
        pre_tool = partial(self._state.hooks.before, action.tool_name, action.parameters,
                           self.iteration)  # fmt: skip
        return self.permissions.gate(action.tool_name, action.parameters,
                                     self.tools.changes(action.tool_name), pre_tool=pre_tool,
                                     confirm=confirm, redact=self.redactor.redact)  # fmt: skip

    def _execute_tool(
        self, tool_name: str, parameters: dict[str, Any], arguments_error: str = ""
    ) -> str | ToolOutput:
        """Run one tool by name: task_complete gives the final answer; any other goes through
        the run's route table. Failures raise ToolError or McpToolError."""
        if arguments_error:
            raise ToolError(f"the arguments of this {tool_name} call are not a JSON object: "
                            f"{arguments_error[:500]!r}. Call it again with valid JSON "
                            "arguments.")  # fmt: skip
        if tool_name == "task_complete":
            return self._final_answer(parameters)
        return self._routes.call(tool_name, parameters)

    # -- helpers ------------------------------------------------------------------------

    def _new_run(self, mcp: McpTools | None) -> _Run:
        """A run's state and collaborators, made from the agent's settings as the run starts."""
        offered = OfferedTools.of
        permissions, redact = self.permissions, self.redactor.redact
        others = [offered(mcp, permissions)] if mcp else []
        routes = RouteTable.build(offered(self.tools, permissions), others)
        changes = ChangeTracker(self.tools)
        hooks = RunHooks(self.hooks, self.repo_path, permissions.mode, routes.routes, redact,
                         self._emit)  # fmt: skip
        observer = Observer(self.llm_client.image_types, self.llm_client.model, redact, hooks)
        check = TaskCheck(self.check, self.check_retries, self.check_timeout, self.tools,
                          permissions, redact, observation_cap(self.context_budget),
                          self._emit)  # fmt: skip
        return _Run(routes, [log_event, changes, *self._subscribers], changes, hooks, observer,
                    check)  # fmt: skip

    @property
    def _state(self) -> _Run:
        """The run's state; the spec's step methods called outside run() get a fresh one."""
        if self._run is None:
            self._run = self._new_run(self.mcp_tools_client)
        return self._run

    @property
    def _routes(self) -> RouteTable:
        return self._state.routes

    def _error_message(self, response: LlmResponse, error: ParseError) -> Message:
        """Native tool calls must each be answered, even when none of them was run."""
        if not response.tool_calls:
            return self.format.error_message(error)
        unanswered = [
            Observation(Action(call.name, call.arguments, call.id), f"Error: {error}", True)
            for call in response.tool_calls
        ]
        return self.format.observation_message(unanswered)

    @staticmethod
    def _final_answer(params: dict[str, Any]) -> str:
        answer = final_answer(params)
        if answer is None:
            raise ToolError(NO_RESULT)
        return answer

    def _check_cancelled(self) -> None:
        if self._cancel.is_set():
            raise RunCancelled()

    @contextlib.contextmanager
    def _mcp_session(self) -> Iterator[McpTools | None]:
        """The MCP tools for this run: the caller's, or servers named by `mcp_server_url`,
        opened for this run only."""
        if self.mcp_tools_client or not self.mcp_server_url:
            yield self.mcp_tools_client
            return
        with McpTools(self.mcp_server_url, redact=self.redactor.redact) as mcp:
            yield mcp

    def _emit(self, event: Event) -> None:
        for subscriber in self._state.subscribers:
            subscriber(event)


NO_RESULT = (
    "task_complete needs a `result`: a short summary of what you did and the answer, e.g. "
    '{"result": "Fixed the off-by-one in median(); the tests pass."}. Call it again with one.'
)
NOT_RUN = "Not run: task_complete came before it in the same reply."


def final_answer(params: dict[str, Any]) -> str | None:
    """What a task_complete call answers: its `result` (or its only parameter, for a model
    that names it "answer" or "summary"; or all of them); None when it says nothing."""
    if "result" in params:
        value = params["result"]
    else:
        value = next(iter(params.values())) if len(params) == 1 else params or None
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if text.strip() else None


def _completes(action: Action) -> bool:
    """A task_complete that can end the run; one with unreadable arguments or no result runs
    as a failed tool call, and the model is told what it lacks."""
    return (action.tool_name == "task_complete" and not action.arguments_error
            and final_answer(action.parameters) is not None)  # fmt: skip


def _not_run(action: Action) -> Observation:
    return Observation(action, f"Error: {NOT_RUN}", True)


def _continued(history: Sequence[Message], task: Message, fmt: ActionFormat) -> list[Message]:
    """The earlier conversation, then the new task. Native tool calls the last run left
    unanswered (its task_complete, a call Ctrl-C stopped) get a result, and an assistant turn
    closes that tool loop before the task: providers reject a tool call without a result, and
    a result travelling with the new task would keep the old loop open (Claude then wants its
    thinking back on the old turn, Gemini its signatures). In a text format, native calls and
    results of an earlier run (in --tool-format native) are rewritten as this format's text:
    providers reject tool calls in a request that offers no tools, and the model reads one
    format."""
    if not fmt.native_tools:
        return [*(_as_text(message, fmt) for message in history), task]
    at = next((i for i in reversed(range(len(history))) if history[i].role == "assistant"), -1)
    answered = {r.call_id for m in history[at + 1 :] for r in m.tool_results}  # ids may repeat
    open_calls = [c for c in (history[at].tool_calls if at >= 0 else ()) if c.id not in answered]
    messages = list(history)
    if open_calls:
        results = tuple(ToolResult(c.id, c.name, UNANSWERED_CALL) for c in open_calls)
        messages.append(Message("user", "", tool_results=results))
    if messages and messages[-1].tool_results:  # the loop ended on results: close it
        messages.append(Message("assistant", LOOP_CLOSED))
    return [*messages, task]


def _as_text(message: Message, fmt: ActionFormat) -> Message:
    """`message` with its native tool calls or results written as `fmt`'s text."""
    if message.tool_calls:
        actions = [Action(c.name, c.arguments, c.id) for c in message.tool_calls]
        return Message(message.role, fmt.action_text(message.content.strip(), actions))
    if message.tool_results:
        observations = [
            Observation(Action(r.name, {}, r.call_id), r.content, r.is_error, r.images)
            for r in message.tool_results
        ]
        observed = fmt.observation_message(observations)
        text = f"{observed.content}\n\n{message.content}" if message.content else observed.content
        return Message(message.role, text, images=(*observed.images, *message.images))
    return message


def _bounded(call: ToolCall) -> ToolCall:
    """A native call whose arguments nest absurdly deep keeps none of them (they would be sent
    back with every request): the model is told, through arguments_error, to resend."""
    if nesting_depth(call.arguments) <= MAX_PARAMETER_DEPTH:
        return call
    error = f"(arguments nested more than {MAX_PARAMETER_DEPTH} levels deep: dropped)"
    return replace(call, arguments={}, arguments_error=error)


def _repository_tools(
    tools: CodeRepositoryTools | Iterable[Tool | Callable[..., Any]] | None,
    repo_path: str | Path | None,
    allow_commands: bool | None,
    redactor: Redactor,
) -> CodeRepositoryTools:
    """The tools, or tools for `repo_path` (with the user's own, when `tools` lists them);
    what `tools` already says must not be contradicted (a different repository, or commands
    asked for but off)."""
    if not isinstance(tools, CodeRepositoryTools):
        return CodeRepositoryTools(repo_path or ".", allow_commands=bool(allow_commands),
                                   redactor=redactor, extra_tools=tools or ())  # fmt: skip
    if repo_path is not None and Path(repo_path).resolve() != tools.repo_path:
        raise ValueError(f"repo_path {repo_path} contradicts tools, which work on "
                         f"{tools.repo_path}; pass one of them")  # fmt: skip
    if allow_commands is not None and allow_commands != tools.allow_commands:
        raise ValueError(f"allow_commands={allow_commands} contradicts tools, built with "
                         f"allow_commands={tools.allow_commands}")  # fmt: skip
    return tools
