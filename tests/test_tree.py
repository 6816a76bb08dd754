"""Tree: walks remembered between calls, read again only where the repository changed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedLlm, xml_action

from toy_agent import ReactAgent
from toy_agent.messages import LlmResponse
from toy_agent.tools import CodeRepositoryTools
from toy_agent.tree import Tree, walk

RACY = 0.1  # the Trees here do not remember a folder changed less than 0.1 s before a walk


def make(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, Path]:
    """A repository of seven folders, and a file outside it."""
    root, outside = tmp_path / "repo", tmp_path / "secret.txt"
    outside.write_text("outside\n")
    make(
        root,
        {
            ".gitignore": "*.log\n",
            "a/one.py": "",
            "b/.gitignore": "*.tmp\n",
            "b/x.tmp": "",
            "b/keep.py": "",
            "c/c.py": "",
            "d/target.py": "",
            "e/f.py": "",
            **{f"same/m{i}.py": "" for i in range(20)},
            "same/x.log": "",
        },
    )
    os.symlink("../d/target.py", root / "e" / "link.py")
    return root, outside


@pytest.fixture
def settled(repository: tuple[Path, Path]) -> tuple[Path, Path]:
    """The repository, its folders last changed over RACY seconds ago (timestamps lag the
    clock by a tick at most, a few milliseconds)."""
    time.sleep(2 * RACY)
    return repository


def test_an_unchanged_repository_is_walked_from_memory(settled: tuple[Path, Path]) -> None:
    root, _ = settled
    tree = Tree(root, racy_seconds=RACY)
    first = sorted(tree.walk(root))
    scans = tree.scans
    assert scans == 7  # the root and its six folders
    assert sorted(tree.walk(root)) == first == sorted(walk(root, root))
    assert tree.scans == scans


def test_a_walk_rereads_only_changed_folders_and_sees_every_change(
    settled: tuple[Path, Path],
) -> None:
    repo, outside = settled
    tree = Tree(repo, racy_seconds=RACY)
    before = dict(tree.walk(repo))
    assert "e/link.py" in before and "b/x.tmp" not in before
    scans = tree.scans

    (repo / "a" / "two.py").write_text("")  # a new file: folder a changes
    (repo / "b" / ".gitignore").write_text("")  # rewritten in place: folder b does not change
    (repo / "c" / "pyvenv.cfg").write_text("")  # c becomes a virtualenv
    (repo / "d" / "target.py").unlink()  # the link's target now leads outside;
    os.symlink(outside, repo / "d" / "target.py")  # folder e, which holds the link, is as it was
    after = dict(tree.walk(repo))

    assert after == dict(walk(repo, repo))
    assert "a/two.py" in after
    assert "b/x.tmp" in after
    assert not any(rel.startswith("c") for rel in after)
    assert "e/link.py" not in after and "d/target.py" not in after
    assert after["same/m0.py"] == "file" and "same/x.log" not in after
    assert tree.scans - scans == 4  # a, c and d changed, b's rules changed; same and e did not


def test_a_folder_changed_just_before_a_walk_is_read_again(tmp_path: Path) -> None:
    """A timestamp is as coarse as a clock tick: a change in the same tick as the walk's look
    at the folder would leave it as it was. So a fresh folder is never taken from memory."""
    make(tmp_path, {"x.py": "", "sub/y.py": ""})
    tree = Tree(tmp_path)
    assert sorted(tree.walk(tmp_path)) == [("sub", "dir"), ("sub/y.py", "file"), ("x.py", "file")]
    (tmp_path / "z.py").write_text("")
    os.utime(tmp_path, ns=(tmp_path.stat().st_atime_ns, tmp_path.stat().st_mtime_ns))
    assert ("z.py", "file") in set(tree.walk(tmp_path))
    assert tree.scans == 4


def test_a_tree_over_its_memory_limit_still_walks_everything(tmp_path: Path) -> None:
    make(tmp_path, {f"d{i}/f{j}.py": "" for i in range(5) for j in range(5)})
    tree = Tree(tmp_path, max_entries=8)
    expected = sorted(walk(tmp_path, tmp_path))
    assert len(expected) == 30
    assert sorted(tree.walk(tmp_path)) == expected
    assert sorted(tree.walk(tmp_path)) == expected


def test_the_tools_see_their_own_writes_at_once(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": ""})
    tools = CodeRepositoryTools(tmp_path)
    assert "b.py" not in tools.list_files()
    tools.write_file("pkg/b.py", "needle\n")
    assert "pkg/b.py" in tools.list_files()
    assert "pkg/b.py" in tools.search_in_files("needle")


def test_a_warm_up_walks_in_the_background_and_the_next_walk_reuses_it(
    settled: tuple[Path, Path],
) -> None:
    root, _ = settled
    tree = Tree(root, racy_seconds=RACY)
    tree.warm_up()
    assert sorted(tree.walk(root)) == sorted(walk(root, root))  # waits for the warm-up
    assert tree.scans == 7


class WaitsForTheWalk(ScriptedLlm):
    """Answers only once the repository has been walked: a run must walk it while the model
    thinks over the first request."""

    def __init__(self, tree: Tree, folders: int):
        super().__init__(xml_action("task_complete", result="done"))
        self.tree, self.folders = tree, folders

    def call_llm(self, *args: Any, **kwargs: Any) -> LlmResponse:
        deadline = time.monotonic() + 10
        while self.tree.scans < self.folders and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.tree.scans == self.folders, "the repository was not walked"
        return super().call_llm(*args, **kwargs)


def test_a_run_walks_the_repository_while_the_first_llm_call_is_in_flight(
    repository: tuple[Path, Path],
) -> None:
    root, _ = repository
    tools = CodeRepositoryTools(root)
    agent = ReactAgent(WaitsForTheWalk(tools.tree, 7), tools=tools)
    assert agent.run("look around")["outcome"] == "completed"
