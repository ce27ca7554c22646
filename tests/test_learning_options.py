"""Real CartPole runs with the opt-in learning options (GAE, advantage normalisation, value-loss weight, mean
losses, Adam, PPO's clipped surrogate and epochs): each ends cleanly with every transition accounted for, saves
Adam's state in its checkpoint (one Adam step per update, every epoch an update) and resumes from it, and play
loads it. Their arithmetic is tested against hand-computed values in test_experience.py (GAE), test_network.py
(losses, Adam, PPO), test_data_path.py, test_vtrace.py, test_lstm.py and test_ray_cluster.py (through the paths)."""

from __future__ import annotations

import pytest
from conftest import (
    CARTPOLE,
    assert_accounted,
    latest_checkpoint,
    leftover_processes,
    run_ga3c,
    summary,
    tagged_env,
    tail,
)

OPTIONS = ["GAE_LAMBDA=0.95", "NORMALIZE_ADVANTAGES=True", "VALUE_LOSS_COEF=0.5", "LOSS_REDUCTION=mean",
           "OPTIMIZER=adam", "LEARNING_RATE_START=0.001", "LEARNING_RATE_END=0.001", "PPO_CLIP=0.2", "PPO_EPOCHS=3",
           "WEIGHT_INIT=orthogonal"]


@pytest.mark.parametrize("network", ["feedforward", "lstm"])
def test_cartpole_runs_and_resumes_with_every_option(tmp_path, tag, network):
    base = [*CARTPOLE, *OPTIONS, f"NETWORK_TYPE={network}", "LSTM_SIZE=32", "MLP_HIDDEN_SIZE=32", "AGENTS=3",
            "ENVS_PER_AGENT=2", "TIME_MAX=8", "TRAINING_MIN_BATCH_SIZE=32",
            "MAX_POLICY_LAG=9"]  # 3 batches of 3 updates each (PPO_EPOCHS)
    env = tagged_env(tag)
    rc, out, err = run_ga3c([*base, "MAX_STEPS=3000"], tmp_path, timeout=180, env=env)
    assert rc == 0, f"exit status {rc}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}"
    left = leftover_processes(tag)
    assert not left, "processes left behind by the run:\n" + "\n".join(left)
    s = summary(err)
    assert_accounted(s, err)
    assert s["steps"] >= 3000 and s["trained"] > 0 and s["updates"] > 0, s
    first = latest_checkpoint(tmp_path / "checkpoints")
    state = first["network"]
    assert state["optimizer"] == "adam"
    adam = state["optimizers"][0]["state"]
    assert adam and all(float(v["step"]) == first["counters"]["updates"] for v in adam.values())  # every epoch

    rc, out, err = run_ga3c([*base, "LOAD_CHECKPOINT=True", "MAX_STEPS=5000"], tmp_path, timeout=180, env=env)
    assert rc == 0 and "resuming from" in err and "starts afresh" not in err, tail(err)
    assert_accounted(summary(err), err)
    again = latest_checkpoint(tmp_path / "checkpoints")
    updates = again["counters"]["updates"]
    assert updates > first["counters"]["updates"]
    assert all(float(v["step"]) == updates for v in again["network"]["optimizers"][0]["state"].values())

    # play takes the checkpoint's optimizer (nothing trains there): no warning about a changed optimizer
    rc, out, err = run_ga3c(["PLAY_MODE=True", "ATARI_GAME=CartPole-v1", "DEVICE=cpu", "PLAY_EPISODES=1",
                             "VIDEO_PATH=play.mp4"], tmp_path, env=env)
    assert rc == 0, tail(err)
    assert "using the checkpoint's OPTIMIZER='adam'" in err and "OPTIMIZER changed" not in err, tail(err)
    assert out.count("episode ") == 1
