"""`toy-agent report`: the pages of a run, a session, a batch and two batches side by side,
checked in a real headless browser (Debian's chromium), from inputs the real agent wrote.

A hostile repository's payloads (a `<script>`, an `<img onerror>`, a `javascript:` link, a task
holding `</script>`) travel through the agent into trajectories, patches and results; the
browser must show them as text and run none of them. Each test keeps a screenshot of the page
it looked at under its tmp_path (`*.png`).
"""

from __future__ import annotations

import base64
import fcntl
import html as html_lib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedLlm, xml_action

from toy_agent.agent import ReactAgent
from toy_agent.batch.driver import RunSettings, run_batch
from toy_agent.cli import main
from toy_agent.events import TrajectoryRecorder
from toy_agent.llm import LlmClient
from toy_agent.messages import LlmResponse, Usage
from toy_agent.pricing import meter_for
from toy_agent.redaction import Redactor
from toy_agent.sessions import SessionRecorder, SessionStore, undo_last_run
from toy_agent.tools import CodeRepositoryTools

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
needs_browser = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed: the report's pages are checked in a real headless "
    "browser (CI installs Debian's chromium in .ci/run)",
)

TITLE_PAYLOAD = "<script>document.title='pwned'</script>"
IMG_PAYLOAD = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
LINK_PAYLOAD = "<a href=\"javascript:document.body.setAttribute('data-pwned','2')\">click</a>"
MD_LINK_PAYLOAD = "[docs](javascript:document.body.setAttribute('data-pwned','3'))"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape
PRICES = {"price_input": 3.0, "price_output": 15.0}  # USD per million tokens
USAGE = Usage(1000, 100)  # every reply: $0.0045 at PRICES


def reply(tool: str, thought: str = "", **params: Any) -> LlmResponse:
    return LlmResponse(xml_action(tool, thought, **params), usage=USAGE)


def done(result: str = "done") -> LlmResponse:
    return reply("task_complete", result=result)


class MarkerLlm(LlmClient):
    """Each batch task gets its own script, picked by the marker its task text holds."""

    provider, model = "scripted", "scripted-1"

    def __init__(self, scripts: dict[str, list[LlmResponse]]):
        self.scripts = scripts
        self.script: list[LlmResponse] | None = None

    def call_llm(self, system_prompt, messages, *, tools=None, on_text=None) -> LlmResponse:
        if self.script is None:
            marker = next(m for m in self.scripts if f"[{m}]" in messages[0].content)
            self.script = list(self.scripts[marker])
        return self.script.pop(0)


EVIL_STEPS = [
    reply("read_file", f"Reading {TITLE_PAYLOAD}", path="evil.html"),
    reply("read_file", "Now the markdown.", path="links.md"),
    reply("write_file", f"Writing {IMG_PAYLOAD}", path="payload.html",
          content=f"{TITLE_PAYLOAD}\n{IMG_PAYLOAD}\n{LINK_PAYLOAD}\ntoken = '{TOKEN}'\n"),
    done(f"{IMG_PAYLOAD} {MD_LINK_PAYLOAD}"),
]  # fmt: skip
SCRIPTS_A = {
    "fix": [reply("edit_file", "Fix the typo.", path="hello.py", old_str="helo", new_str="hello"),
            done("fixed")],
    "evil": EVIL_STEPS,
    "loop": [reply("list_files", "Look.")] * 3,  # the repeat guard, then the iteration limit
    "odd": [LlmResponse("I am not sure what to do.", usage=USAGE),  # a parse error
            reply("read_file", "Outside?", path="../outside.txt"),  # refused
            done("gave up")],
}  # fmt: skip
SCRIPTS_B = {
    **SCRIPTS_A,
    "fix": [reply("edit_file", "Shout.", path="hello.py", old_str="helo", new_str="HELO"),
            reply("list_files", "Check."), done("shouted")],  # its check fails: A passed
    "loop": [reply("list_files", "Look."), done("looked")],  # completes: A failed
}  # fmt: skip


def tasks(repo: Path) -> list[dict[str, Any]]:
    return [
        {"id": "fix", "repo": str(repo), "task": "[fix] fix the greeting",
         "check": "grep -q hello hello.py"},
        {"id": "evil", "repo": str(repo), "task": f"[evil] read </script>{TITLE_PAYLOAD}"},
        {"id": "loop", "repo": str(repo), "task": "[loop] look around", "max_iterations": 3},
        {"id": "odd", "repo": str(repo), "task": "[odd] something vague"},
    ]  # fmt: skip


def make_hostile_repo(repo: Path) -> Path:
    repo.mkdir()
    (repo / "hello.py").write_text("print('helo')\n")
    (repo / "evil.html").write_text(f"{TITLE_PAYLOAD}\n{IMG_PAYLOAD}\n")
    (repo / "links.md").write_text(f"{MD_LINK_PAYLOAD}\n{LINK_PAYLOAD}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    return repo


@pytest.fixture
def hostile_repo(tmp_path: Path) -> Path:
    return make_hostile_repo(tmp_path / "repo")


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two batches over a hostile repository, run once for the module: the tests only read
    their folders (the one that plants a link does it in a copy of its own)."""
    root = tmp_path_factory.mktemp("batches")
    repo = make_hostile_repo(root / "repo")
    outs = []
    for name, scripts in (("out-a", SCRIPTS_A), ("out-b", SCRIPTS_B)):
        settings = RunSettings(make_llm=lambda s=scripts: MarkerLlm(s), sandbox="off",
                               check_retries=0, **PRICES)  # fmt: skip
        run_batch(tasks(repo), root / name, settings, workers=2)
        outs.append(root / name)
    return outs[0], outs[1]


def report(*args: str) -> int:
    return main(["report", *args])


# ------------------------------------------------------------------------------ the browser
@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    within: tuple[str, ...] = ()  # the ids of its ancestors


@dataclass
class Page:
    """The DOM chromium dumped after the page's script ran, and what its console said."""

    html: str
    console: list[str]
    elements: list[Element] = field(default_factory=list)

    def __post_init__(self) -> None:
        parser = _Collector()
        parser.feed(self.html)
        self.elements = parser.elements

    def find(self, tag: str, **attrs: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag
                and all(e.attrs.get(k.rstrip("_")) == v for k, v in attrs.items())]  # fmt: skip

    def by_id(self, anchor: str) -> Element:
        (found,) = [e for e in self.elements if e.attrs.get("id") == anchor]
        return found

    @property
    def title(self) -> str:
        return self.find("title")[0].text

    @property
    def root(self) -> Element:
        return self.find("html")[0]


class _Collector(HTMLParser):
    VOID = {"meta", "link", "br", "hr", "img", "input", "area", "base", "col", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("td", "th", "li", "p", "div", "dd", "dt"):  # words of cells stay apart
            self.handle_data(" ")
        within = tuple(e.attrs["id"] for e in self.open if "id" in e.attrs)
        element = Element(tag, {k: v or "" for k, v in attrs}, within=within)
        self.elements.append(element)
        if tag not in self.VOID:
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for at in range(len(self.open) - 1, -1, -1):
            if self.open[at].tag == tag:
                del self.open[at:]
                break

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.text += data


def browse(
    browser: Devtools, page: Path, tmp_path: Path, anchor: str = "", *, shot: str = ""
) -> Page:
    """Open the page in the module's headless chromium, afresh, as a user would (file://,
    offline), and return its DOM after load and what its console said; `shot` keeps a
    screenshot under tmp_path."""
    html, console = browser.load(page, anchor)
    if shot:
        (tmp_path / shot).write_bytes(browser.screenshot())
        assert (tmp_path / shot).stat().st_size > 10_000
    return Page(html, console)


def browse_without_scripts(page: Path, tmp_path: Path, anchor: str = "", *, shot: str) -> Page:
    """`browse` in a chromium of its own whose profile blocks JavaScript (as a user's setting
    does: the page is parsed as without scripts, noscript and all); chromium's own dump and
    screenshot still work there."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path))
    (profile / "Default").mkdir()
    blocked = {"profile": {"default_content_setting_values": {"javascript": 2}}}
    (profile / "Default" / "Preferences").write_text(json.dumps(blocked))
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            "--dump-dom", f"--screenshot={tmp_path / shot}", "--window-size=1280,2000"]  # fmt: skip
    url = page.resolve().as_uri() + (f"#{anchor}" if anchor else "")
    done = subprocess.run([*argv, url], capture_output=True, text=True, timeout=120)  # type: ignore[list-item]
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert (tmp_path / shot).stat().st_size > 10_000
    return Page(done.stdout, console)


def assert_loaded_cleanly(page: Page) -> None:
    """The script ran to its end, nothing was logged (a script error, a blocked inline
    script or style: the CSP would say so on the console), and no payload ran."""
    assert page.root.attrs.get("data-ready") == "1", page.html[:500]
    assert page.console == []
    assert_no_payload_ran(page)


def assert_no_payload_ran(page: Page) -> None:
    assert page.title.startswith("toy-agent report: ")
    assert "pwned" not in page.title
    body = page.find("body")[0]
    assert "data-pwned" not in body.attrs
    assert len(page.find("script")) == 1  # ours, and only ours
    assert page.find("img") == []
    for element in page.elements:
        assert not [name for name in element.attrs if name.startswith("on")], element
        href = element.attrs.get("href", "")
        assert not href.lower().lstrip().startswith("javascript:"), element
        assert "style" not in element.attrs, element  # the CSP allows no inline style


class Devtools:
    """Chromium driven through its DevTools protocol on a pipe (`--remote-debugging-pipe`:
    JSON messages ending in NUL on file descriptors 3 and 4), to click and read the page as
    a user's browser has it."""

    def __init__(self, tmp_path: Path):
        profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
        ours_r, theirs_w = os.pipe()
        theirs_r, ours_w = os.pipe()

        def on_3_and_4() -> None:  # in the child: high copies first, so none is clobbered
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (theirs_r, theirs_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=on_3_and_4, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # type: ignore[list-item]  # fmt: skip
        os.close(theirs_r)
        os.close(theirs_w)
        self.writer, self.reader = os.fdopen(ours_w, "wb"), os.fdopen(ours_r, "rb")
        self.sent, self.pending = 0, b""
        self.events: list[dict[str, Any]] = []  # what chromium told unasked, oldest first
        page = next(t for t in self.call("Target.getTargets")["targetInfos"]
                    if t["type"] == "page")  # fmt: skip
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]  # fmt: skip
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=self.session)
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=1280,
                  height=2000, deviceScaleFactor=1, mobile=False)  # fmt: skip

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.sent += 1
        message = {"id": self.sent, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.writer.write(json.dumps(message).encode() + b"\0")
        self.writer.flush()
        while True:
            answer = self.receive()
            if answer.get("id") == self.sent:
                assert "error" not in answer, answer
                return answer["result"]
            if "method" in answer:
                self.events.append(answer)

    def receive(self) -> dict[str, Any]:
        while b"\0" not in self.pending:
            chunk = self.reader.read1(1 << 16)
            assert chunk, "chromium closed its end of the pipe"
            self.pending += chunk
        raw, self.pending = self.pending.split(b"\0", 1)
        return json.loads(raw)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", session=self.session, url=url)
        while (event := self.receive()).get("method") != "Page.loadEventFired":
            self.events.append(event)

    def load(self, page: Path, anchor: str = "") -> tuple[str, list[str]]:
        """Open `page` at `anchor` afresh (a blank page first: from the same page, a new
        anchor would only scroll), as a user's browser does; its DOM after load, and the
        console's messages, uncaught errors and the browser's own reports (a blocked inline
        script or style) from then."""
        self.navigate("about:blank")
        self.events.clear()
        self.navigate(page.resolve().as_uri() + (f"#{anchor}" if anchor else ""))
        html = self.js("document.documentElement.outerHTML")  # after what came with the load
        said = []
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.consoleAPICalled":
                said.append(f"console.{params['type']}: {params.get('args')}")
            elif event.get("method") == "Runtime.exceptionThrown":
                said.append(f"uncaught: {params['exceptionDetails']}")
            elif event.get("method") == "Log.entryAdded":
                said.append(f"{params['entry']['level']}: {params['entry']['text']}")
        return html, said

    def screenshot(self) -> bytes:
        shot = self.call("Page.captureScreenshot", session=self.session, format="png")
        return base64.b64decode(shot["data"])

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=self.session, expression=expression,
                           returnByValue=True, awaitPromise=True)  # fmt: skip
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.writer.close()
        self.reader.close()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devtools]:
    """One headless chromium for the module's pages: each is opened afresh in it."""
    browser = Devtools(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.close()


# ---------------------------------------------------------------------------- the pages
@pytest.mark.slow
@needs_browser
def test_the_batch_page_lists_every_task_with_outcomes_totals_and_charts(
    batches: tuple[Path, Path],
    tmp_path: Path,
    chromium: Devtools,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out_a, _ = batches
    html = out_a.parent / "batch.html"  # beside the folder: its links are relative
    assert report(str(out_a), "-o", str(html)) == 0
    assert capsys.readouterr().out.strip() == str(html)

    page = browse(chromium, html, tmp_path, shot="batch.png")
    assert_loaded_cleanly(page)
    table = page.find("table", class_="tasks sortable")
    assert len(table) == 1
    rows = [r for r in page.find("tr") if "data-group" in r.attrs]
    cells = {r.text.split()[0]: r for r in rows}
    assert sorted(cells) == ["evil", "fix", "loop", "odd"]
    assert {name: r.attrs["data-group"] for name, r in cells.items()} == {
        "fix": "completed",
        "evil": "completed",
        "loop": "max_iterations",
        "odd": "completed",
    }
    assert "resolved" in cells["fix"].text  # its check: failing before the agent, passing after
    # fix: 2 replies, evil 4, loop 3, odd 3 -> $0.0045 each
    assert "$0.0090" in cells["fix"].text and "$0.0180" in cells["evil"].text
    summary = page.find("p", class_="summary")[0].text
    assert "4 tasks" in summary and "3 passed (75%)" in summary and "1 failed" in summary
    assert "$0.0540" in summary  # 12 replies
    stats = {r.text.split()[0]: r.text.split()[1:] for r in page.find("tr")
             if r.text.split()[:1] in (["cost"], ["iterations"])}  # fmt: skip
    assert stats["iterations"] == ["12", "3", "4", "4"]  # total, p50, p90, max
    assert stats["cost"] == ["$0.0540", "$0.0135", "$0.0180", "$0.0180"]
    footer = page.find("tfoot")[0].text
    assert "3 of 4 passed" in footer and "12" in footer
    charts = page.find("figure", class_="chart")
    assert [c.text.split()[:3] for c in charts] == [["cost", "per", "task"],
                                                    ["time", "per", "task"]]  # fmt: skip
    axes = [t.text for t in page.find("text", class_="axis")]  # what each axis measures
    assert axes == [
        "US dollars",
        "tasks, in the tasks file's order (4; a bar links to its task)",
        "seconds",
        "tasks, in the tasks file's order (4; a bar links to its task)",
    ]
    split = page.find("figure", class_="chart split")[0].text
    assert "where the time went" in split and "LLM" in split and "tools" in split
    bars = page.find("rect")
    assert {b.attrs["class"] for b in bars} >= {"pass", "fail", "llm", "tool"}
    links = [a.attrs["href"] for a in page.find("a")]
    assert sorted({h for h in links if h.endswith(".diff")}) == [
        "./out-a/patches/evil.diff",
        "./out-a/patches/fix.diff",
    ]  # the tasks that changed files
    # the filter and the sort buttons exist only with the script
    assert page.find("select") and len(page.find("button", class_="sort")) == 8

    # each task's run page is in the same file, shown by its #anchor
    to_evil = [a.text for a in page.find("a", href="#run-1")]  # tasks in the order of their ids
    assert "evil" in to_evil and "evil: $0.0180" in to_evil  # from the table, from a chart
    run = browse(chromium, html, tmp_path, "run-1", shot="batch-run.png")
    assert_loaded_cleanly(run)
    section = run.by_id("run-1")
    assert "payload.html" in section.text and "read_file" in section.text
    # A run page is kept as text until visited (see the template); a step's address opens it.
    step = browse(chromium, html, tmp_path, "run-3-s3", shot="batch-step.png")
    assert_loaded_cleanly(step)
    lazy = [n.within[-1] for n in step.find("noscript")]
    assert "run-3" not in lazy and {"run-1", "run-2", "run-4"} <= set(lazy)
    assert "repeat" in step.by_id("run-3-s3").text


@pytest.mark.slow
@needs_browser
def test_the_batch_table_sorts_filters_and_opens_run_pages_in_the_browser(
    batches: tuple[Path, Path], tmp_path: Path, chromium: Devtools
) -> None:
    html = tmp_path / "batch.html"
    assert report(str(batches[0]), "-o", str(html)) == 0
    rows = ("Array.from(document.querySelectorAll('#batch table.tasks tbody tr'))"
            ".filter(r => !r.hidden).map(r => r.cells[0].textContent)")  # fmt: skip
    shown = "getComputedStyle(document.getElementById('{}')).display"
    chromium.load(html)  # afresh: then sorted and filtered by clicks
    assert chromium.js("document.documentElement.dataset.ready") == "1"
    assert chromium.js(rows) == ["evil", "fix", "loop", "odd"]
    cost = "document.querySelectorAll('#batch table.tasks th button.sort')[5]"
    assert chromium.js(f"{cost}.textContent") == "cost"
    chromium.js(f"{cost}.click()")
    assert chromium.js(rows) == ["fix", "loop", "odd", "evil"]  # ties keep their order
    chromium.js(f"{cost}.click()")
    assert chromium.js(rows) == ["evil", "odd", "loop", "fix"]
    chromium.js("var s = document.querySelector('#batch select'); s.value = "
               "'max_iterations'; s.dispatchEvent(new Event('change'))")  # fmt: skip
    assert chromium.js(rows) == ["loop"]
    assert chromium.js("document.querySelector('#batch .shown').textContent") == "1 of 4 shown"
    assert chromium.js(shown.format("batch")) == "block"
    assert chromium.js(shown.format("run-3")) == "none"
    chromium.js("location.hash = '#run-3-s3'")  # a warning's link: a step of a run page
    assert chromium.js("document.querySelector(':target').id") == "run-3-s3"
    assert chromium.js(shown.format("run-3")) == "block"
    assert chromium.js(shown.format("batch")) == "none"
    assert "3 times in a row" in chromium.js("document.getElementById('run-3-s3').textContent")
    chromium.js("location.hash = '#batch'")
    assert chromium.js(shown.format("run-3")) == "none"


@pytest.mark.slow
@needs_browser
def test_the_batch_page_is_readable_with_scripts_off(
    batches: tuple[Path, Path], tmp_path: Path
) -> None:
    html = tmp_path / "batch.html"
    assert report(str(batches[0]), "-o", str(html)) == 0
    page = browse_without_scripts(html, tmp_path, "run-3", shot="no-script.png")
    assert "data-ready" not in page.root.attrs  # the script did not run
    assert page.find("select") == []
    rows = [r for r in page.find("tr") if "data-group" in r.attrs]
    assert len(rows) == 4 and "loop" in rows[2].text
    assert "repeat guard: list_files called with the same parameters 3 times" in page.by_id(
        "run-3").text  # fmt: skip
    assert_no_payload_ran(page)


@pytest.mark.slow
@needs_browser
def test_the_run_page_shows_the_timeline_warnings_and_coloured_diff(
    hostile_repo: Path, tmp_path: Path, chromium: Devtools
) -> None:
    llm = MarkerLlm({"run": [
        reply("list_files", "Look first."),
        reply("list_files", "Look first."),
        reply("list_files", "Look first."),  # the repeat guard
        LlmResponse("no tags here", usage=USAGE),  # a parse error
        reply("read_file", "Read it.", path="../../etc/passwd"),  # refused
        reply("edit_file", "Fix.", path="hello.py", old_str="helo", new_str="hello"),
        done("fixed the greeting"),
    ]})  # fmt: skip
    trajectory = tmp_path / "run.json"
    redactor = Redactor()
    agent = ReactAgent(llm, hostile_repo, max_iterations=10, redactor=redactor,
                       cost=meter_for("scripted-1", None, 3.0, 15.0),
                       on_event=TrajectoryRecorder(trajectory, redactor.redact_obj))  # fmt: skip
    assert agent.run("[run] fix the greeting </script>")["success"]
    html = tmp_path / "run.html"
    assert report(str(trajectory), "-o", str(html)) == 0

    page = browse(chromium, html, tmp_path, shot="run.png")
    assert_loaded_cleanly(page)
    run = page.by_id("run")
    facts = {d.text.split("\n")[0] for d in page.find("dd")}
    assert {"completed", "task_complete", "7 of 10", "7.0k in · 700 out", "$0.0315"} <= facts
    assert "fix the greeting </script>" in page.find("pre", class_="text task")[0].text
    steps = page.find("li", class_="step")
    assert len(steps) == 7
    assert "1.0k in · 100 out tokens" in steps[0].text and "LLM " in steps[0].text
    assert "tools " in steps[0].text
    warnings = page.find("ul", class_="warnings")[0].text
    assert "repeat guard: list_files called with the same parameters 3 times" in warnings
    tags = [e.text for e in page.find("span") if e.attrs.get("class", "").startswith("tag ")]
    assert {"repeat", "parse", "refused"} <= set(tags)
    assert page.find("details", class_="obs")  # observations fold
    diff = page.find("pre", class_="diff")[0]
    assert [s.text.rstrip() for s in page.find("span", class_="del")] == ["-print('helo')"]
    assert [s.text.rstrip() for s in page.find("span", class_="add")] == ["+print('hello')"]
    assert "hello.py" in run.text and diff.text


@pytest.mark.slow
@needs_browser
def test_the_comparison_page_shows_flips_deltas_and_diffs_side_by_side(
    batches: tuple[Path, Path], tmp_path: Path, chromium: Devtools
) -> None:
    html = tmp_path / "compare.html"
    assert report(str(batches[0]), str(batches[1]), "-o", str(html)) == 0

    page = browse(chromium, html, tmp_path, shot="compare.png")
    assert_loaded_cleanly(page)
    summary = page.by_id("summary").text
    assert "pass rate: A 3/4 (75%) vs B 3/4 (75%)" in summary
    assert "cost: A $0.0540 vs B $0.0540" in summary  # fix +1 reply, loop -1
    assert "1 passed in A, failed in B" in summary and "1 failed in A, passed in B" in summary
    rows = {
        r.text.split()[0]: r
        for r in page.find("tr")
        if "data-group" in r.attrs and "class" in r.attrs
    }  # the comparison's (the batches' own pages follow)
    assert sorted(rows) == ["evil", "fix", "loop", "odd"]
    assert rows["fix"].attrs["data-group"] == "passed in A only"
    assert rows["loop"].attrs["data-group"] == "passed in B only"
    assert rows["evil"].attrs["data-group"] == "same: passed"
    assert "+$0.0045" in rows["fix"].text and "+1" in rows["fix"].text
    assert "−$0.0045" in rows["loop"].text and "-1" in rows["loop"].text

    side = browse(chromium, html, tmp_path, "cmp-2", shot="compare-task.png")
    assert_loaded_cleanly(side)
    halves = [d for d in side.find("div", class_="side") if "cmp-2" in d.within]
    assert len(halves) == 2
    assert "+print('hello')" in halves[0].text and "+print('HELO')" in halves[1].text
    assert "passed in A, failed in B" in side.by_id("cmp-2").text


@pytest.mark.slow
@needs_browser
def test_a_saved_session_gets_a_page_of_its_runs_and_diff(
    hostile_repo: Path, tmp_path: Path, chromium: Devtools
) -> None:
    store = SessionStore()  # this test's own $XDG_STATE_HOME (see conftest)
    session = store.new(hostile_repo.resolve())
    redactor = Redactor()
    tools = CodeRepositoryTools(hostile_repo, redactor=redactor)
    llm = MarkerLlm({"s": [reply("edit_file", "Fix.", path="hello.py", old_str="helo",
                                 new_str="hello"), done("fixed")]})  # fmt: skip
    recorder = SessionRecorder(
        store, session, tools, lambda: agent.conversation_history, redactor.redact_obj
    )  # fmt: skip (as the CLI wires it)
    agent = ReactAgent(llm, tools=tools, redactor=redactor, on_event=recorder)
    agent.run_result("[s] fix the greeting")
    html = tmp_path / "session.html"
    assert report(str(store.path(session)), "-o", str(html)) == 0

    page = browse(chromium, html, tmp_path, shot="session.png")
    assert_loaded_cleanly(page)
    assert session.id in page.by_id("session").text
    run = page.by_id("run-1")
    assert "fix the greeting" in run.text and "edit_file" in run.text
    assert [s.text.rstrip() for s in page.find("span", class_="add")] == ["+print('hello')"]


@pytest.mark.slow
@needs_browser
def test_a_session_report_after_compact_and_undo_shows_every_runs_steps_by_its_id(
    repo: Path, tmp_path: Path, chromium: Devtools, capsys: pytest.CaptureFixture[str]
) -> None:
    """After /compact the runs it kept and the runs after it still show their steps, and the
    compaction is named with its summary; an undo's note to the model is no run's task; a
    folded observation previews its content, not the format's tag; the id is enough."""
    (repo / "notes.txt").write_text("".join(f"note {n}\n" for n in range(30)))
    store = SessionStore()
    tools = CodeRepositoryTools(repo)
    llm = ScriptedLlm(
        reply("write_file", "Add it.", path="LICENSE", content="MIT\n"), done("added"),
        reply("read_file", "Read the notes.", path="notes.txt"), done("read"),
        LlmResponse("Task 1 added a LICENSE (undone); task 2 read notes.txt."),  # the summary
        reply("get_file_info", "After the compact.", path="hello.py"), done("looked"),
    )  # fmt: skip
    recorder = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, on_event=recorder)
    agent.run_result(recorder.task("add a license"), history=recorder.conversation())
    undo_last_run(store, recorder.session)
    assert "LICENSE is as it was before it" in recorder.session.note
    agent.run_result(recorder.task("read the notes"), history=recorder.conversation())
    assert recorder.compact(llm, 100_000) is not None
    agent.run_result(recorder.task("look at hello.py"), history=recorder.conversation())

    html = tmp_path / "session.html"
    assert main(["report", recorder.session.id, "-o", str(html)]) == 0, capsys.readouterr().err
    page = browse(chromium, html, tmp_path, shot="session-compacted.png")
    assert_loaded_cleanly(page)
    session = page.by_id("session").text
    assert "/compact replaced" in session and "Task 1 added a LICENSE" in session
    runs = [page.by_id(f"run-{n}") for n in (1, 2, 3)]
    assert "replaced by the summary of a /compact" in runs[0].text
    assert "read_file" in runs[1].text and "notes.txt" in runs[1].text
    assert "get_file_info" in runs[2].text
    tasks = [e.text for e in page.find("pre", class_="text task")]
    assert tasks == ["add a license", "read the notes", "look at hello.py"]
    assert "(Note:" not in page.html
    previews = [e.text for e in page.find("span", class_="first")]
    assert previews and not any("OBSERVATION" in text for text in previews)
    assert "notes.txt (lines 1-30 of 30):" in previews
    lines = (
        "(() => { const r = document.createRange(); r.selectNodeContents("
        "document.querySelector('#run-1 dd.time')); return r.getClientRects().length; })()"
    )
    assert chromium.js(lines) == 1  # the start time on one line, not three
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}", page.find("dd", class_="time")[0].text.strip()
    )

    shown = subprocess.run([sys.executable, "-m", "toy_agent", "sessions", "show",
                            recorder.session.id], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert "task 2: [completed] read the notes" in shown.stdout
    assert "(Note:" not in shown.stdout


# ------------------------------------------------------------------------- safe to open
@pytest.mark.slow
def test_secrets_and_payloads_in_a_batch_are_redacted_and_escaped(
    batches: tuple[Path, Path], tmp_path: Path
) -> None:
    assert TOKEN in (batches[0] / "patches" / "evil.diff").read_text()  # git's raw patch
    html = tmp_path / "batch.html"
    assert report(str(batches[0]), "-o", str(html)) == 0
    text = html.read_text()
    assert TOKEN not in text and "[REDACTED]" in text
    assert TITLE_PAYLOAD not in text and "&lt;script&gt;document.title=" in text
    assert "<img" not in text and "&lt;img src=x onerror=" in text
    assert 'href="javascript' not in text.replace(" ", "")
    policy = html_lib.unescape(next(line for line in text.splitlines()
                                    if "Content-Security-Policy" in line))  # fmt: skip
    assert "default-src 'none'" in policy and "'sha256-" in policy
    assert "unsafe-inline" not in policy


@pytest.mark.slow
@needs_browser
def test_hostile_payloads_run_nowhere_in_the_comparison(
    batches: tuple[Path, Path], tmp_path: Path, chromium: Devtools
) -> None:
    html = tmp_path / "compare.html"
    assert report(str(batches[0]), str(batches[1]), "-o", str(html)) == 0
    for anchor in ("a-run-1", "cmp-1", "b-batch"):
        page = browse(chromium, html, tmp_path, anchor)
        assert_loaded_cleanly(page)
    assert "document.title='pwned'" in page.html  # shown as text, in the run page of A


# --------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: [str(d / "missing.json")], "missing.json: no such file or folder"),
        (lambda d: [str(d)], "is not a batch --out folder (it has no results.jsonl)"),
        (lambda d: [str(_write(d / "x.json", "{not json"))], "x.json is not valid JSON"),
        (lambda d: [str(_write(d / "x.json", '{"a": 1}'))],
         "is not a toy_agent trajectory, session or batch --out folder"),
        (lambda d: [str(_write(d / "out" / "results.jsonl", '{"id": "a"}\n{cut').parent)],
         "results.jsonl: line 2: not valid JSON"),
        (lambda d: [str(d), str(_write(d / "x.json", "{}"))],
         "comparing needs two batch --out folders"),
        (lambda d: ["a", "b", "c"], "give one PATH, or two batch folders to compare"),
        (lambda d: [str(_write(d / "t.json", '{"format": "toy_agent.trajectory/1"}'))],
         "t.json: steps: missing"),
        (lambda d: [str(_write(d / "s.json", '{"format": "toy_agent.session/1"}'))],
         "s.json: repo: missing"),
        (lambda d: [str(_write(d / "s.json", '{"format": "toy_agent.session/1", "repo": "/",'
                                             ' "messages": ["text"]}'))],
         "s.json: messages[0]: expected an object"),
    ],
)  # fmt: skip
def test_a_bad_input_is_one_line_on_stderr_and_exit_2(
    make: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = report(*make(tmp_path), "-o", str(tmp_path / "r.html"))
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("toy-agent: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    ("step", "field", "problem"),
    [
        ({"observations": [{"content": "x", "is_error": "yes"}]},
         "steps[0].observations[0].is_error", "expected a boolean"),
        ({"response": {"text": 5}}, "steps[0].response.text", "expected a string"),
        ({"response": {}, "actions": [{"parameters": {}}]}, "steps[0].actions[0].tool_name",
         "missing"),
        ({"response": {}, "observations": [{"content": "x", "notes": [{"kind": "gossip"}]}]},
         "steps[0].observations[0].notes[0].kind", "expected one of cut, repeat"),
    ],
)  # fmt: skip
def test_a_trajectory_with_a_bad_field_is_refused_naming_the_file_and_the_field(
    step: dict[str, Any], field: str, problem: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The record is checked once, when it is read: one line naming the file and the field,
    not a page that guesses (the typed record replaces the report's own tolerance)."""
    step = {"response": {"text": "hi"}, **step}
    bad = {"format": "toy_agent.trajectory/1", "task": "t", "steps": [step]}
    trajectory = _write(tmp_path / "t.json", json.dumps(bad))
    assert report(str(trajectory), "-o", str(tmp_path / "r.html")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"toy-agent: error: trajectory {trajectory}: {field}: {problem}"), err
    assert err.count("\n") == 1 and not (tmp_path / "r.html").exists()


def test_a_trajectory_of_an_older_shape_still_gets_a_page(tmp_path: Path) -> None:
    """What the first trajectories held (no is_error, timings, iteration, notes, command,
    result or diff) reads, and their observations show plain."""
    old = {
        "format": "toy_agent.trajectory/1",
        "task": "look around",
        "steps": [
            {"response": {"text": "<THOUGHT>look</THOUGHT>"}, "thought": "look",
             "actions": [{"tool_name": "list_files", "parameters": {}}],
             "observations": [{"tool_name": "list_files", "content": "a.py"}]},
            {"response": {"text": "no tags"}, "parse_error": "no action"},
            {"response": {"text": "x"}, "observations": [{"content": "a chart", "images": [
                {"mime_type": "image/png", "bytes": 2048, "sha256": "ab"}, {}]}]},
        ],
    }  # fmt: skip
    trajectory = _write(tmp_path / "t.json", json.dumps(old))
    assert report(str(trajectory), "-o", str(tmp_path / "r.html")) == 0
    page = (tmp_path / "r.html").read_text()
    assert "the trajectory has no result" in page and page.count('class="step"') == 3
    assert "an image: image/png, 2.0k bytes" in page and "an image: image, 0 bytes" in page
    assert "does not record the diff" in page


@pytest.mark.slow
def test_an_unwritable_output_is_a_usage_error(
    batches: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = report(str(batches[0]), "-o", str(tmp_path / "no" / "such" / "r.html"))
    assert code == 2
    assert capsys.readouterr().err.startswith("toy-agent: error: cannot write ")


@pytest.mark.slow
def test_report_is_a_command_of_main_py_and_the_seed_flags_still_parse(tmp_path: Path) -> None:
    trajectory = ROOT / "toy_agent" / "demo" / "trajectory.json"
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), "report", str(trajectory),
                           "-o", str(tmp_path / "demo.html")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Fix median() in stats.py" in (tmp_path / "demo.html").read_text()
    helped = subprocess.run([sys.executable, str(ROOT / "main.py"), "report", "--help"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert helped.returncode == 0 and "usage: toy-agent report" in helped.stdout
    seed = subprocess.run([sys.executable, str(ROOT / "main.py"), "--help"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert seed.returncode == 0 and "--max-iterations" in seed.stdout


@pytest.mark.slow
def test_only_rendering_a_report_imports_jinja2(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import toy_agent.cli, toy_agent.agent, toy_agent.batch.driver, toy_agent.report\n"
        "print('jinja2' in sys.modules)\n"
        "toy_agent.cli.main(['report', sys.argv[1], '-o', sys.argv[2]])\n"
        "print('jinja2' in sys.modules)\n"
    )
    demo = ROOT / "toy_agent" / "demo" / "trajectory.json"
    done = subprocess.run([sys.executable, "-c", code, str(demo), str(tmp_path / "r.html")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)  # fmt: skip
    assert done.stdout.split() == ["False", str(tmp_path / "r.html"), "True"], done.stderr


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_trajectory_records_the_runs_diff(hostile_repo: Path, tmp_path: Path) -> None:
    llm = MarkerLlm({"d": [reply("edit_file", path="hello.py", old_str="helo", new_str="hi"),
                           done()]})  # fmt: skip
    trajectory = tmp_path / "t.json"
    ReactAgent(llm, hostile_repo, on_event=TrajectoryRecorder(trajectory)).run("[d] go")
    diffs = json.loads(trajectory.read_text())["diffs"]
    assert list(diffs) == ["hello.py"] and "+print('hi')" in diffs["hello.py"]


def test_the_secrets_of_this_environment_are_redacted_from_a_trajectory_written_elsewhere(
    hostile_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-Value-0f-this-machine"
    llm = MarkerLlm({"e": [reply("write_file", f"Writing {secret}", path="x.txt",
                                 content=secret), done(secret)]})  # fmt: skip
    trajectory = tmp_path / "t.json"  # written where the value was no secret: kept as is
    ReactAgent(llm, hostile_repo, on_event=TrajectoryRecorder(trajectory)).run("[e] go")
    assert secret in trajectory.read_text()
    monkeypatch.setenv("DEPLOY_TOKEN", secret)
    assert report(str(trajectory), "-o", str(tmp_path / "r.html")) == 0
    page = (tmp_path / "r.html").read_text()
    assert secret not in page and page.count("[REDACTED]") >= 3  # thought, content, answer


@pytest.mark.slow
def test_a_batch_folder_cannot_make_the_page_show_a_file_it_links_to(
    batches: tuple[Path, Path], tmp_path: Path
) -> None:
    out = shutil.copytree(batches[0], tmp_path / "out-a", symlinks=True)
    private = tmp_path / "private.txt"
    private.write_text("diff --git a/x b/x\n+the private words\n")
    (out / "patches" / "fix.diff").unlink()
    (out / "patches" / "fix.diff").symlink_to(private)
    assert report(str(out), "-o", str(tmp_path / "r.html")) == 0
    page = (tmp_path / "r.html").read_text()
    assert "the private words" not in page and "patches/fix.diff" not in page


@pytest.mark.slow
def test_the_sandbox_refusing_a_command_is_a_warning_at_its_step(
    hostile_repo: Path, tmp_path: Path
) -> None:
    from toy_agent.sandbox import bwrap_problem

    problem = bwrap_problem()
    if problem is not None:
        pytest.skip(f"bubblewrap cannot sandbox here ({problem}); CI installs it")
    llm = MarkerLlm({"w": [reply("run_command", "Write outside.", command="touch /usr/x"),
                           done()]})  # fmt: skip
    tools = CodeRepositoryTools(hostile_repo, allow_commands=True, sandbox="bwrap")
    trajectory = tmp_path / "t.json"
    ReactAgent(llm, tools=tools, on_event=TrajectoryRecorder(trajectory)).run("[w] go")
    assert report(str(trajectory), "-o", str(tmp_path / "r.html")) == 0
    warnings = (tmp_path / "r.html").read_text().split('<ul class="warnings">')[1]
    warnings = warnings.split("</ul>")[0]
    assert 'href="#run-s1"' in warnings and "the sandbox refused something" in warnings
