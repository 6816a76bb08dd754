"""--replay from the command line: how a replay ends when the run outgrows its recording."""

from __future__ import annotations

import json

from cli_helpers import run_main
from fakes import write_replay, xml_action


def test_a_replay_past_the_end_of_its_recording_is_diverged_and_says_how_to_stop(
    home, repo, tmp_path, capsys
):
    replay = write_replay(tmp_path / "r.json", xml_action("read_file", path="hello.py"))
    args = ["x", "--repo", str(repo), "--replay", str(replay), "--output", "json"]

    done = run_main(capsys, *args)
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["exit_code"] == 1
    assert result["outcome"] == "replay_diverged"
    assert result["error"] == (
        "the replay ran past the end of its recording: it has 1 reply and the run asked for "
        "another (the last did not end it); pass --max-iterations 1 to stop where the "
        "recording stops"
    )

    stopped = run_main(capsys, *args, "--max-iterations", "1")  # the fix it names
    assert stopped.returncode == 1
    assert json.loads(stopped.stdout)["outcome"] == "max_iterations"
