"""`toy-agent report`: one self-contained HTML page for a run (a trajectory or a saved session),
a batch's --out folder, or two batches side by side.

Everything on the page came from a repository, a model or a tool, so it is untrusted: jinja2
escapes it (autoescape on), secrets are redacted again with the project's redactor, control
characters are shown as escapes, long texts are cut to bounded sizes, and the page's
Content-Security-Policy allows only its own inline style and script (by their sha256), so
markup that slipped through could still not run. The page needs no network and works with
scripts off: its run pages are shown by CSS (`:target`); the script only sorts and filters.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, NoReturn, Protocol
from urllib.parse import quote

from toy_agent import __version__, cuts
from toy_agent.batch.tasks import TASK_ID
from toy_agent.files import atomic_write
from toy_agent.messages import CommandResult, LlmResponse, Message, Usage, visible
from toy_agent.parsing import ActionFormat, ParseError, get_format
from toy_agent.record import (
    RESULTS_FILE,
    SESSION_FORMAT,
    TRAJECTORY_FORMAT,
    CheckRecord,
    Compaction,
    ObservationRecord,
    Outcome,
    RecordError,
    SessionRecord,
    SessionRun,
    SessionStep,
    StepRecord,
    TaskResult,
    Trajectory,
    session_from_dict,
    task_results,
    trajectory_from_dict,
)
from toy_agent.redaction import REDACTED, Redactor, is_secret_variable


@dataclass(frozen=True)
class Caps:
    """How much of each text one page keeps. A single run keeps about what its trajectory
    has; each run of a batch much less (a thousand runs of thirty steps must open in a
    browser in seconds), and links to its trajectory and patch files for the rest."""

    text: int  # a thought, an action's parameters, the task, the answer
    observation: int
    diff: int  # a run's whole diff
    line: int = 1_000  # one line of a diff


RUN_CAPS = Caps(text=20_000, observation=20_000, diff=400_000)
BATCH_CAPS = Caps(text=800, observation=500, diff=20_000)
FOLD_CHARS, FOLD_LINES = 400, 8  # an observation longer than this starts folded
CHART_WIDTH, CHART_HEIGHT, CHART_TOP, CHART_LEFT, CHART_BOTTOM = 1000, 170, 12, 84, 24
MAX_BAR_STEP = 40  # a few tasks get slim bars, not a wall

_IN_PATCH = "cut for this report; the patch file has all of it"
_IN_RECORD = "cut for this report; the file it comes from has all of it"


class Redacts(Protocol):
    def redact(self, text: str) -> str: ...


class KnownSecrets:
    """The secrets of this environment (its keys and secret-looking variables, by the
    redactor's own rule), as literals: fast enough for every text of a thousand runs.

    It is what the report adds to text toy-agent already wrote through the whole redactor
    (trajectories, session files, results): that text kept no secret of the environment
    that wrote it, and this removes those of the one reading it. The whole redactor, whose
    rules read code at about half a megabyte a second, goes over what toy-agent did not
    write (a patch, a session's diff)."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        values = {v for name, v in environ.items() if is_secret_variable(name, v)}
        ordered = sorted(values, key=len, reverse=True)  # a secret holding another, whole
        self._regex = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def redact(self, text: str) -> str:
        return self._regex.sub(REDACTED, text) if self._regex and text else text


@dataclass(frozen=True)
class Scrub:
    known: Redacts  # for what toy-agent wrote through its redactor
    full: Redacts  # for the rest


class ReportError(Exception):
    """An input that cannot be reported on (a usage error: one line, exit code 2)."""


# ------------------------------------------------------------------------------ the views
@dataclass(frozen=True)
class Warn:
    """Something worth seeing where it happened: `kind` is a note's (cut, repeat, sandbox,
    refused, declined, hook, check: messages.NoteKind), or parse, safety, max_tokens, error
    (a tool error, a command that did not exit 0) or syntax (an edit introduced a syntax
    error)."""

    kind: str
    text: str
    step: int = 0  # 0: the run as a whole


@dataclass(frozen=True)
class ActionView:
    tool: str
    params: str  # pretty JSON, cut and redacted


@dataclass(frozen=True)
class CommandView:
    """How a command ended, from the observation's `command` record (not its text)."""

    command: str
    exit_code: int | None
    ok: bool
    status: str  # exit 1, timed out, killed by signal 9
    tail: str


@dataclass(frozen=True)
class ObservationView:
    tool: str
    content: str
    is_error: bool
    chars: int  # of the text as recorded, before the report cut it
    lines: int
    folded: bool
    summary: str  # its first line, for the folded view
    warnings: tuple[tuple[str, str], ...] = ()  # (kind, text), found in the whole text
    images: tuple[str, ...] = ()  # what each image the tool returned was (a record keeps no data)
    command: CommandView | None = None


@dataclass(frozen=True)
class StepView:
    iteration: int
    thought: str
    actions: tuple[ActionView, ...]
    observations: tuple[ObservationView, ...]
    parse_error: str = ""
    reply: str = ""  # the raw reply, shown when no action came out of it
    llm_seconds: float | None = None
    tool_seconds: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    warnings: tuple[Warn, ...] = ()
    thinking: str = ""  # the model's reasoning as the provider showed it (a summary)


@dataclass(frozen=True)
class FileDiff:
    """One file's part of a run's diff, as the page shows it: its lines already classified,
    so the template only colours them."""

    path: str
    added: int
    removed: int
    lines: tuple[tuple[str, str], ...]  # (kind: add, del, hunk, meta or ctx; the line)


@dataclass(frozen=True)
class CheckView:
    passed: bool
    exit_code: int | None
    tail: str
    command: str = ""
    attempts: int = 1


@dataclass(frozen=True)
class RunView:
    """One run's page: its figures, its steps, its diff and its warnings."""

    anchor: str
    name: str  # the task id in a batch, else "run"
    task: str
    outcome: str
    success: bool
    exit_reason: str
    answer: str = ""
    iterations: int = 0
    max_iterations: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float | None = None
    elapsed: float | None = None
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0
    model: str = ""
    effort: str = ""  # --effort ("" when the model's own)
    started_at: str = ""
    steps: tuple[StepView, ...] = ()
    diffs: tuple[FileDiff, ...] = ()
    diff_note: str = ""
    files_changed: tuple[str, ...] = ()
    check: CheckView | None = None
    verdict: str = ""  # a batch task's: already passing, resolved, not resolved, broke keep
    attempts: int = 0  # a batch task's attempts (0: not recorded)
    attempt: int | None = None  # the attempt its result is from
    notes: tuple[str, ...] = ()
    patch_href: str = ""
    trajectory_href: str = ""
    back: str = ""  # the anchor of the page listing this run

    @property
    def warnings(self) -> list[Warn]:
        return [w for step in self.steps for w in step.warnings]

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    kind: str  # a CSS class: pass, fail, llm, tool, other
    label: str
    href: str


@dataclass(frozen=True)
class Chart:
    title: str
    bars: tuple[Bar, ...]
    ticks: tuple[tuple[float, str], ...]  # (y, label)
    legend: tuple[tuple[str, str], ...] = ()  # (kind, label)
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT + CHART_BOTTOM
    x_label: str = ""  # what the axes measure
    y_label: str = ""
    left: int = CHART_LEFT
    plot_height: int = CHART_HEIGHT


@dataclass(frozen=True)
class Stat:
    name: str
    total: str
    p50: str
    p90: str
    max: str


@dataclass(frozen=True)
class BatchView:
    anchor: str
    label: str  # "A", "B" or ""
    path: str
    runs: tuple[RunView, ...]
    charts: tuple[Chart, ...]
    stats: tuple[Stat, ...]
    split: tuple[tuple[str, float, float, float, float], ...]  # see _time_split
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> int:
        return sum(r.success for r in self.runs)

    @property
    def cost(self) -> float | None:
        costs = [r.cost for r in self.runs if r.cost is not None]
        return sum(costs) if costs else None

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.runs)

    @property
    def outcomes(self) -> list[str]:
        return sorted({r.outcome for r in self.runs})

    @property
    def pass_at_1(self) -> int:
        """Tasks that passed on their first attempt."""
        return sum(r.success and (r.attempt or 1) == 1 for r in self.runs)

    @property
    def most_attempts(self) -> int:
        return max((r.attempts for r in self.runs), default=0)

    @property
    def setup(self) -> str:
        """The model and effort its runs used, so that two batches compare at a glance."""
        used = {r.model + (f", effort {r.effort}" if r.effort else "") for r in self.runs}
        return "; ".join(sorted(u for u in used if u))


@dataclass(frozen=True)
class Pair:
    id: str
    anchor: str
    a: RunView
    b: RunView

    @property
    def flip(self) -> str:
        """ "lost" (passed in A, failed in B), "gained" (the other way) or ""."""
        if self.a.success == self.b.success:
            return ""
        return "lost" if self.a.success else "gained"

    @property
    def cost_delta(self) -> float | None:
        if self.a.cost is None or self.b.cost is None:
            return None
        return self.b.cost - self.a.cost

    @property
    def iteration_delta(self) -> int:
        return self.b.iterations - self.a.iterations


@dataclass(frozen=True)
class Comparison:
    a: BatchView
    b: BatchView
    pairs: tuple[Pair, ...]
    only_a: tuple[RunView, ...]
    only_b: tuple[RunView, ...]

    def flipped(self, way: str) -> list[Pair]:
        return [p for p in self.pairs if p.flip == way]

    def passed(self, side: str) -> int:
        return sum(getattr(p, side).success for p in self.pairs)

    def pass_at_1(self, side: str) -> int:
        return sum(getattr(p, side).success and (getattr(p, side).attempt or 1) == 1
                   for p in self.pairs)  # fmt: skip

    def cost(self, side: str) -> float | None:
        costs = [getattr(p, side).cost for p in self.pairs]
        known = [c for c in costs if c is not None]
        return sum(known) if known else None


@dataclass(frozen=True)
class SessionView:
    id: str
    repo: str
    created_at: str
    updated_at: str
    runs: tuple[RunView, ...]
    diffs: tuple[FileDiff, ...]
    diff_note: str
    input_tokens: int
    output_tokens: int
    cost: float | None
    compactions: tuple[str, ...] = ()  # one line per /compact
    summary: str = ""  # the latest /compact's summary, which replaced the older steps


@dataclass(frozen=True)
class Report:
    kind: str  # run, session, batch or compare
    title: str
    run: RunView | None = None
    session: SessionView | None = None
    batch: BatchView | None = None
    comparison: Comparison | None = None
    generated: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S %Z"))


# ---------------------------------------------------------------------------- the command
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ReportError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="toy-agent report",
        description="Write one self-contained HTML page (no network; readable with scripts "
        "off) for a trajectory file, a saved session file or a batch --out folder; for two "
        "batch folders, the two side by side.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a trajectory, a session file or id, or a batch --out folder; or two "
                        "batch folders (A B) to compare")  # fmt: skip
    parser.add_argument("-o", "--output", default="report.html", metavar="FILE",
                        help="the HTML file to write (default: report.html)")  # fmt: skip
    return parser


def main(argv: Sequence[str]) -> int:
    """`toy-agent report ...`: 0 when the page was written, 2 for a bad input (one line on
    stderr), 130 when interrupted."""
    try:
        args = build_parser().parse_args(list(argv))
        if len(args.paths) > 2:
            raise ReportError("give one PATH, or two batch folders to compare")
        out = write_report([_input(path) for path in args.paths], args.output)
    except ReportError as exc:
        print(f"toy-agent: error: {visible(str(exc))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if exc.name != "jinja2":
            raise
        print("toy-agent: error: the report needs the jinja2 package: pip install jinja2 (or "
              "reinstall toy-agent)", file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print("toy-agent: interrupted", file=sys.stderr)
        return 130
    print(out)
    return 0


def _input(path: str) -> str:
    """A path as given, or a saved session's id (as --resume and `sessions show` take it)."""
    from toy_agent.sessions import SessionStore, is_session_id

    if Path(path).exists() or not is_session_id(path):
        return path
    saved = SessionStore().root / f"{path}.json"
    return str(saved) if saved.is_file() else path


def write_report(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Write the report of `paths` (one, or two batch folders to compare) to `out`, and
    return its path. Raises ReportError for an input it cannot read or a file it cannot
    write."""
    out = Path(out)
    html = render(load_report([Path(p) for p in paths], out))
    try:
        atomic_write(out, html)
    except OSError as exc:
        raise ReportError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


# ------------------------------------------------------------------------------- loading
def load_report(paths: Sequence[Path], out: Path) -> Report:
    """What `paths` hold, as the views the template shows. Raises ReportError."""
    scrub = Scrub(KnownSecrets(), Redactor())
    links = _Links(out.parent)
    if len(paths) == 2:
        for path in paths:
            if not path.is_dir():
                raise ReportError(f"{path}: comparing needs two batch --out folders")
        a = load_batch(paths[0], scrub, links, "A")
        b = load_batch(paths[1], scrub, links, "B")
        names = f"{paths[0].resolve().name} vs {paths[1].resolve().name}"
        return Report("compare", names,
                      comparison=compare(a, b))  # fmt: skip
    path = paths[0]
    if path.is_dir():
        batch = load_batch(path, scrub, links, "")
        return Report("batch", f"batch {path.resolve().name}", batch=batch)
    data = _read_json(path)
    if isinstance(data, dict) and data.get("format") == TRAJECTORY_FORMAT:
        run = run_view(_checked(trajectory_from_dict, data, str(path)), "run", "run",
                       scrub.known, RUN_CAPS)  # fmt: skip
        return Report("run", f"run: {_first_line(run.task, 80)}", run=run)
    if isinstance(data, dict) and data.get("format") == SESSION_FORMAT:
        session = session_view(_checked(session_from_dict, data, str(path)), path, scrub)
        return Report("session", f"session {session.id}", session=session)
    raise ReportError(f"{path} is not a toy_agent trajectory, session or batch --out folder")


def _checked(read: Any, data: Any, source: str) -> Any:
    """`read(data, source)`, the record's one check: its error is the report's."""
    try:
        return read(data, source)
    except RecordError as exc:
        raise ReportError(str(exc)) from None


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file or folder") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ReportError(f"cannot read {path}: {reason}") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ReportError(f"{path} is not valid JSON ({_first_line(str(exc), 120)})") from None


class _Links:
    """Relative links from the page to files beside the inputs (patches, trajectories), which
    open when the page stays where it was written. Only names this code built: never a link
    a file asked for, so no `javascript:` URL can come from the data."""

    def __init__(self, folder: Path):
        self.folder = folder.resolve()

    def to(self, target: Path) -> str:
        if not _plain_file(target):
            return ""
        relative = os.path.relpath(target.resolve(), self.folder)
        return "./" + quote(relative.replace(os.sep, "/"), safe="/._-")


def load_batch(folder: Path, scrub: Scrub, links: _Links, label: str) -> BatchView:
    """A batch's results.jsonl, each task with its trajectory and patch when they exist."""
    if not folder.is_dir():
        raise ReportError(f"{folder}: no such folder")
    results = folder / RESULTS_FILE
    if not results.is_file():
        raise ReportError(f"{folder} is not a batch --out folder (it has no {RESULTS_FILE})")
    try:
        records = task_results(results)
    except RecordError as exc:
        raise ReportError(str(exc)) from None
    if not records:
        raise ReportError(f"{results} has no task results yet")
    prefix = f"{label.lower()}-" if label else ""
    notes: list[str] = []
    runs = []
    ordered = sorted(records, key=lambda r: _natural(r.id))
    for index, record in enumerate(ordered, 1):
        run = _batch_run(folder, record, f"{prefix}run-{index}", scrub, links, notes)
        runs.append(_with(run, back=f"{prefix}batch"))
    return BatchView(
        f"{prefix}batch", label, visible(str(folder)), tuple(runs), _charts(runs, prefix),
        _stats(runs), _time_split(runs), tuple(notes),
    )  # fmt: skip


def _batch_run(
    folder: Path,
    record: TaskResult,
    anchor: str,
    scrub: Scrub,
    links: _Links,
    notes: list[str],
) -> RunView:
    redactor = scrub.known
    task_id = record.id
    safe_id = TASK_ID.fullmatch(task_id) is not None
    trajectory_file = folder / "trajectories" / f"{task_id}.json"
    patch_file = folder / "patches" / f"{task_id}.diff"
    trajectory: Trajectory | None = None
    run_notes: list[str] = []
    if safe_id and _plain_file(trajectory_file):
        try:
            data = _read_json(trajectory_file)
            if not isinstance(data, dict) or data.get("format") != TRAJECTORY_FORMAT:
                raise ReportError(f"{trajectory_file} is not a toy_agent trajectory")
            trajectory = _checked(trajectory_from_dict, data, str(trajectory_file))
        except ReportError as exc:
            run_notes.append(str(exc))
            notes.append(str(exc))
    name = _clean(redactor, task_id, 200)
    if trajectory is not None:
        run = run_view(trajectory, anchor, name, redactor, BATCH_CAPS)
    else:
        run = RunView(anchor, name, "", "", False, "")
        run_notes.append("no trajectory was recorded for this task")
    patch = ""
    if safe_id and _plain_file(patch_file):
        try:
            with patch_file.open("rb") as f:
                raw = f.read(BATCH_CAPS.diff + 1)
            patch = raw.decode("utf-8", "replace")
        except OSError as exc:
            run_notes.append(f"cannot read {patch_file}: {exc.strerror or exc}")
    check = record.check
    if check is not None and check.sandbox_note:
        run_notes.append(_clean(redactor, f"the check: {check.sandbox_note}", 2_000))
    usage = record.usage
    diffs, diff_note = _diff_views(scrub.full, _split_patch(patch), BATCH_CAPS)
    if not patch:
        diff_note = "no changes" if not record.files_changed else "no patch file"
    return _with(
        run,
        outcome=_clean(redactor, record.outcome or run.outcome or "unknown", 100),
        success=record.success,
        exit_reason=_clean(redactor, record.error, 2_000) or run.exit_reason,
        iterations=record.iterations if record.iterations is not None else run.iterations,
        input_tokens=usage.input_tokens if usage else run.input_tokens,
        output_tokens=usage.output_tokens if usage else run.output_tokens,
        cached_tokens=usage.cached_tokens if usage else run.cached_tokens,
        cost=record.cost_usd,
        elapsed=record.elapsed_seconds,
        files_changed=_paths(record.files_changed, redactor),
        check=_check(check, redactor) if check is not None else None,
        verdict=record.verdict,
        attempts=record.attempts,
        attempt=record.attempt,
        diffs=diffs,
        diff_note=diff_note,
        patch_href=links.to(patch_file) if safe_id else "",
        trajectory_href=links.to(trajectory_file) if safe_id else "",
        notes=(*run.notes, *run_notes),
    )


def _check(check: CheckRecord, redactor: Redacts) -> CheckView:
    return CheckView(check.passed, check.exit_code, _clean(redactor, check.output_tail, 4_000),
                     _clean(redactor, check.command, 500), check.attempts)  # fmt: skip


def run_view(
    trajectory: Trajectory,
    anchor: str,
    name: str,
    redactor: Redacts,
    caps: Caps,
) -> RunView:
    """A trajectory's run."""
    result = trajectory.result or Outcome()
    steps = tuple(_step(s, redactor, caps) for s in trajectory.steps)
    usage = result.usage
    if usage is None:  # a run cut short: add up its steps
        usage = Usage(sum(s.input_tokens or 0 for s in steps),
                      sum(s.output_tokens or 0 for s in steps))  # fmt: skip
    outcome = result.outcome or ("unfinished" if trajectory.result is None else "unknown")
    exit_reason = result.error or ("task_complete" if outcome == "completed" else "")
    if trajectory.result is None:
        exit_reason = "the trajectory has no result: the run was stopped before it finished"
    if trajectory.diffs is not None:
        pairs = list(trajectory.diffs.items())
        diffs, diff_note = _diff_views(redactor, pairs, caps)
        if not pairs:
            diff_note = "no changes"
    else:
        diffs, diff_note = (), "this trajectory does not record the diff (an older toy-agent)"
    model = f"{trajectory.setting('provider')} {trajectory.setting('model')}".strip()
    return RunView(
        anchor=anchor,
        name=name,
        task=_clean(redactor, trajectory.task, caps.text),
        outcome=_clean(redactor, outcome, 100),
        success=result.success,
        exit_reason=_clean(redactor, exit_reason, 2_000),
        answer=_clean(redactor, result.answer, caps.text),
        iterations=result.iterations if result.iterations is not None else len(steps),
        max_iterations=trajectory.max_iterations,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        cost=result.cost_usd,
        elapsed=result.elapsed_seconds,
        llm_seconds=sum(s.llm_seconds or 0.0 for s in steps),
        tool_seconds=sum(s.tool_seconds or 0.0 for s in steps),
        model=_clean(redactor, model, 200),
        effort=_clean(redactor, trajectory.setting("effort"), 20),
        started_at=_clean(redactor, trajectory.started_at, 100),
        steps=steps,
        diffs=diffs,
        diff_note=diff_note,
        files_changed=_paths(result.files_changed, redactor),
        check=_check(result.check, redactor) if result.check is not None else None,
    )


def _step(step: StepRecord, redactor: Redacts, caps: Caps) -> StepView:
    response = step.response
    actions = tuple(
        ActionView(_clean(redactor, a.tool_name, 200),
                   _clean(redactor, _params_text(a.parameters), caps.text))
        for a in step.actions
    )  # fmt: skip
    observations = [_observation(o, redactor, caps) for o in step.observations]
    parse_error = _clean(redactor, step.parse_error, caps.text)
    warnings: list[Warn] = []
    if parse_error:
        stop = response.stop_reason
        kind = stop if stop in ("safety", "max_tokens") else "parse"
        warnings.append(Warn(kind, _first_line(parse_error, 300), step.iteration))
    for obs in observations:
        warnings += _observation_warnings(obs, step.iteration)
    reply = _clean(redactor, response.text, caps.text) if parse_error or not actions else ""
    return StepView(
        step.iteration,
        _clean(redactor, step.thought, caps.text),
        actions,
        tuple(observations),
        parse_error,
        reply,
        step.llm_seconds,
        step.tool_seconds,
        response.usage.input_tokens,
        response.usage.output_tokens,
        tuple(warnings),
        _clean(redactor, response.thinking, caps.text),
    )


def _params_text(params: Any) -> str:
    """An action's parameters as a person reads them: `name: value` per line, a string with
    newlines (a file's content) as its own block below its name, anything else as JSON."""
    if not isinstance(params, dict):
        return json.dumps(params, ensure_ascii=False, default=str) if params else ""
    lines = []
    for name, value in params.items():
        if isinstance(value, str) and "\n" in value:
            lines.append(f"{name}:\n{value.rstrip(chr(10))}")
        else:
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                      default=str)  # fmt: skip
            lines.append(f"{name}: {shown}")
    return "\n".join(lines)


def _observation(
    record: ObservationRecord, redactor: Redacts, caps: Caps, content: str | None = None
) -> ObservationView:
    """An observation as the page shows it: its text (`content`, when the record keeps it
    elsewhere: a session's messages), and what the agent's rules did to it, from its notes
    and its command's result (a record from before notes shows its text plain)."""
    raw = record.content if content is None else content
    shown = _clean(redactor, raw, caps.observation)
    tool = _clean(redactor, record.tool_name, 200)
    lines = raw.count("\n") + 1
    folded = len(raw) > FOLD_CHARS or lines > FOLD_LINES
    images = tuple(_clean(redactor, f"{i.mime_type or 'image'}, {count(i.size)} bytes", 200)
                   for i in record.images[:100])  # fmt: skip
    found: list[tuple[str, str]] = [
        (note.kind, _clean(redactor, _note_text(note.kind, note.text, tool), 500))
        for note in record.notes
    ]
    command = _command(record.command, redactor) if record.command is not None else None
    said = {kind for kind, _ in found}
    if record.command is not None and record.command.sandbox_note and "sandbox" not in said:
        text = _note_text("sandbox", record.command.sandbox_note, tool)  # before notes were
        found.append(("sandbox", _clean(redactor, text, 500)))
    if record.is_error and not said & {"refused", "declined", "check"}:
        found.append(("error", f"{tool}: {_first_line(shown, 240)}"))
    edit = record.edit_check
    if edit is not None and edit.syntax_errors:  # what an edit broke
        verb = "would have introduced (refused)" if edit.refused else "introduced"
        text = f"{tool} {verb}: {'; '.join(edit.syntax_errors[:20])}"
        found.append(("syntax", _clean(redactor, text, 500)))
    if command is not None and not command.ok:  # open: the failure is what to see
        folded = False
    return ObservationView(tool, shown, record.is_error, len(raw), lines, folded,
                           _first_line(shown, 160), tuple(found), images, command)  # fmt: skip


def _note_text(kind: str, text: str, tool: str) -> str:
    """A note as a warning line."""
    if kind == "repeat":
        return f"repeat guard: {text}"
    if kind == "sandbox":
        return f"the sandbox refused something the command did: {_first_line(text, 300)}"
    if kind == "check":
        return f"the check: {text}"
    if kind == "hook":
        return f"{tool}: a hook's note: {_first_line(text, 300)}"
    return f"{tool}: {_first_line(text, 300)}"


def _command(result: CommandResult, redactor: Redacts) -> CommandView:
    """A recorded CommandResult as the page shows it."""
    code, timed_out = result.exit_code, result.timed_out
    if timed_out:
        status = "timed out"
    elif code is not None and code < 0:
        status = f"killed by signal {-code}"
    else:
        status = f"exit {code if code is not None else '?'}"
    return CommandView(_clean(redactor, result.command, 500), code, result.ok, status,
                       _clean(redactor, result.output_tail, 4_000))  # fmt: skip


def _observation_warnings(obs: ObservationView, iteration: int) -> list[Warn]:
    return [Warn(kind, text, iteration) for kind, text in obs.warnings]


def session_view(record: SessionRecord, path: Path, scrub: Scrub) -> SessionView:
    """A saved session: its runs, each with the part of the conversation it added. A session
    keeps no timings nor per-step tokens; the diff is the session's own (`--diff`), and only
    for a session of this user's store (a file from elsewhere names any folder)."""
    from toy_agent.sessions import SUMMARY_HEADER, Session, SessionError, SessionStore, session_diff

    redactor = scrub.known
    try:
        fmt = get_format(str(record.settings.get("tool_format") or "xml"))
    except ValueError as exc:
        raise ReportError(f"session {path}: settings.tool_format: {exc}") from None
    chunks, summary = record.run_messages(SUMMARY_HEADER)
    views = [_session_run(run, index, chunks[index], fmt, redactor)
             for index, run in enumerate(record.runs)]  # fmt: skip
    store = SessionStore()
    diffs: tuple[FileDiff, ...] = ()
    if store.is_elsewhere(str(path)):
        note = "the diff is shown only for a session of your own store (this file names its " \
               "repository itself)"  # fmt: skip
    else:
        try:
            text = session_diff(store, Session(path.stem, record.repo))
            diffs, note = _diff_views(scrub.full, _split_patch(text), RUN_CAPS)
            note = note or ("" if diffs else "no file changed since the session's first edit")
        except (SessionError, OSError, ValueError) as exc:
            note = f"the diff cannot be computed: {exc}"
    usage = record.usage or Usage()
    return SessionView(
        _clean(redactor, record.id or path.stem, 200),
        _clean(redactor, record.repo, 1_000),
        _clean(redactor, record.created_at, 100),
        _clean(redactor, record.updated_at, 100),
        tuple(views), diffs, _clean(redactor, note, 2_000),
        usage.input_tokens, usage.output_tokens, record.cost_usd,
        tuple(_clean(redactor, _compaction_line(c), 500) for c in record.compactions),
        _clean(redactor, summary, RUN_CAPS.text),
    )  # fmt: skip


def _session_run(
    run: SessionRun, index: int, chunk: list[Message] | None, fmt: ActionFormat, redactor: Redacts
) -> RunView:
    """One run of a session: its steps are the assistant messages of its part of the
    conversation, each with the message that answered it and the step the run recorded (in
    order; from the last one for the steps a /compact kept of a run it summarised)."""
    messages = chunk or []
    replies = [(m, messages[at + 1] if at + 1 < len(messages) else None)
               for at, m in enumerate(messages) if m.role == "assistant"]  # fmt: skip
    recorded: list[SessionStep | None] = list(run.steps[: len(replies)])
    recorded += [None] * (len(replies) - len(recorded))
    if chunk is not None and run.start is None and replies:  # its last steps, kept by /compact
        kept = list(run.steps[-len(replies) :])
        recorded = [None] * (len(replies) - len(kept)) + kept
    steps = [_session_step(message, reply, number, fmt, redactor, step)
             for number, ((message, reply), step) in enumerate(zip(replies, recorded,
                                                                   strict=True), 1)]  # fmt: skip
    usage = run.usage or Usage()
    notes = ["undone: its file changes were reverted"] if run.undone else []
    if run.rewound:
        notes.append("rewound: /rewind went back to a step before it")
    elif chunk is None:
        notes.append("its steps were replaced by the summary of a /compact (above)")
    elif run.has_start and run.start is None:
        notes.append("its first steps were replaced by the summary of a /compact (above)")
    return RunView(
        anchor=f"run-{index + 1}", name=f"run {index + 1}",
        task=_clean(redactor, run.task, RUN_CAPS.text),
        outcome=_clean(redactor, run.outcome or "unknown", 100),
        success=run.outcome == "completed",
        exit_reason=_clean(redactor, run.error, 2_000)
        or ("task_complete" if run.outcome == "completed" else ""),
        iterations=run.iterations if run.iterations is not None else len(steps),
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cost=run.cost_usd,
        started_at=_clean(redactor, run.started_at, 100),
        steps=tuple(steps), diff_note="see the session's diff below",
        files_changed=_paths(run.files_changed, redactor),
        notes=tuple(notes),
    )  # fmt: skip


def _compaction_line(compaction: Compaction) -> str:
    """One /compact, for the session page."""
    when = compaction.compacted_at.replace("T", " ")[:19]
    if not compaction.applied:
        return f"{when}: /compact wrote a summary no shorter than the steps; nothing changed"
    c = compaction
    return (f"{when}: /compact replaced {c.messages_before} messages by a summary, "
            f"{c.messages_after} left (about {c.tokens_before:,} → "
            f"{c.tokens_after:,} tokens)")  # fmt: skip


def _session_step(
    message: Message,
    reply: Message | None,
    number: int,
    fmt: ActionFormat,
    redactor: Redacts,
    step: SessionStep | None,
) -> StepView:
    """One assistant message of a session and the observation that answered it, with what
    the step's record says of each observation (its error, command, notes)."""
    caps = RUN_CAPS
    try:
        parsed = fmt.parse(LlmResponse(message.content, tool_calls=message.tool_calls))
        thought, actions, parse_error = parsed.thought, parsed.actions, ""
    except ParseError as exc:
        thought, actions, parse_error = "", (), str(exc)
    action_views = tuple(
        ActionView(_clean(redactor, a.tool_name, 200),
                   _clean(redactor, _params_text(a.parameters), caps.text))
        for a in actions
    )  # fmt: skip
    observations: list[ObservationView] = []
    if reply is not None and reply.role == "user":
        records = list(step.observations or ()) if step is not None else []
        if not records:  # a session saved before steps kept their observations
            records = [ObservationRecord(r.name, is_error=r.is_error) for r in reply.tool_results]
        texts = fmt.observation_texts(reply, [r.tool_name for r in records])
        if texts is None:  # not an answer of these tools (a parse error's): shown plain
            names = [a.tool_name for a in actions] or ["reply"]
            records = [ObservationRecord(names[0])] if reply.content else records
            texts = [reply.content] if reply.content else [r.content for r in reply.tool_results]
        for record, text in zip(records, texts, strict=False):
            observations.append(_observation(record, redactor, caps, text))
    warnings = [w for o in observations for w in _observation_warnings(o, number)]
    if parse_error:
        warnings.insert(0, Warn("parse", _first_line(parse_error, 300), number))
    return StepView(
        number, _clean(redactor, thought, caps.text), action_views, tuple(observations),
        _clean(redactor, parse_error, caps.text),
        _clean(redactor, message.content, caps.text) if parse_error or not actions else "",
        warnings=tuple(warnings), thinking=_clean(redactor, message.thinking, caps.text),
    )  # fmt: skip


def compare(a: BatchView, b: BatchView) -> Comparison:
    """Tasks matched by id, in A's order."""
    by_id = {run.name: run for run in b.runs}
    pairs: list[Pair] = []
    only_a: list[RunView] = []
    for run in a.runs:
        other = by_id.pop(run.name, None)
        if other is None:
            only_a.append(run)
        else:
            pairs.append(Pair(run.name, f"cmp-{len(pairs) + 1}", run, other))
    return Comparison(a, b, tuple(pairs), tuple(only_a), tuple(by_id.values()))


# --------------------------------------------------------------------------- diffs, text
def _split_patch(text: str) -> list[tuple[str, str]]:
    """A patch as (path, that file's part): at `diff --git` lines (git), else at `--- ` lines
    followed by `+++ ` (difflib)."""
    if not text:
        return []
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    if not starts:
        starts = [i for i, line in enumerate(lines[:-1])
                  if line.startswith("--- ") and lines[i + 1].startswith("+++ ")]  # fmt: skip
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    parts = []
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        chunk = lines[start:end]
        path = next((line[6:].strip() for line in chunk if line.startswith("+++ b/")), "")
        if not path:
            path = next((line[6:].strip() for line in chunk if line.startswith("--- a/")), "")
        if not path and chunk and chunk[0].startswith("diff --git "):
            path = chunk[0].split(" b/", 1)[-1].strip()
        parts.append((path or "(diff)", "".join(chunk)))
    return parts


def _diff_views(
    redactor: Redacts, parts: Iterable[tuple[str, str]], caps: Caps
) -> tuple[tuple[FileDiff, ...], str]:
    """Each file's diff as classed lines, the whole cut at `caps.diff` characters; the note
    says when it was cut."""
    views, budget, left = [], caps.diff, 0
    for path, text in parts:
        if budget <= 0:
            left += len(text)
            continue
        part = cuts.split(text, budget)
        text, left = part.head, left + part.chars
        budget = budget - len(text) if not part.chars else 0
        text = redactor.redact(text)
        lines, added, removed = [], 0, 0
        for line in text.removesuffix("\n").split("\n"):  # git's lines: a form feed is text
            kind = _line_kind(line)
            added += kind == "add"
            removed += kind == "del"
            lines.append((kind, visible(cuts.cut(line, caps.line, _IN_PATCH, sep=" "))))
        views.append(FileDiff(visible(redactor.redact(path))[:500], added, removed, tuple(lines)))
    return tuple(views), cuts.note(cuts.amount(left, "character"), _IN_PATCH) if left else ""


def _line_kind(line: str) -> str:
    if line.startswith(("+++ ", "--- ", "diff --git", "index ", "new file", "deleted file",
                        "old mode", "new mode", "similarity", "rename ", "Binary", "GIT binary",
                        "\\")):  # fmt: skip
        return "meta"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def _clean(redactor: Redacts, text: str, cap: int) -> str:
    """Text for the page: cut (head and tail), secrets redacted, control characters shown as
    escapes (they could hide or reorder text: bidi overrides)."""
    return visible(redactor.redact(cuts.cut(text, cap, _IN_RECORD, keep="both")))


def _plain_file(path: Path) -> bool:
    """A batch folder may come from anyone: its patch or trajectory must not be a link to
    some file of yours for the page to show."""
    return path.is_file() and not path.is_symlink()


def _natural(text: str) -> list[Any]:
    """A sort key that puts t2 before t10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _paths(files: Sequence[str], redactor: Redacts) -> tuple[str, ...]:
    """The paths of a run's changed files, as the page shows them."""
    return tuple(_clean(redactor, path, 500) for path in files[:1_000])


def _first_line(text: str, cap: int) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= cap else line[: cap - 1] + "…"


def _with(run: RunView, **changes: Any) -> RunView:
    from dataclasses import replace

    return replace(run, **changes)


# ------------------------------------------------------------------------ figures, charts
def _percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _stats(runs: Sequence[RunView]) -> tuple[Stat, ...]:
    rows = []
    columns: list[tuple[str, list[float], Any]] = [
        ("cost", [r.cost for r in runs if r.cost is not None], usd),
        ("time", [r.elapsed for r in runs if r.elapsed is not None], seconds),
        ("iterations", [float(r.iterations) for r in runs], lambda v: f"{v:g}"),
        ("tokens", [float(r.tokens) for r in runs], lambda v: count(int(v))),
    ]
    for name, values, show in columns:
        if not values:
            rows.append(Stat(name, "—", "—", "—", "—"))
            continue
        rows.append(Stat(name, show(sum(values)), show(_percentile(values, 50)),
                         show(_percentile(values, 90)), show(max(values))))  # fmt: skip
    return tuple(rows)


def _time_split(runs: Sequence[RunView]) -> tuple[tuple[str, float, float, float, float], ...]:
    """Where the batch's time went: (kind, seconds, percent, x, width) for a 1000-wide bar."""
    llm = sum(r.llm_seconds for r in runs)
    tools = sum(r.tool_seconds for r in runs)
    total = max(sum(r.elapsed or 0.0 for r in runs), llm + tools)
    if total <= 0:
        return ()
    parts, x = [], 0.0
    for kind, value in (("llm", llm), ("tool", tools), ("other", total - llm - tools)):
        width = 1000 * value / total
        parts.append((kind, value, 100 * value / total, round(x, 2), round(width, 2)))
        x += width
    return tuple(parts)


def _charts(runs: Sequence[RunView], prefix: str) -> tuple[Chart, ...]:
    """Cost per task (green passed, red failed) and time per task split into the LLM's, the
    tools' and the rest (copying the repository, the check)."""
    cost = _bar_chart(
        "cost per task", runs, [[("pass" if r.success else "fail", r.cost or 0.0)] for r in runs],
        usd, (("pass", "passed"), ("fail", "failed")), "US dollars",
    )  # fmt: skip
    segments = []
    for r in runs:
        other = max(0.0, (r.elapsed or 0.0) - r.llm_seconds - r.tool_seconds)
        segments.append([("llm", r.llm_seconds), ("tool", r.tool_seconds), ("other", other)])
    legend = (("llm", "LLM"), ("tool", "tools"), ("other", "other (copy, check)"))
    time_chart = _bar_chart("time per task", runs, segments, seconds, legend, "seconds")
    return tuple(c for c in (cost, time_chart) if c is not None)


def _bar_chart(
    title: str,
    runs: Sequence[RunView],
    segments: Sequence[Sequence[tuple[str, float]]],
    show: Any,
    legend: tuple[tuple[str, str], ...],
    unit: str,
) -> Chart | None:
    top = max((sum(v for _, v in s) for s in segments), default=0.0)
    if top <= 0:
        return None
    plot = CHART_WIDTH - CHART_LEFT
    step = min(plot / len(runs), MAX_BAR_STEP)
    gap = step * 0.15 if step >= 4 else 0.0
    bars = []
    for i, (run, parts) in enumerate(zip(runs, segments, strict=True)):
        y = float(CHART_HEIGHT)
        total = sum(v for _, v in parts)
        for kind, value in parts:
            if value <= 0:
                continue
            h = value / top * (CHART_HEIGHT - CHART_TOP)
            y -= h
            label = f"{run.name}: {show(total)}" + (f" ({kind} {show(value)})" if len(parts) > 1
                                                    else "")  # fmt: skip
            bars.append(Bar(round(CHART_LEFT + i * step, 2), round(y, 2),
                            round(max(step - gap, 0.5), 2), round(h, 2), kind, label,
                            f"#{run.anchor}"))  # fmt: skip
    ticks = tuple((round(CHART_HEIGHT - f * (CHART_HEIGHT - CHART_TOP), 2), show(top * f))
                  for f in (0.0, 0.5, 1.0))  # fmt: skip
    x_label = f"tasks, in the tasks file's order ({len(runs)}; a bar links to its task)"
    return Chart(title, tuple(bars), ticks, legend, x_label=x_label, y_label=unit)


# -------------------------------------------------------------------------------- formats
def when(value: str) -> str:
    """A saved time (2026-11-26T02:43:04+0000) as people read it: 2026-11-26 02:43:04 +0000."""
    found = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)([+-]\d{4}|Z)?", value)
    return " ".join(part for part in found.groups() if part) if found else value


def usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:.4f}" if abs(value) < 0.1 else f"${value:,.2f}"


def signed_usd(value: float | None) -> str:
    if value is None:
        return "—"
    return ("+" if value > 0 else "−" if value < 0 else "±") + usd(abs(value))


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f}s" if value >= 0.1 or value == 0 else f"{value * 1000:.0f}ms"
    minutes, secs = divmod(int(value), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def count(value: int | None) -> str:
    if value is None:
        return "—"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    return f"{value / 1000:.1f}k" if value >= 1000 else str(value)


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "—"


# ---------------------------------------------------------------------------------- render
def render(report: Report) -> str:
    """The page. The style and script are the package's own files, allowed by their sha256 in
    the page's Content-Security-Policy; everything else is escaped by jinja2."""
    template, css, script, policy = _page_parts()
    return template.render(report=report, css=css, script=script, policy=policy,
                           version=__version__)  # fmt: skip


@functools.cache
def _page_parts() -> tuple[Any, Any, Any, str]:
    """The compiled template, the style, the script and the policy that allows them: the same
    for every page, so built once a process: compiling the template takes 0.1-0.3 s, which a
    program writing many reports (a script over batch folders, the tests) paid for each."""
    import jinja2
    from markupsafe import Markup  # jinja2's own dependency: our files, not data

    templates = files("toy_agent") / "templates"
    css = (templates / "report.css").read_text(encoding="utf-8")
    script = (templates / "report.js").read_text(encoding="utf-8")
    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    env.filters.update(usd=usd, signed_usd=signed_usd, seconds=seconds, count=count, when=when)
    env.globals.update(percent=percent)
    template = env.from_string((templates / "report.html.j2").read_text(encoding="utf-8"))
    policy = (f"default-src 'none'; style-src '{_sha256(css)}'; script-src '{_sha256(script)}'; "
              "base-uri 'none'; form-action 'none'")  # fmt: skip
    return template, Markup(css), Markup(script), policy


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")
