"""scripts/random_score.py: random play through GA3C's own environment wrapper."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import random_score  # noqa: E402


def test_cartpole_scores_equal_lengths():
    from ga3c.settings import parse_settings

    cfg = parse_settings(["ATARI_GAME=CartPole-v1"])
    scores, lengths = random_score.random_scores(cfg, 5, seed=3)
    assert len(scores) == 5
    assert scores == [float(n) for n in lengths]  # CartPole pays 1 a step
    assert all(8 <= n < 200 for n in lengths), lengths  # random play falls within a few dozen steps


def test_pong_prints_a_summary():
    out = subprocess.run([sys.executable, str(SCRIPTS / "random_score.py"), "--episodes", "1",
                          "ATARI_GAME=PongDeterministic-v4"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    m = re.search(r"random play, 1 episodes: mean (-?[\d.]+) .* mean length (\d+) steps", out.stdout)
    assert m, out.stdout
    assert -21 <= float(m.group(1)) <= -15 and int(m.group(2)) > 500, out.stdout  # random Pong loses 21-x, slowly
