"""The one cut rule: what a cut keeps adds up, the note is there exactly when something was
cut, and a cut never splits a surrogate pair, a terminal escape or a UTF-8 character."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import ScriptedLlm, xml_action
from hypothesis import given, settings
from hypothesis import strategies as st

from toy_agent import ReactAgent
from toy_agent.batch.worker import CHECK_TAIL_CHARS, run_check
from toy_agent.cuts import (
    BUDGET,
    HOW_TO_SEE_MORE,
    MARK,
    NOTE_RE,
    amount,
    cut,
    note,
    split,
    utf8_head,
    utf8_tail,
)
from toy_agent.events import TrajectoryRecorder
from toy_agent.redaction import Redactor
from toy_agent.report import write_report
from toy_agent.tools import CodeRepositoryTools

PAIR = "\ud83d\ude00"  # 😀 as UTF-16 halves: what JSON "\ud83d\ude00" gives before joining
PIECES = [PAIR, "\ud83d", "\ude00", "\x1b[31m", "\x1b]0;title\x07", "\n", "\r\n", " ", "é", "ab"]
texts = st.text() | st.lists(st.sampled_from(PIECES) | st.text(max_size=3)).map("".join)
keeps = st.sampled_from(["head", "tail", "both"])


@pytest.mark.slow  # a long sweep: the whole suite runs it
@settings(max_examples=400)
@given(texts, st.integers(0, 60), keeps, st.sampled_from(["characters", "lines"]), st.booleans())
def test_what_a_cut_keeps_and_leaves_out_adds_up_to_the_text(text, limit, keep, by, at_word):
    part = split(text, limit, keep=keep, by=by, at_word=at_word)
    assert len(part.head) + part.chars + len(part.tail) == len(text)
    assert text.startswith(part.head) and text.endswith(part.tail)
    if by == "characters" and part.chars:
        assert len(part.head) + len(part.tail) <= limit
    elif by == "lines":
        kept = len((part.head + part.tail).splitlines())
        assert kept + part.lines == len(text.splitlines())
        assert kept <= limit or not part.lines


@pytest.mark.slow  # a long sweep: the whole suite runs it
@settings(max_examples=400)
@given(texts, st.integers(0, 60), keeps, st.sampled_from(["characters", "lines"]))
def test_the_note_is_there_exactly_when_something_was_cut(text, limit, keep, by):
    shown = cut(text, limit, "ask again", keep=keep, by=by)
    part = split(text, limit, keep=keep, by=by)
    if part.chars:
        found = NOTE_RE.search(shown.replace(part.head, "", 1))
        assert found and found["how"] == "ask again"
        count = part.lines if by == "lines" else part.chars
        assert found["what"] == amount(count, by[:-1])
    else:
        assert shown == text


@pytest.mark.slow  # a long sweep: the whole suite runs it
@settings(max_examples=400)
@given(texts, st.integers(0, 60), keeps, st.booleans())
def test_a_cut_never_splits_a_surrogate_pair(text, limit, keep, at_word):
    part = split(text, limit, keep=keep, at_word=at_word)
    if not part.chars:
        return
    gap_start, gap_end = len(part.head), len(text) - len(part.tail)
    for i in (gap_start, gap_end):
        if 0 < i < len(text):
            assert not ("\ud800" <= text[i - 1] <= "\udbff" and "\udc00" <= text[i] <= "\udfff")


def test_a_cut_never_splits_a_terminal_escape():
    text = "x" * 8 + "\x1b[38;5;196m" + "y" * 30
    for limit in range(9, 20):
        head = split(text, limit).head
        assert head == "x" * 8 or head.startswith("x" * 8 + "\x1b[38;5;196m")
        tail = split(text, limit + 22, keep="tail").tail
        assert "\x1b" not in tail or tail.startswith("\x1b[38;5;196m")


@given(st.text(), st.integers(0, 40))
def test_utf8_cuts_keep_whole_characters(text, at):
    data = text.encode("utf-8", "surrogatepass")
    head, tail = data[:at], data[at:]
    head[: utf8_head(head)].decode("utf-8", "surrogatepass")
    tail[utf8_tail(tail) :].decode("utf-8", "surrogatepass")
    assert len(head) - utf8_head(head) <= 3 and utf8_tail(tail) <= 3


def test_one_wording_for_every_cut():
    assert note("1,234 characters", "read on") == "[… 1,234 characters cut: read on]"
    assert note(amount(1, "match")) == "[… 1 match cut]"
    assert cut("abcdef", 4, "see more", keep="both") == "ab\n[… 2 characters cut: see more]\nef"
    assert cut("one two three", 9, "x", sep=" ", at_word=True) == "one two [… 6 characters cut: x]"
    assert cut("a\nb\nc\n", 1, "y", by="lines") == "a\n[… 2 lines cut: y]"
    assert note("x").startswith(MARK)


def test_an_observation_over_the_budget_says_how_its_tool_shows_more(tmp_path: Path) -> None:
    (tmp_path / "wide.txt").write_text(("y" * 99 + "\n") * 300)  # 30,000 characters in one read
    llm = ScriptedLlm(
        xml_action("read_file", path="wide.txt"), xml_action("task_complete", result="ok")
    )
    ReactAgent(llm, tmp_path, context_budget=2_000).run("read it")  # caps an observation at 2,000

    observation = llm.requests[1]["messages"][-1].content
    found = NOTE_RE.search(observation)
    assert found and found["how"] == f"{BUDGET}; {HOW_TO_SEE_MORE['read_file']}"
    assert "   1 | y" in observation and " 300 | y" in observation  # its head and its tail


def test_a_long_check_keeps_the_end_of_its_output_with_the_note(tmp_path: Path) -> None:
    tools = CodeRepositoryTools(tmp_path, allow_commands=True, sandbox="off")
    tail = run_check("seq 1 5000", tools, timeout=30)["output_tail"]
    note_line, kept = tail.split("\n", 1)
    assert NOTE_RE.fullmatch(note_line) and kept.endswith("4999\n5000\n")
    assert len(kept) <= CHECK_TAIL_CHARS


def test_the_report_warns_of_a_cut_the_model_was_told_of(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "wide.txt").write_text(("y" * 99 + "\n") * 300)
    llm = ScriptedLlm(
        xml_action("read_file", path="wide.txt"), xml_action("task_complete", result="ok")
    )
    trajectory, redactor = tmp_path / "run.json", Redactor()
    recorder = TrajectoryRecorder(trajectory, redactor.redact_obj)
    ReactAgent(llm, repo, context_budget=2_000, redactor=redactor, on_event=recorder).run("read")

    page = write_report([trajectory], tmp_path / "r.html").read_text()
    warnings = page.split('<ul class="warnings">')[1].split("</ul>")[0]
    assert re.search(r"read_file: [\d,]+ characters of its output cut", warnings)
