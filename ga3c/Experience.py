"""Experience: reward clipping and the n-step returns an agent computes for each rollout."""

from __future__ import annotations

import numpy as np


def clip_reward(reward: float, reward_min: float, reward_max: float) -> float:
    """The original's reward clipping to [REWARD_MIN, REWARD_MAX]."""
    return float(min(max(reward, reward_min), reward_max))


def n_step_returns(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, values: np.ndarray,
                   bootstrap: np.ndarray, discount: float) -> np.ndarray:
    """n-step returns of a rollout of T steps for E environments, arrays shaped [T, E].

    R_t = r_t + discount * R_{t+1}, backwards from R_T = bootstrap (V of the state after the last step). At a
    terminal step R_t = r_t: unlike the original, the terminal step's reward is trained on. At a step cut by a
    time limit (truncated) the episode did not end, so the chain restarts from V(s_t), the closest value known
    for the lost next state. `rewards` are already clipped.
    """
    steps = rewards.shape[0]
    out = np.empty(rewards.shape, dtype=np.float32)
    running = np.asarray(bootstrap, dtype=np.float64).copy()
    for t in range(steps - 1, -1, -1):
        running = np.where(truncated[t], values[t], running)
        running = np.where(terminated[t], 0.0, running)
        running = rewards[t] + discount * running
        out[t] = running
    return out
