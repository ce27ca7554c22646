"""scripts/compare_vtrace.py: its arithmetic on hand-built results, and two real CartPole runs end to end."""

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import compare_vtrace as cv  # noqa: E402


def rows(scores, lengths):
    t0 = datetime(2026, 1, 1)
    return [(t0 + timedelta(seconds=10 * i), float(s), n) for i, (s, n) in enumerate(zip(scores, lengths, strict=True))]


def test_first_reach_and_best_mean():
    r = rows([10, 30, 50, 20], [10, 30, 50, 20])
    # window 2: means 20 (ep 2), 40 (ep 3), 35 (ep 4); 40 first at episode 3, 20 s in, 10+30+50 steps
    assert cv.first_reach(r, 2, 40) == (20.0, 90)
    assert cv.first_reach(r, 2, 41) is None
    assert cv.best_mean(r, 2) == 40.0
    assert cv.best_mean(r[:1], 2) is None


def test_table_medians_over_reached_runs():
    runs = [dict(mode="none", seed=s, seconds=sec, steps=st, best=b, lag_mean=lm, lag_max=9, steps_per_s=100)
            for s, sec, st, b, lm in [(1, 10.0, 100, 200.0, 2.0), (2, 30.0, 300, 210.0, 4.0),
                                      (3, None, None, 90.0, 6.0)]]
    runs.append(dict(mode="vtrace", seed=1, seconds=None, steps=None, best=None, lag_mean=1.0, lag_max=2,
                     steps_per_s=50))
    lines = cv.table(runs, 195)
    assert lines[0].startswith("| mode | seed | seconds to 195 | steps to 195 |")
    assert lines[4] == "| none | 3 | - | - | 90.0 | 6.0 / 9 | 100 |"
    assert lines[6] == "| **none: median** | 2/3 reached | 20 | 200 | 200.0 | 4.0 | 100 |"
    assert lines[7] == "| **vtrace: median** | 0/1 reached | - | - | - | 1.0 | 50 |"


def test_two_real_cartpole_runs(tmp_path):
    # a rolling mean of 30 over 5 episodes: random play gets there too, so both runs stop early by SIGINT
    out = subprocess.run([sys.executable, str(SCRIPTS / "compare_vtrace.py"), "--seeds", "1", "--target", "30",
                          "--window", "5", "--budget", "60", "--out", str(tmp_path), "ATARI_GAME=CartPole-v1",
                          "DEVICE=cpu", "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "DYNAMIC_SETTINGS=False"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 2 + 2, out.stdout  # header, rule, two runs, two medians
    for mode in ("none", "vtrace"):
        row = next(line for line in table if line.startswith(f"| {mode} | 1 |")).split("|")
        assert row[3].strip() != "-" and float(row[3]) < 60, row  # reached, within the budget
        assert (tmp_path / f"{mode}-seed1" / "results.txt").stat().st_size > 0
        assert "summary:" in (tmp_path / f"{mode}-seed1" / "stderr.txt").read_text()
