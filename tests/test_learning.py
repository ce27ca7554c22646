"""Learning beyond CartPole: Acrobot-v1 with the classic preset (configs/classic.toml), within an agent-step budget.

Random play scores about -500 in Acrobot-v1 (the 500-step time limit, -1 a step): a rolling mean of TARGET over
20 episodes needs a policy that pumps energy into the pendulum. The budget is in agent steps (MAX_STEPS), so a
loaded machine slows the test down and does not fail it; the wall-clock limit only guards against a hang. The run
is interrupted (SIGINT) as soon as the results file shows the threshold; one retry with another seed at most.
docs/results/classic-cpu.md has the agent steps the preset needed per seed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    REPO,
    assert_accounted,
    leftover_processes,
    result_scores,
    rolling_means,
    start_ga3c,
    steps_to_reach,
    stop_when_learned,
    summary,
    tagged_env,
    tail,
)

TARGET, WINDOW, MAX_STEPS = -150.0, 20, 300_000
HANG_GUARD = 900  # seconds; about 60 s on 2 idle cores
ACROBOT = ["--config", str(REPO / "configs" / "classic.toml"), "ATARI_GAME=Acrobot-v1", "SAVE_MODELS=False",
           f"MAX_STEPS={MAX_STEPS}", f"STAT_ROLLING_MEAN_WINDOW={WINDOW}"]
SEEDS = (1, 2)


def learn_acrobot(folder: Path, tag: str, seed: int) -> tuple[int | None, list[float]]:
    """One attempt: runs until the rolling mean reaches TARGET (then SIGINT) or MAX_STEPS ends the run;
    returns (agent steps of the finished episodes when TARGET was reached or None, rolling means)."""
    folder.mkdir()
    proc, out_path, err_path = start_ga3c([*ACROBOT, f"SEED={seed}"], folder, tagged_env(tag))
    results = folder / "results.txt"
    stop_when_learned(proc, results, WINDOW, TARGET, 120, "Acrobot", err_path, hang_guard=HANG_GUARD)
    out, err = out_path.read_text(), err_path.read_text()
    assert proc.returncode == 0, f"exit status {proc.returncode}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}"
    left = leftover_processes(tag)
    assert not left, "processes left behind by the run:\n" + "\n".join(left)
    scores = result_scores(results)
    assert all(-500 <= s <= 0 for s in scores), [s for s in scores if not -500 <= s <= 0][:5]
    assert_accounted(summary(err), err)
    return steps_to_reach(results, WINDOW, TARGET), rolling_means(scores, WINDOW)


def test_acrobot_learns(tmp_path, tag):
    curves = []
    for attempt, seed in enumerate(SEEDS):
        steps, means = learn_acrobot(tmp_path / f"attempt{attempt}", tag, seed)
        if steps is not None:
            print(f"Acrobot: rolling mean >= {TARGET} after {steps} agent steps (seed {seed})")
            return
        every = max(1, len(means) // 60)
        curves.append(f"seed {seed}, every {every} episode(s): {[round(m) for m in means[::every]]}")
    pytest.fail(f"Acrobot-v1 did not reach a rolling mean of {TARGET} over {WINDOW} episodes within {MAX_STEPS} agent "
                f"steps in {len(SEEDS)} attempts; rolling means:\n" + "\n".join(curves))
