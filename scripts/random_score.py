"""The score of uniformly random play, the baseline a learning curve is read against.

    python scripts/random_score.py --episodes 30 [--config FILE] [KEY=VALUE ...]   (e.g. ATARI_GAME=Boxing)

Plays whole episodes of the configured game with the environment GA3C trains on (same id mapping, frameskip,
sticky actions and time limit), one uniformly random action per agent step, and prints the mean, the standard
deviation, the min and the max of the raw (unclipped) episode scores, and the mean episode length.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np


def random_scores(cfg, episodes: int, seed: int) -> tuple[list[float], list[int]]:
    """Raw scores and lengths (agent steps) of `episodes` episodes of uniformly random play."""
    from ga3c.Environment import Environment

    env = Environment(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    scores, lengths = [], []
    try:
        for _ in range(episodes):
            env.reset()
            steps, done = 0, False
            while not done:
                _, _, terminated, truncated = env.step(int(rng.integers(env.num_actions)))
                steps += 1
                done = terminated or truncated
            scores.append(env.total_reward)
            lengths.append(steps)
    finally:
        env.close()
    return scores, lengths


def main(argv: list[str] | None = None) -> int:
    from ga3c.settings import parse_settings

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    args, rest = p.parse_known_args(argv)
    cfg = parse_settings(rest)
    scores, lengths = random_scores(cfg, args.episodes, args.seed)
    std = statistics.stdev(scores) if len(scores) > 1 else 0.0
    print(f"{cfg.ATARI_GAME}: random play, {len(scores)} episodes: mean {statistics.mean(scores):.2f} "
          f"std {std:.2f} min {min(scores):g} max {max(scores):g}; mean length {statistics.mean(lengths):.0f} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
