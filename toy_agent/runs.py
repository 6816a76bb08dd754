"""What the command line runs: one task, a session, a batch, --list-tools, --undo, demo, replay.

Each mode is given the objects cli.py built from the flags and returns the exit code.

Like cli.py, this imports nothing heavy at the top (the agent, the provider SDKs, mcp, rich),
so `--help` stays instant; each mode imports what it uses.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toy_agent import providers

if TYPE_CHECKING:  # imported for real only where used, so --help stays instant
    from toy_agent.agent import RunResult
    from toy_agent.llm import LlmClient
    from toy_agent.mcp_tools import McpTools
    from toy_agent.messages import Message
    from toy_agent.redaction import Redactor
    from toy_agent.sessions import Session, SessionRecorder, SessionStore
    from toy_agent.settings import ModelSettings, RunSettings
    from toy_agent.tools import CodeRepositoryTools
    from toy_agent.view import TerminalView


EXIT_COMPLETED, EXIT_NOT_COMPLETED, EXIT_USAGE, EXIT_PROVIDER, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `... | head`
OUTCOME_EXIT_CODES = {
    "completed": EXIT_COMPLETED,
    "max_iterations": EXIT_NOT_COMPLETED,
    "provider_error": EXIT_PROVIDER,
    "cancelled": EXIT_INTERRUPTED,
    "replay_diverged": EXIT_NOT_COMPLETED,
    "cost_limit": EXIT_NOT_COMPLETED,
    "check_failed": EXIT_NOT_COMPLETED,
    "hook_refused": EXIT_NOT_COMPLETED,
}


class UsageError(Exception):
    """A mistake in the flags or the environment: one line on stderr, exit code 2."""


def _use_demo(args: argparse.Namespace) -> None:
    """--demo: the bundled demo repository copied into a fresh temporary folder (so running
    it twice never collides), replayed with its bundled recording, the diff shown."""
    import json
    import shutil
    import tempfile
    from importlib.resources import as_file, files

    if args.task or args.task_text or args.replay:
        raise UsageError("--demo brings its own task and recording: leave out the task and "
                         "--replay")  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="toy-agent-demo-"))
    demo = files("toy_agent") / "demo"
    with as_file(demo / "repo") as repo, as_file(demo / "trajectory.json") as recording:
        shutil.copytree(repo, folder / "demo")
        shutil.copyfile(recording, folder / "trajectory.json")
    args.repo, args.replay = str(folder / "demo"), str(folder / "trajectory.json")
    args.task = json.loads((folder / "trajectory.json").read_text(encoding="utf-8"))["task"]
    args.llm_provider, args.show_diff, args.demo_folder = "replay", True, folder


def _recorded_task(path: str) -> str | None:
    """The task a recording ran; None when the file says none. A file that is no recording
    is a usage error in the replay client's own words (what is wrong with it), not a call
    for a --task it would fail without."""
    from toy_agent.llm import LlmConfigError, ReplayLlmClient
    from toy_agent.record import read_trajectory

    try:
        task = read_trajectory(path).task
    except (OSError, ValueError):  # ValueError: RecordError
        try:
            ReplayLlmClient(path)  # reads it again, to say what is wrong in one place's words
        except LlmConfigError as exc:
            raise UsageError(str(exc)) from None
        raise
    return task if task.strip() else None


def _run_agent(
    args: argparse.Namespace,
    settings: RunSettings,
    repo: Path,
    task: str | None,
    llm: LlmClient,
    mcp: McpTools | None,
    redactor: Redactor,
    view: TerminalView | None,
    tools: CodeRepositoryTools,
    models: Callable[[str, str], LlmClient],
    instructions: str = "",
) -> int:
    """One task, or (`task` None) the interactive session; either way saved as a session."""
    from toy_agent.build import build_agent
    from toy_agent.events import (
        OUTPUT_SCHEMA_VERSION,
        JsonLinesWriter,
        TrajectoryRecorder,
        run_diff,
    )
    from toy_agent.messages import visible
    from toy_agent.permissions import Permissions
    from toy_agent.plans import carry_out_task, save_plan
    from toy_agent.pricing import PriceError
    from toy_agent.view import format_summary, make_confirm, sandbox_summary, to_json, use_color

    subscribers: list[Any] = []
    lines = JsonLinesWriter(sys.stdout, redactor.redact_obj)
    if args.output == "stream-json":
        subscribers.append(lines)
    if view is not None:
        subscribers.append(view)
    recorder = None
    if args.trajectory:
        recorder = TrajectoryRecorder(Path(args.trajectory), redactor.redact_obj)
        subscribers.append(recorder)
    sessions = _session_recorder(args, repo, tools, redactor, lambda: agent.conversation_history)
    subscribers.append(sessions)
    permissions = (settings.agent.permissions or Permissions()).for_tools(tools)
    confirm = None  # a plan carried out may ask, and so may a session after /plan
    if permissions.may_ask(tools.allow_commands) or task is None or permissions.mode == "plan":
        confirm = make_confirm(tools, view.ask if view and sys.stdin.isatty() else _ask)
    try:
        agent = build_agent(settings, llm, tools, mcp, redactor=redactor,
                            subscribers=subscribers, confirm=confirm, instructions=instructions,
                            session=lambda: sessions.session.id)  # fmt: skip
    except PriceError as exc:
        raise UsageError(str(exc)) from exc
    lines.session = sessions.session.id
    if task is None:
        from toy_agent.interactive import Repl

        return Repl(agent, sessions, view, show_diff=args.show_diff,
                    models=models).run()  # fmt: skip

    def report(outcome: RunResult, plan: Path | None = None) -> dict[str, Any]:
        diff, diff_cut = run_diff(redactor.redact_obj(outcome.diffs))
        result = {"schema_version": OUTPUT_SCHEMA_VERSION,
                  **redactor.redact_obj(outcome.to_dict()), "sandbox": tools.sandbox,
                  "permission_mode": agent.permissions.mode,
                  "session": sessions.session.id, "provider": settings.llm.provider,
                  "model": agent.llm_client.model or None, "trajectory": args.trajectory,
                  "exit_code": run_exit_code(outcome.outcome, outcome.refusals, args.strict,
                                             getattr(args, "stopped_by", None)),
                  "diff": diff, "diff_truncated": diff_cut,
                  **({"plan_file": str(plan)} if plan else {})}  # fmt: skip
        if outcome.outcome == "max_iterations":
            result["error"] = f"{result['error']}; {_how_to_go_on(args, repo)}"
        if outcome.outcome == "provider_error":  # once, here: the log does not repeat it
            print(f"toy-agent: error: {visible(result['error'] or 'the provider failed')}",
                  file=sys.stderr)  # fmt: skip
        if args.output == "json":
            print(to_json(result))
        elif args.output == "stream-json":
            lines.write({"type": "run_finished", **result})
        else:
            diffs = redactor.redact_obj(outcome.diffs)
            commands = tools.allow_commands and not agent.permissions.read_only
            shown = {**result, "sandbox": sandbox_summary(tools) if commands else None}
            if outcome.outcome == "provider_error":
                shown["error"] = None
            summary = format_summary(shown, diffs, show_diff=args.show_diff,
                                     color=use_color(sys.stdout))  # fmt: skip
            (view.show if view else print)(summary)  # the view wraps it to the terminal's width
        sys.stdout.flush()
        return result

    outcome = agent.run_result(sessions.task(task), history=sessions.conversation())
    plan = None
    if permissions.mode == "plan" and outcome.success:
        plan = save_plan(outcome.result, sessions.session.id)
    result = report(outcome, plan)
    if plan is not None and args.output == "text":
        mode = _approval(plan, view)
        if mode is not None:
            agent.permissions = replace(permissions, mode=mode)
            carry_out = sessions.task(carry_out_task(outcome.result, plan))
            result = report(agent.run_result(carry_out, history=sessions.conversation()))
    if recorder is not None and recorder.error:
        print(f"toy-agent: error: {recorder.error}", file=sys.stderr)
    if sessions.error:
        print(f"toy-agent: warning: {sessions.error}", file=sys.stderr)
    if getattr(args, "demo_folder", None):
        import shlex

        where = sys.stdout if args.output == "text" else sys.stderr
        copy = shlex.quote(str(args.demo_folder / "demo"))
        print(f"\nThe demo ran on a copy in {copy}: look around, or run its tests:\n"
              f"  cd {copy} && python -m pytest\n"
              f"Go on from where it stopped, with your own model (it needs the provider's key):"
              f"\n  toy-agent --resume {sessions.session.id} \"add a test for an empty list\"",
              file=where)  # fmt: skip
    return int(result["exit_code"])


def run_exit_code(
    outcome: str,
    refusals: Sequence[Any] = (),
    strict: bool = False,
    stopped_by: Sequence[int] | None = None,
) -> int:
    """The exit code of a run: its outcome's, except that under --strict a completed run in
    which something was refused or declined is not done (1), and a run cancelled by a signal
    the CLI turned into Ctrl-C (`stopped_by`: SIGTERM, SIGHUP) exits 128 + its number."""
    if strict and outcome == "completed" and refusals:
        return EXIT_NOT_COMPLETED
    if outcome == "cancelled" and stopped_by:
        return 128 + stopped_by[-1]
    return OUTCOME_EXIT_CODES[outcome]


def _approval(plan: Path, view: TerminalView | None) -> str | None:
    """The mode to carry out the plan in, as the user answers (None: no, or no answer)."""
    from toy_agent.messages import visible
    from toy_agent.plans import QUESTION, chosen_mode

    preview = f"The plan is saved in {visible(str(plan))}."
    try:
        answer = (view.ask if view else _ask)(preview, QUESTION)
    except EOFError:
        answer = ""
    mode = chosen_mode(answer)
    if mode is None:
        print(f"toy-agent: not carried out; the plan stays in {visible(str(plan))}",
              file=sys.stderr)  # fmt: skip
    return mode


def _how_to_go_on(args: argparse.Namespace, repo: Path) -> str:
    """What the iteration limit's message adds: the next command, as it can be pasted."""
    import shlex

    where = "" if repo == Path.cwd().resolve() else f" --repo {shlex.quote(str(repo))}"
    return (f'to go on, run toy-agent -c{where} "continue" (the same session, '
            f"{args.max_iterations} more steps), or allow more steps with --max-iterations N "
            "(or max_iterations = N in the config file)")  # fmt: skip


def _session_recorder(
    args: argparse.Namespace,
    repo: Path,
    tools: CodeRepositoryTools,
    redactor: Redactor,
    history: Callable[[], Sequence[Message]],
) -> SessionRecorder:
    """The run's session: a new one, the latest of --repo (--continue) or --resume's."""
    from toy_agent.sessions import Retention, SessionError, SessionRecorder, SessionStore

    retention = Retention(args.sessions_keep, args.sessions_keep_days)
    store = SessionStore(retention=retention)  # the demo's too: its id can be resumed
    if args.resume and args.continue_session:
        raise UsageError("--continue and --resume: give one of them")
    if args.resume:
        session = _load_session(args.resume, store)
    elif args.continue_session:
        latest = store.latest(repo)
        if latest is None:
            raise UsageError(f"no saved session of {repo} to continue (sessions: {store.root})")
        session = latest
    else:
        session = store.new(repo)
    session.repo = str(repo)  # a session resumed with another --repo moves there
    try:
        return SessionRecorder(store, session, tools, history, redactor.redact_obj)
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def _load_session(id_or_file: str, store: SessionStore | None = None) -> Session:
    from toy_agent.sessions import SessionError, SessionStore

    try:
        return (store or SessionStore()).load(id_or_file)
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def _undo(args: argparse.Namespace, repo: Path) -> int:
    """--undo: revert the latest run in --repo; refused (exit 1) when a file changed since."""
    from toy_agent.sessions import (
        NothingToUndo,
        SessionError,
        SessionStore,
        UndoRefused,
        undo_latest_in_repo,
    )
    from toy_agent.view import to_json, visible

    if args.task or args.continue_session or args.resume:
        raise UsageError("--undo reverts the latest run and exits: it takes no --task, "
                         "--continue or --resume")  # fmt: skip
    from toy_agent.events import OUTPUT_SCHEMA_VERSION

    kind = {"type": "run_finished"} if args.output == "stream-json" else {}  # its one line
    try:
        undone = undo_latest_in_repo(SessionStore(), repo)
    except (UndoRefused, NothingToUndo) as exc:
        print(f"toy-agent: {visible(str(exc))}", file=sys.stderr)
        if args.output != "text":  # one JSON object for every exit code
            outcome = "nothing_to_undo" if isinstance(exc, NothingToUndo) else "undo_refused"
            print(to_json({**kind, "schema_version": OUTPUT_SCHEMA_VERSION, "success": False,
                           "outcome": outcome, "error": str(exc),
                           "exit_code": EXIT_NOT_COMPLETED}))  # fmt: skip
        return EXIT_NOT_COMPLETED
    except SessionError as exc:
        raise UsageError(str(exc)) from exc
    if args.output != "text":
        print(to_json({**kind, "schema_version": OUTPUT_SCHEMA_VERSION, "success": True,
                       "outcome": "undone", "session": undone.session.id, "task": undone.task,
                       "restored": undone.restored, "removed": undone.removed,
                       "exit_code": EXIT_COMPLETED}))  # fmt: skip
    else:
        print(f"toy-agent: {visible(undone.describe())}")
    return EXIT_COMPLETED


def _refuse_single_run_flags(args: argparse.Namespace) -> None:
    single = {"--continue": args.continue_session, "--resume": args.resume, "--undo": args.undo,
              "--append-system-prompt": args.append_system_prompt}  # fmt: skip
    for flag in (flag for flag, given in single.items() if given):
        raise UsageError(f"{flag} is for a single run or session, not for --tasks-file")


def _run_batch(args: argparse.Namespace, live: bool) -> int:
    """--tasks-file: toy_agent.batch.driver runs every task in its own copy and writes --out."""
    from toy_agent.batch.driver import BatchError, BatchInterrupted, run_batch
    from toy_agent.llm import LlmConfigError
    from toy_agent.mcp_config import McpError
    from toy_agent.settings import RunSettings
    from toy_agent.view import to_json

    if not args.tasks_file or not args.out:
        raise UsageError("batch runs need both --tasks-file TASKS.jsonl and --out DIR")
    single = {"--task": args.task, "--repo": args.repo != ".", "--trajectory": args.trajectory,
              "--confirm": args.confirm, "--stream": args.stream, "--show-diff": args.show_diff,
              "--list-tools": args.list_tools}  # fmt: skip
    for flag in (flag for flag, given in single.items() if given):
        raise UsageError(f"{flag} is for a single run: with --tasks-file each line names its "
                         "repo and task, and patches and trajectories go to --out")  # fmt: skip
    if args.permissions.mode == "ask":
        raise UsageError("--permission-mode ask waits for your answer before every change, "
                         "which a batch cannot give: use edits, auto or read-only")  # fmt: skip
    try:
        settings = RunSettings.from_args(args)
    except (McpError, LlmConfigError) as exc:
        raise UsageError(str(exc)) from exc
    if args.max_total_cost is not None or settings.llm.max_cost is not None:
        _batch_prices(settings.llm, args.max_total_cost)
    swe = _swe_options(args)
    try:
        summary = run_batch(
            args.tasks_file, args.out, settings, workers=args.workers, redo=args.redo,
            executor=args.executor, ray_address=args.ray_address, live=live,
            max_total_cost=args.max_total_cost,
            progress=None if args.output == "json" else sys.stdout, quiet=args.quiet,
            swe=swe, model_name=args.model_name, patch_exclude=tuple(args.patch_exclude),
        )  # fmt: skip
    except BatchError as exc:
        raise UsageError(str(exc)) from exc
    except BatchInterrupted as stopped:  # the summary still goes out, "interrupted": true
        if args.output == "json":
            print(to_json(stopped.summary.to_dict()))
        raise
    if args.output == "json":
        print(to_json(summary.to_dict()))
    return summary.exit_code


def _swe_options(args: argparse.Namespace) -> Any:
    """--repo-map, --repo-cache, --hints, --filter, --slice, --test-cmd as SweOptions."""
    import re

    from toy_agent.batch.swebench import SweOptions, parse_slice

    repo_map = {}
    for entry in args.repo_map:
        name, equals, path = entry.partition("=")
        if not equals or not name.strip() or not path.strip():
            raise UsageError(f"--repo-map {entry!r}: expected OWNER/NAME=PATH")
        repo_map[name.strip()] = path.strip()
    try:
        part = parse_slice(args.slice) if args.slice else None
        if args.filter:
            re.compile(args.filter)
    except (ValueError, re.error) as exc:
        raise UsageError(f"--filter {args.filter!r}: {exc}" if isinstance(exc, re.error)
                         else str(exc)) from None  # fmt: skip
    cache = Path(args.repo_cache).expanduser().resolve() if args.repo_cache else None
    return SweOptions(repo_map, cache, args.hints, args.filter, part, args.test_cmd)


def _batch_prices(llm: ModelSettings, max_total_cost: float | None) -> None:
    """Cost limits on a batch need a price for its model, known before any task runs."""
    from toy_agent.pricing import PriceError, meter_for

    row = providers.PROVIDERS.get(llm.provider)
    model = llm.model or (row.default_model if row else llm.provider)
    limit = llm.max_cost if llm.max_cost is not None else max_total_cost
    try:
        meter_for(model, limit, llm.price_input, llm.price_output)
    except PriceError as exc:
        raise UsageError(str(exc).replace("--max-cost", "a cost limit")) from exc


def _list_tools(args: argparse.Namespace, tools: CodeRepositoryTools, mcp: McpTools | None) -> int:
    import json

    from toy_agent.permissions import OfferedTools
    from toy_agent.routes import RouteTable
    from toy_agent.view import sandbox_summary

    offered = [OfferedTools.of(mcp, args.permissions)] if mcp else []
    specs = RouteTable.build(OfferedTools.of(tools, args.permissions), offered).specs
    if args.output == "json":
        print(json.dumps(specs, indent=2))
        return EXIT_COMPLETED
    from toy_agent.messages import visible
    from toy_agent.variables import describe_command_env

    for spec in specs:  # an MCP server's names and descriptions may hold escape sequences
        schema = spec.get("parameters") or {}
        required = set(schema.get("required", []))
        params = ", ".join(p if p in required else f"{p}?" for p in schema.get("properties", {}))
        description = (spec.get("description") or "").strip()
        print(visible(f"{spec['name']}({params})"))
        print(visible(f"    {description.splitlines()[0] if description else ''}"))
    print(f"command environment: {describe_command_env(tools.command_env)}")
    policy = tools.sandbox_policy
    print(f"sandbox: {policy.describe() if policy else sandbox_summary(tools)}")
    if hooks := args.hooks.describe():
        print(f"hooks: {len(hooks)} (run outside the sandbox, in the repository)")
        for hook in hooks:
            print(visible(f"    {hook}"))
    return EXIT_COMPLETED


def _ask(preview: str, question: str) -> str:
    """--confirm without a terminal to type on: the answer is read first (a pipe's next line),
    then the preview, the question and that answer are shown on stderr. With no answer to read
    (stdin closed or at its end) nothing is asked: no question no one can answer."""
    if sys.stdin.isatty():
        sys.stderr.write(f"\n{preview}\n{question}")
        sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    if not sys.stdin.isatty():
        sys.stderr.write(f"\n{preview}\n{question}{line.rstrip()}\n")
        sys.stderr.flush()
    return line
