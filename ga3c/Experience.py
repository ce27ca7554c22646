"""Experience: reward clipping and the returns an agent computes for each rollout (n-step, or lambda-returns for
generalised advantage estimation)."""

from __future__ import annotations

import numpy as np


def clip_reward(reward: float, reward_min: float, reward_max: float) -> float:
    """The original's reward clipping to [REWARD_MIN, REWARD_MAX]."""
    return float(min(max(reward, reward_min), reward_max))


def n_step_returns(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, values: np.ndarray,
                   bootstrap: np.ndarray, discount: float, lam: float = 1.0) -> np.ndarray:
    """n-step returns of a rollout of T steps for E environments, arrays shaped [T, E].

    R_t = r_t + discount * R_{t+1}, backwards from R_T = bootstrap (V of the state after the last step). At a
    terminal step R_t = r_t: unlike the original, the terminal step's reward is trained on. At a step cut by a
    time limit (truncated) the episode did not end, so the chain restarts from V(s_t), the closest value known
    for the lost next state. `rewards` are already clipped.

    With lam < 1 (GAE_LAMBDA), the lambda-returns of generalised advantage estimation (Schulman et al. 2016,
    "High-dimensional continuous control using generalized advantage estimation", eq. 16 and section 3):
    R_t = r_t + discount * ((1 - lam) * V_{t+1} + lam * R_{t+1}), with the same ends (terminal: V = R = 0,
    truncated: V = R = V(s_t), last step: V = R = bootstrap). R_t - V(s_t) is then the GAE advantage
    sum_l (discount * lam)^l * delta_{t+l}, delta_t = r_t + discount * V_{t+1} - V(s_t). With lam = 1 the
    arithmetic is the n-step returns' own, to the bit.
    """
    steps = rewards.shape[0]
    out = np.empty(rewards.shape, dtype=np.float32)
    running = np.asarray(bootstrap, dtype=np.float64).copy()
    next_value = running
    for t in range(steps - 1, -1, -1):
        running = np.where(truncated[t], values[t], running)
        running = np.where(terminated[t], 0.0, running)
        if lam != 1.0:
            next_value = np.where(truncated[t], values[t], next_value)
            next_value = np.where(terminated[t], 0.0, next_value)
            running = (1.0 - lam) * next_value + lam * running
            next_value = values[t]
        running = rewards[t] + discount * running
        out[t] = running
    return out
