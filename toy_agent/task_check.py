"""The user's check at task_complete (--check): a shell command that decides whether the task
is done. It runs (sandboxed like run_command, under the deny rules) each time the model calls
task_complete; when it fails, the model is given its exit code and output and the run goes
on, up to `retries` more times. A run whose check never passed ends "check_failed"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toy_agent.budget import cap_text
from toy_agent.events import CheckFinished
from toy_agent.messages import CommandResult, Note
from toy_agent.parsing import Action, Observation
from toy_agent.permissions import Permissions
from toy_agent.settings import AgentSettings
from toy_agent.tools import CodeRepositoryTools

DEFAULT_CHECK_RETRIES = AgentSettings.check_retries  # the defaults live in toy_agent.settings
DEFAULT_CHECK_TIMEOUT = AgentSettings.check_timeout
CHECK_FAILED = (
    "task_complete was not accepted yet: the user's check `{command}` ran and {status} "
    "(attempt {attempt} of {limit}). The end of its output:\n{tail}\n"
    "The task is done when this check passes: fix what it reports, then call task_complete "
    "again."
)


@dataclass
class TaskCheck:
    """One run's check (`command` None: the run has none). `record` is its last run
    ({"command", "passed", "exit_code", "output_tail", "attempts", ...}: RunResult.check);
    each run is told through `emit` (CheckFinished). The model's observation of a failed
    check is redacted with `redact` and cut to `cap` characters."""

    command: str | None
    retries: int
    timeout: float
    tools: CodeRepositoryTools
    permissions: Permissions
    redact: Callable[[str], str]
    cap: int
    emit: Callable[[CheckFinished], None]
    record: dict[str, Any] | None = None

    def verdict(self, action: Action, iteration: int) -> Observation | None:
        """Run the check for this task_complete: None when it passed (or there is none), else
        the observation that tells the model why the task is not done yet."""
        if not self.command:
            return None
        attempts = (self.record or {}).get("attempts", 0) + 1
        decision = self.permissions.decide("run_command", {"command": self.command}, "commands")
        if decision.verdict == "deny":  # the user's rules bind the user's check too
            result = CommandResult(self.command, None, 0.0, output_tail=f"refused: "
                                   f"{decision.reason}")  # fmt: skip
            status = f"was refused ({decision.reason})"
        else:
            result = self.tools.run_check(self.command, self.timeout)
            status = "passed" if result.ok else result.status.replace("exit", "exited with", 1)
        self.record = {"command": result.command, "passed": result.ok, "exit_code":
                       result.exit_code, "output_tail": result.output_tail, "attempts": attempts,
                       "seconds": round(result.seconds, 3), "timed_out": result.timed_out,
                       **({"sandbox_note": result.sandbox_note} if result.sandbox_note else {})
                       }  # fmt: skip
        self.emit(CheckFinished(iteration, result, attempts, 1 + self.retries))
        if result.ok:
            return None
        text = CHECK_FAILED.format(command=self.command, status=status, attempt=attempts,
                                   limit=1 + self.retries,
                                   tail=result.output_tail or "(no output)")  # fmt: skip
        text = cap_text(self.redact(text), self.cap, "task_complete")
        notes = [Note("check", f"{result.command}: {status}")]
        if result.sandbox_note:
            notes.append(Note("sandbox", result.sandbox_note))
        return Observation(action, text, True, command=result, notes=tuple(notes))

    @property
    def may_retry(self) -> bool:
        """The check failed with attempts left: the model goes on instead of the run ending."""
        record = self.record
        return record is not None and not record["passed"] and record["attempts"] <= self.retries

    @property
    def error(self) -> str | None:
        """Why the run failed its check; None when the check passed or never ran."""
        if self.record is None or self.record["passed"]:
            return None
        code, attempts = self.record.get("exit_code"), self.record["attempts"]
        how = f"exit {code}" if code is not None else "refused"
        how = "timed out" if self.record.get("timed_out") else how
        return (f"the check `{self.record['command']}` did not pass ({how}) after "
                f"{attempts} attempt{'s' * (attempts != 1)}")  # fmt: skip
