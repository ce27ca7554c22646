"""scripts/summarize_results.py against a hand-built results file."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "summarize_results.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_thresholds_minutes_episodes_and_frames(tmp_path):
    # window 2: rolling means -21, -15 (ep 2), -5 (ep 3), 5 (ep 4), 12.5 (ep 5); one episode a minute, 100 steps each
    scores = [-21, -9, -1, 11, 14]
    lines = [f"2026-01-01 00:{i:02d}:00, {s}, 100\n" for i, s in enumerate(scores)]
    path = tmp_path / "results.txt"
    path.write_text("".join(lines) + "2026-01-01 00:09:00, 21")  # torn last line: ignored
    out = run(path, "--window", 2, "--frameskip", 4, "--thresholds", -10, 0, 10, 18)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[2:6]}
    assert rows["-10"] == ["2.0", "3", "1200"]  # first mean >= -10: episode 3 (-5), minute 2, 3*100*4 frames
    assert rows["0"] == ["3.0", "4", "1600"]
    assert rows["10"] == ["4.0", "5", "2000"]
    assert rows["18"] == ["-", "-", "-"]
    assert out.stdout.splitlines()[-1] == "minutes to +18: not reached, best 12.5 after 4 min"
    assert out.stdout.splitlines()[0].startswith("5 episodes, 2000 agent frames")


def test_reached_last_threshold_and_errors(tmp_path):
    path = tmp_path / "results.txt"
    path.write_text("".join(f"2026-01-01 01:{i:02d}:00, 20, 10\n" for i in range(3)))
    out = run(path, "--window", 1, "--thresholds", 18)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "minutes to +18: 0"
    missing = run(tmp_path / "nope.txt")
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("garbage\n")
    assert run(empty).returncode == 2


def test_rolling_mean_at_equal_frames(tmp_path):
    # 100 steps an episode at frameskip 4: 400 frames each; window 2
    path = tmp_path / "results.txt"
    path.write_text("".join(f"2026-01-01 00:{i:02d}:00, {s}, 100\n" for i, s in enumerate([10, 20, 0, 0])))
    out = run(path, "--window", 2, "--thresholds", 18, "--at-frames", 400, 1000, 1600, 5000)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = {line.split()[0]: line.split(maxsplit=1)[1] for line in lines[lines.index(next(
        x for x in lines if x.lstrip().startswith("at frames"))) + 1:-1]}
    # 400: episode 1, one score so far: mean 10, no full window yet
    assert at["400"].split() == ["10.0", "-", "0.0", "1", "400"]
    # 1000: first reached at episode 3 (1,200 frames): mean of 20 and 0 = 10, best full window so far 15 (episode 2)
    assert at["1000"].split() == ["10.0", "15.0", "2.0", "3", "1200"]
    # 1600: episode 4: mean 0, best still 15
    assert at["1600"].split() == ["0.0", "15.0", "3.0", "4", "1600"]
    assert at["5000"] == "not reached: the file ends at 1600 frames"
    assert lines[-1] == "minutes to +18: not reached, best 15.0 after 1 min"
