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
from toy_agent.batch import RESULTS_FILE
from toy_agent.events import TRAJECTORY_FORMAT
from toy_agent.files import atomic_write
from toy_agent.messages import LlmResponse, Message, visible
from toy_agent.parsing import ActionFormat, ParseError, get_format
from toy_agent.permissions import DECLINED
from toy_agent.redaction import REDACTED, Redactor, is_secret_variable
from toy_agent.sessions import SESSION_FORMAT
from toy_agent.tasks import TASK_ID


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

# What the agent writes into an observation or a parse error, by the rule that wrote it.
_REPEAT = re.compile(r"Warning: you have called (\S+) with the same parameters (\d+) times")
_SANDBOX_NOTE = "[Note: commands run in a bubblewrap sandbox"
_REFUSED = re.compile(
    r"\brefus(?:ed|ing)\b|is outside the repository|leads outside|off limits", re.IGNORECASE
)  # the tools' refusals: a path outside the repository, .git/, a symlink escape
_CUT_BEFORE_25 = re.compile(  # the notes of trajectories recorded before the one cut note
    r"\[\.\.\. (?P<what>[\d,]+ characters) cut here to fit"
    r"|\[\.\.\. (?P<output>[\d,]+ bytes \([\d,]+ lines\)) of output cut"
)
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
    """Something worth seeing where it happened: `kind` is repeat, refused, sandbox, declined,
    parse, safety, max_tokens, error, syntax (an edit introduced a syntax error) or cut."""

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
        run = run_view(data, "run", "run", scrub.known, RUN_CAPS)
        return Report("run", f"run: {_first_line(run.task, 80)}", run=run)
    if isinstance(data, dict) and data.get("format") == SESSION_FORMAT:
        session = session_view(data, path, scrub)
        return Report("session", f"session {session.id}", session=session)
    raise ReportError(f"{path} is not a toy_agent trajectory, session or batch --out folder")


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
        lines = results.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ReportError(f"cannot read {results}: {reason}") from None
    records: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            raise ReportError(f"{results} line {number}: not valid JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise ReportError(f'{results} line {number}: not a task result (no "id")')
        records.pop(record["id"], None)  # the last line of an id wins, as for the batch
        records[record["id"]] = record
    if not records:
        raise ReportError(f"{results} has no task results yet")
    prefix = f"{label.lower()}-" if label else ""
    notes: list[str] = []
    runs = []
    ordered = sorted(records.values(), key=lambda r: _natural(r["id"]))
    for index, record in enumerate(ordered, 1):
        run = _batch_run(folder, record, f"{prefix}run-{index}", scrub, links, notes)
        runs.append(_with(run, back=f"{prefix}batch"))
    return BatchView(
        f"{prefix}batch", label, visible(str(folder)), tuple(runs), _charts(runs, prefix),
        _stats(runs), _time_split(runs), tuple(notes),
    )  # fmt: skip


def _batch_run(
    folder: Path,
    record: dict[str, Any],
    anchor: str,
    scrub: Scrub,
    links: _Links,
    notes: list[str],
) -> RunView:
    redactor = scrub.known
    task_id = record["id"]
    safe_id = TASK_ID.fullmatch(task_id) is not None
    trajectory_file = folder / "trajectories" / f"{task_id}.json"
    patch_file = folder / "patches" / f"{task_id}.diff"
    data: Any = None
    run_notes: list[str] = []
    if safe_id and _plain_file(trajectory_file):
        try:
            data = _read_json(trajectory_file)
            if not isinstance(data, dict) or data.get("format") != TRAJECTORY_FORMAT:
                raise ReportError(f"{trajectory_file} is not a toy_agent trajectory")
        except ReportError as exc:
            data = None
            run_notes.append(str(exc))
            notes.append(str(exc))
    name = _clean(redactor, task_id, 200)
    if data is not None:
        run = run_view(data, anchor, name, redactor, BATCH_CAPS)
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
    check = record.get("check")
    if isinstance(check, dict) and check.get("sandbox_note"):
        run_notes.append(_clean(redactor, f"the check: {check['sandbox_note']}", 2_000))
    usage = _dict(record.get("usage"))
    diffs, diff_note = _diff_views(scrub.full, _split_patch(patch), BATCH_CAPS)
    if not patch:
        diff_note = "no changes" if not record.get("files_changed") else "no patch file"
    return _with(
        run,
        outcome=_clean(redactor, str(record.get("outcome") or run.outcome or "unknown"), 100),
        success=record.get("success") is True,
        exit_reason=_clean(redactor, str(record.get("error") or ""), 2_000) or run.exit_reason,
        iterations=_int(record.get("iterations"), run.iterations),
        input_tokens=_int(usage.get("input_tokens"), run.input_tokens),
        output_tokens=_int(usage.get("output_tokens"), run.output_tokens),
        cached_tokens=_int(usage.get("cached_tokens"), run.cached_tokens),
        cost=_float(record.get("cost_usd")),
        elapsed=_float(record.get("elapsed_seconds")),
        files_changed=_paths(record.get("files_changed"), redactor),
        check=_check(check, redactor) if isinstance(check, dict) else None,
        verdict=_verdict(record),
        attempts=len(_list(record.get("attempts"))),
        attempt=record["attempt"] if type(record.get("attempt")) is int else None,
        diffs=diffs,
        diff_note=diff_note,
        patch_href=links.to(patch_file) if safe_id else "",
        trajectory_href=links.to(trajectory_file) if safe_id else "",
        notes=(*run.notes, *run_notes),
    )


def _verdict(record: dict[str, Any]) -> str:
    """What a batch task's check says about the fix, as results.jsonl records it (empty for a
    record from before baselines were taken)."""
    if record.get("already_passing") is True:
        return "already passing"
    if _list(record.get("keep_broken")):
        return "broke keep"
    if isinstance(record.get("baseline"), dict):
        return "resolved" if record.get("resolved") is True else "not resolved"
    return ""


def _check(check: dict[str, Any], redactor: Redacts) -> CheckView:
    code = check.get("exit_code")
    return CheckView(check.get("passed") is True, code if isinstance(code, int) else None,
                     _clean(redactor, str(check.get("output_tail") or ""), 4_000),
                     _clean(redactor, str(check.get("command") or ""), 500),
                     _int(check.get("attempts"), 1))  # fmt: skip


def run_view(
    data: dict[str, Any],
    anchor: str,
    name: str,
    redactor: Redacts,
    caps: Caps,
) -> RunView:
    """A trajectory's run. Raises ReportError when it is not one."""
    steps_data = data.get("steps")
    if not isinstance(steps_data, list):
        raise ReportError('not a toy_agent trajectory: it has no "steps" list')
    result = _dict(data.get("result"))
    settings = _dict(data.get("settings"))
    steps = tuple(_step(_dict(s), n, redactor, caps) for n, s in enumerate(steps_data, 1))
    usage = _dict(result.get("usage"))
    if not usage:  # a run cut short: add up its steps
        usage = {"input_tokens": sum(s.input_tokens or 0 for s in steps),
                 "output_tokens": sum(s.output_tokens or 0 for s in steps)}  # fmt: skip
    outcome = str(result.get("outcome") or ("unfinished" if not result else "unknown"))
    exit_reason = str(result.get("error") or "")
    if not exit_reason:
        exit_reason = "task_complete" if outcome == "completed" else ""
    if not result:
        exit_reason = "the trajectory has no result: the run was stopped before it finished"
    diffs_data = data.get("diffs")
    if isinstance(diffs_data, dict):
        pairs = [(str(k), str(v)) for k, v in diffs_data.items()]
        diffs, diff_note = _diff_views(redactor, pairs, caps)
        if not pairs:
            diff_note = "no changes"
    else:
        diffs, diff_note = (), "this trajectory does not record the diff (an older toy-agent)"
    max_iterations = settings.get("max_iterations")
    return RunView(
        anchor=anchor,
        name=name,
        task=_clean(redactor, str(data.get("task") or ""), caps.text),
        outcome=_clean(redactor, outcome, 100),
        success=result.get("success") is True,
        exit_reason=_clean(redactor, exit_reason, 2_000),
        answer=_clean(redactor, str(result.get("result") or ""), caps.text),
        iterations=_int(result.get("iterations"), len(steps)),
        max_iterations=max_iterations if isinstance(max_iterations, int) else None,
        input_tokens=_int(usage.get("input_tokens"), 0),
        output_tokens=_int(usage.get("output_tokens"), 0),
        cached_tokens=_int(usage.get("cached_tokens"), 0),
        cost=_float(result.get("cost_usd")),
        elapsed=_float(result.get("elapsed_seconds")),
        llm_seconds=sum(s.llm_seconds or 0.0 for s in steps),
        tool_seconds=sum(s.tool_seconds or 0.0 for s in steps),
        model=_clean(
            redactor, f"{settings.get('provider') or ''} {settings.get('model') or ''}".strip(), 200
        ),  # fmt: skip
        effort=_clean(redactor, str(settings.get("effort") or ""), 20),
        started_at=_clean(redactor, str(data.get("started_at") or ""), 100),
        steps=steps,
        diffs=diffs,
        diff_note=diff_note,
        files_changed=_paths(result.get("files_changed"), redactor),
        check=_check(result["check"], redactor) if isinstance(result.get("check"), dict) else None,
    )


def _step(data: dict[str, Any], number: int, redactor: Redacts, caps: Caps) -> StepView:
    response = _dict(data.get("response"))
    usage = _dict(response.get("usage"))
    iteration = _int(data.get("iteration"), number)
    actions = []
    for action in _list(data.get("actions")):
        action = _dict(action)
        text = _params_text(action.get("parameters"))
        actions.append(ActionView(_clean(redactor, str(action.get("tool_name") or "?"), 200),
                                  _clean(redactor, text, caps.text)))  # fmt: skip
    observations = [_observation(_dict(o), redactor, caps) for o in _list(data.get("observations"))]
    parse_error = _clean(redactor, str(data.get("parse_error") or ""), caps.text)
    warnings: list[Warn] = []
    stop = response.get("stop_reason")
    if parse_error:
        kind = stop if stop in ("safety", "max_tokens") else "parse"
        warnings.append(Warn(kind, _first_line(parse_error, 300), iteration))
    for obs in observations:
        warnings += _observation_warnings(obs, iteration)
    reply = ""
    if parse_error or not actions:
        reply = _clean(redactor, str(response.get("text") or ""), caps.text)
    return StepView(
        iteration,
        _clean(redactor, str(data.get("thought") or ""), caps.text),
        tuple(actions),
        tuple(observations),
        parse_error,
        reply,
        _float(data.get("llm_seconds")),
        _float(data.get("tool_seconds")),
        _int(usage.get("input_tokens"), 0) if usage else None,
        _int(usage.get("output_tokens"), 0) if usage else None,
        tuple(warnings),
        _clean(redactor, str(response.get("thinking") or ""), caps.text),
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


def _observation(data: dict[str, Any], redactor: Redacts, caps: Caps) -> ObservationView:
    raw = str(data.get("content") or "")
    content = _clean(redactor, raw, caps.observation)
    tool = _clean(redactor, str(data.get("tool_name") or "?"), 200)
    is_error = data.get("is_error") is True
    lines = raw.count("\n") + 1
    folded = len(raw) > FOLD_CHARS or lines > FOLD_LINES
    found = _found(raw, content, tool, is_error)
    images = tuple(
        _clean(redactor, f"{_dict(i).get('mime_type') or 'image'}, "
               f"{count(_int(_dict(i).get('bytes'), 0))} bytes", 200)
        for i in _list(data.get("images"))[:100]
    )  # fmt: skip
    edit = _dict(data.get("edit_check"))
    introduced = [str(e) for e in _list(edit.get("syntax_errors"))[:20]]
    if introduced:  # what an edit broke, from the observation's record (not its text)
        verb = "would have introduced (refused)" if edit.get("refused") is True else "introduced"
        found = (*found, ("syntax", _clean(redactor, f"{tool} {verb}: {'; '.join(introduced)}",
                                           500)))  # fmt: skip
    command = _command(data.get("command"), redactor)
    if command is not None and not command.ok:  # open: the failure is what to see
        folded = False
    note = _dict(data.get("command")).get("sandbox_note")
    if note and not any(kind == "sandbox" for kind, _ in found):  # the field, not the text
        found = (*found, ("sandbox", _clean(redactor, f"the sandbox: {note}", 500)))
    return ObservationView(tool, content, is_error, len(raw), lines, folded,
                           _first_line(content, 160), found, images, command)  # fmt: skip


def _command(data: Any, redactor: Redacts) -> CommandView | None:
    """A recorded CommandResult as the page shows it; None for a record without one."""
    if not isinstance(data, dict):
        return None
    code = data.get("exit_code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    timed_out = data.get("timed_out") is True
    if timed_out:
        status = "timed out"
    elif code is not None and code < 0:
        status = f"killed by signal {-code}"
    else:
        status = f"exit {code if code is not None else '?'}"
    return CommandView(_clean(redactor, str(data.get("command") or ""), 500), code,
                       code == 0 and not timed_out, status,
                       _clean(redactor, str(data.get("output_tail") or ""), 4_000))  # fmt: skip


def _found(raw: str, shown: str, tool: str, is_error: bool) -> tuple[tuple[str, str], ...]:
    """What the agent's rules wrote into an observation: the repeat guard's warning, the
    sandbox's note, a refusal, a declined action, a cut to the context budget."""
    found = []
    repeat = _REPEAT.search(raw)
    if repeat:
        found.append(("repeat", f"repeat guard: {repeat[1]} called with the same parameters "
                      f"{repeat[2]} times in a row"))  # fmt: skip
    if _SANDBOX_NOTE in raw:
        found.append(("sandbox", "the sandbox refused something the command did"))
    if raw.startswith(DECLINED):
        found.append(("declined", f"{tool}: declined by the user"))
    elif is_error:
        kind = "refused" if _REFUSED.search(raw) else "error"
        found.append((kind, f"{tool}: {_first_line(shown, 240)}"))
    cut = cuts.NOTE_RE.search(raw) or _CUT_BEFORE_25.search(raw)
    if cut:
        found.append(("cut", f"{tool}: {cut['what'] or cut['output']} of its output cut"))
    return tuple(found)


def _observation_warnings(obs: ObservationView, iteration: int) -> list[Warn]:
    return [Warn(kind, text, iteration) for kind, text in obs.warnings]


def session_view(data: dict[str, Any], path: Path, scrub: Scrub) -> SessionView:
    """A saved session: its runs, each with the part of the conversation it added. A session
    keeps no timings nor per-step tokens; the diff is the session's own (`--diff`), and only
    for a session of this user's store (a file from elsewhere names any folder)."""
    from toy_agent.sessions import (
        SUMMARY_HEADER,
        Session,
        SessionError,
        SessionStore,
        session_diff,
        without_note,
    )

    redactor = scrub.known
    messages, runs = data.get("messages"), data.get("runs")
    if not isinstance(messages, list) or not isinstance(data.get("repo"), str):
        raise ReportError(f'{path} is not a toy_agent session: it needs "repo" and "messages"')
    runs = [_dict(r) for r in runs] if isinstance(runs, list) else []
    settings = _dict(data.get("settings"))
    try:
        fmt = get_format(str(settings.get("tool_format") or "xml"))
        parsed = [Message.from_dict(m) for m in messages]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ReportError(f"{path} is not a toy_agent session: {exc}") from None
    compactions = [_dict(c) for c in _list(data.get("compactions"))]
    chunks, summary = _run_chunks(parsed, runs, compactions, SUMMARY_HEADER, without_note)
    views = []
    for index, run in enumerate(runs):
        chunk = chunks[index]
        steps: list[StepView] = []
        for at, message in enumerate(chunk or ()):
            if message.role == "assistant":
                reply = chunk[at + 1] if chunk and at + 1 < len(chunk) else None
                steps.append(_session_step(message, reply, len(steps) + 1, fmt, redactor))
        usage = _dict(run.get("usage"))
        outcome = str(run.get("outcome") or "unknown")
        views.append(RunView(
            anchor=f"run-{index + 1}", name=f"run {index + 1}",
            task=_clean(redactor, without_note(str(run.get("task") or "")), RUN_CAPS.text),
            outcome=_clean(redactor, outcome, 100), success=outcome == "completed",
            exit_reason=_clean(redactor, str(run.get("error") or ""), 2_000)
            or ("task_complete" if outcome == "completed" else ""),
            iterations=_int(run.get("iterations"), len(steps)),
            input_tokens=_int(usage.get("input_tokens"), 0),
            output_tokens=_int(usage.get("output_tokens"), 0),
            cost=_float(run.get("cost_usd")),
            started_at=_clean(redactor, str(run.get("started_at") or ""), 100),
            steps=tuple(steps), diff_note="see the session's diff below",
            files_changed=_paths(run.get("files_changed"), redactor),
            notes=(("undone: its file changes were reverted",) if run.get("undone") else ())
            + (("its steps were replaced by the summary of a /compact (above)",)
               if chunk is None else ()),
        ))  # fmt: skip
    store = SessionStore()
    diffs: tuple[FileDiff, ...] = ()
    if store.is_elsewhere(str(path)):
        note = "the diff is shown only for a session of your own store (this file names its " \
               "repository itself)"  # fmt: skip
    else:
        try:
            session = Session.from_dict(data, path.stem)
            text = session_diff(store, session)
            diffs, note = _diff_views(scrub.full, _split_patch(text), RUN_CAPS)
            note = note or ("" if diffs else "no file changed since the session's first edit")
        except (SessionError, OSError, ValueError) as exc:
            note = f"the diff cannot be computed: {exc}"
    usage = _dict(data.get("usage"))
    return SessionView(
        _clean(redactor, str(data.get("id") or path.stem), 200),
        _clean(redactor, str(data["repo"]), 1_000),
        _clean(redactor, str(data.get("created_at") or ""), 100),
        _clean(redactor, str(data.get("updated_at") or ""), 100),
        tuple(views), diffs, _clean(redactor, note, 2_000),
        _int(usage.get("input_tokens"), 0), _int(usage.get("output_tokens"), 0),
        _float(data.get("cost_usd")),
        tuple(_clean(redactor, _compaction_line(c), 500) for c in compactions),
        _clean(redactor, summary, RUN_CAPS.text),
    )  # fmt: skip


def _run_chunks(
    parsed: Sequence[Message],
    runs: Sequence[dict[str, Any]],
    compactions: Sequence[dict[str, Any]],
    header: str,
    task_of: Any,
) -> tuple[list[list[Message] | None], str]:
    """The messages each run added after its task (None: a /compact replaced them), and the
    latest /compact's summary. A run begins at the user message that carries its task (after
    a note, maybe); after a /compact the first message is the first task and the summary, and
    the steps kept after it belong to the last run the /compact summarised."""
    summary = ""
    first = parsed[0].content if parsed and parsed[0].role == "user" else ""
    cursor = 0
    if f"\n\n{header}\n" in first:
        summary = first.partition(f"\n\n{header}\n")[2]
        cursor = 1
    starts: list[int | None] = []
    for run in runs:
        task = task_of(str(run.get("task") or ""))
        found = next((i for i in range(cursor, len(parsed)) if task and parsed[i].role == "user"
                      and parsed[i].content.endswith(task)), None)  # fmt: skip
        starts.append(found)
        cursor = found + 1 if found is not None else cursor
    chunks: list[list[Message] | None] = []
    for index, start in enumerate(starts):
        later = [s for s in starts[index + 1 :] if s is not None]
        end = later[0] if later else len(parsed)
        chunks.append(None if start is None else list(parsed[start + 1 : end]))
    if summary:
        summarised = _int(compactions[-1].get("runs"), 0) if compactions else 0
        kept_until = next((s for s in starts if s is not None), len(parsed))
        owner = min(summarised, len(runs)) - 1 if summarised else -1
        if owner < 0:  # an older session: the last run without a start of its own
            owner = max((i for i, s in enumerate(starts) if s is None), default=-1)
        if 0 <= owner < len(chunks) and chunks[owner] is None and kept_until > 1:
            chunks[owner] = list(parsed[1:kept_until])
    return chunks, summary


def _compaction_line(compaction: dict[str, Any]) -> str:
    """One /compact, for the session page."""
    when = str(compaction.get("compacted_at") or "").replace("T", " ")[:19]
    if compaction.get("applied") is False:
        return f"{when}: /compact wrote a summary no shorter than the steps; nothing changed"
    number = {key: _int(compaction.get(key), 0) for key in
              ("messages_before", "messages_after", "tokens_before", "tokens_after")}  # fmt: skip
    return (f"{when}: /compact replaced {number['messages_before']} messages by a summary, "
            f"{number['messages_after']} left (about {number['tokens_before']:,} → "
            f"{number['tokens_after']:,} tokens)")  # fmt: skip


def _session_step(
    message: Message, reply: Message | None, number: int, fmt: ActionFormat, redactor: Redacts
) -> StepView:
    """One assistant message of a session and the observation that answered it."""
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
        if reply.tool_results:
            for result in reply.tool_results:
                data = {"tool_name": result.name, "content": result.content,
                        "is_error": result.is_error}  # fmt: skip
                observations.append(_observation(data, redactor, caps))
        elif reply.content:
            names = [a.tool_name for a in actions] or ["reply"]
            for at, (named, content) in enumerate(_observation_parts(reply.content)):
                tool = named or names[min(at, len(names) - 1)]
                observations.append(_observation({"tool_name": tool, "content": content},
                                                 redactor, caps))  # fmt: skip
    warnings = [w for o in observations for w in _observation_warnings(o, number)]
    if parse_error:
        warnings.insert(0, Warn("parse", _first_line(parse_error, 300), number))
    return StepView(
        number, _clean(redactor, thought, caps.text), action_views, tuple(observations),
        _clean(redactor, parse_error, caps.text),
        _clean(redactor, message.content, caps.text) if parse_error or not actions else "",
        warnings=tuple(warnings), thinking=_clean(redactor, message.thinking, caps.text),
    )  # fmt: skip


_XML_OBSERVATION = re.compile(r'<OBSERVATION(?: tool="([^"]*)")?>\n(.*?)\n</OBSERVATION>', re.S)
_REACT_OBSERVATION = re.compile(r"(?:^|\n\n)Observation(?: \(([^)]*)\))?: ", re.S)


def _observation_parts(text: str) -> list[tuple[str, str]]:
    """The observations a text format's user message carries, without the format's wrapping
    (`<OBSERVATION>` tags, `Observation:` labels): (tool name or "", content) each."""
    found = [(m[1] or "", m[2]) for m in _XML_OBSERVATION.finditer(text)]
    if found:
        return found
    labels = list(_REACT_OBSERVATION.finditer(text))
    if labels and labels[0].start() == 0:
        ends = [m.start() for m in labels[1:]] + [len(text)]
        return [(m[1] or "", text[m.end() : end]) for m, end in zip(labels, ends, strict=True)]
    return [("", text)]


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
        for line in text.splitlines():
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


def _paths(files: Any, redactor: Redacts) -> tuple[str, ...]:
    """The paths of a `files_changed` list ({"path", "added", "removed"} each)."""
    if not isinstance(files, list):
        return ()
    return tuple(_clean(redactor, str(_dict(f).get("path", "")), 500) for f in files[:1_000])


def _first_line(text: str, cap: int) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= cap else line[: cap - 1] + "…"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


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
    return template.render(report=report, css=Markup(css), script=Markup(script),
                           policy=policy, version=__version__)  # fmt: skip


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")
