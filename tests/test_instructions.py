"""Instructions where people keep them: yours beside the config file, the work tree's root,
the folders down to --repo; CLAUDE.md where there is no AGENTS.md; and /init's draft."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_main
from fakes import ScriptedLlm, folder, write_replay, xml_action

from toy_agent import ReactAgent
from toy_agent.config import MAX_INSTRUCTIONS_BYTES, load_instructions
from toy_agent.interactive import Repl
from toy_agent.sessions import SessionRecorder, SessionStore
from toy_agent.tools import CodeRepositoryTools


def system_prompt_of(capsys, repo: Path, tmp_path: Path) -> str:
    """The system prompt a real CLI run sent (its trajectory records it)."""
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    trajectory = tmp_path / "t.json"
    result = run_main(capsys, "--task", "x", "--repo", str(repo), "--replay", str(replay),
                      "--trajectory", str(trajectory))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(trajectory.read_text())["system_prompt"]


def test_instructions_from_all_three_places_come_in_the_documented_order(home, tmp_path, capsys):
    (home / "config" / "toy-agent").mkdir(parents=True)
    (home / "config" / "toy-agent" / "AGENTS.md").write_text("GLOBAL: answer tersely.\n")
    top = folder(tmp_path / "mono", {"AGENTS.md": "ROOT: use make.\n",
                                     "services/AGENTS.md": "SERVICES: no globals.\n",
                                     "services/api/AGENTS.md": "API: run pytest -q.\n",
                                     "services/api/app.py": "x = 1\n",
                                     "other/AGENTS.md": "OTHER: never read.\n"})  # fmt: skip
    subprocess.run(["git", "init", "-q", str(top)], check=True)

    system = system_prompt_of(capsys, top / "services" / "api", tmp_path)

    order = [system.index(text) for text in ("GLOBAL", "ROOT", "SERVICES", "API")]
    assert order == sorted(order)
    assert "OTHER" not in system
    assert "(~/config/toy-agent/AGENTS.md)" in system and "(../../AGENTS.md)" in system


def test_claude_md_is_read_where_there_is_no_agents_md(home, repo, tmp_path, capsys):
    (repo / "CLAUDE.md").write_text("CLAUDE: tabs, not spaces.\n")
    system = system_prompt_of(capsys, repo, tmp_path)
    assert "CLAUDE: tabs, not spaces." in system

    (repo / "AGENTS.md").write_text("AGENTS: spaces.\n")
    system = system_prompt_of(capsys, repo, tmp_path)
    assert "AGENTS: spaces." in system and "CLAUDE" not in system


def test_a_nested_repo_folder_reads_its_own_file_after_the_roots(home, tmp_path):
    top = folder(tmp_path / "w", {"AGENTS.md": "root rules\n", "pkg/CLAUDE.md": "pkg rules\n"})
    (top / ".git").mkdir()
    instructions = load_instructions(CodeRepositoryTools(top / "pkg"))
    assert instructions.source == "../AGENTS.md + CLAUDE.md"  # named from --repo
    assert instructions.text.index("root rules") < instructions.text.index("pkg rules")


def test_the_size_cap_covers_all_files_and_names_those_left_out(home, tmp_path):
    top = folder(tmp_path / "w", {"AGENTS.md": "r" * MAX_INSTRUCTIONS_BYTES,
                                  "pkg/AGENTS.md": "pkg rules\n"})  # fmt: skip
    (top / ".git").mkdir()
    instructions = load_instructions(CodeRepositoryTools(top / "pkg"))
    assert "pkg rules" not in instructions.text
    assert "Left out, over the 32 KB of instructions: AGENTS.md" in instructions.text


def test_a_link_above_the_repo_folder_is_not_followed(home, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the private key\n")
    top = folder(tmp_path / "w", {"pkg/a.py": "x\n"})
    (top / ".git").mkdir()
    (top / "AGENTS.md").symlink_to(secret)
    assert "private key" not in load_instructions(CodeRepositoryTools(top / "pkg")).text


def init_repl(repo: Path, draft: str, answers: list[str]) -> tuple[Repl, ScriptedLlm, io.StringIO]:
    llm = ScriptedLlm(xml_action("read_file", path="hello.py"),
                      xml_action("task_complete", result=draft))  # fmt: skip
    tools = CodeRepositoryTools(repo)
    store = SessionStore()
    recorder = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, on_event=recorder)
    out = io.StringIO()
    replies = iter(answers)
    return Repl(agent, recorder, read=lambda prompt: next(replies), out=out), llm, out


@pytest.mark.parametrize("answer", ["y", "n"])
def test_init_drafts_agents_md_read_only_and_writes_it_only_when_approved(home, repo, answer):
    draft = "# hello\n\nRun `python hello.py`."
    repl, llm, out = init_repl(repo, draft, [answer])

    repl.command("/init")

    assert "You can only read" in llm.requests[0]["system"] or "read-only" in (
        llm.requests[0]["system"].lower()
    )  # fmt: skip
    offered = llm.requests[0]["system"]
    assert "<name>write_file</name>" not in offered  # the draft is made read-only
    assert draft in out.getvalue()
    if answer == "y":
        assert (repo / "AGENTS.md").read_text() == draft + "\n"
    else:
        assert not (repo / "AGENTS.md").exists()
        assert "AGENTS.md not written" in out.getvalue()
    assert repl.agent.permissions.mode != "read-only"  # the session's mode is back


def test_init_leaves_an_existing_agents_md_alone(home, repo):
    (repo / "AGENTS.md").write_text("mine\n")
    repl, llm, out = init_repl(repo, "other", ["y"])
    repl.command("/init")
    assert llm.requests == [] and "exists already" in out.getvalue()
    assert (repo / "AGENTS.md").read_text() == "mine\n"
