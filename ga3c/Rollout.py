"""Rollout: the acting loop's one implementation, shared by the agent processes and the Ray agent groups.

It steps E environments given each step's (policy, value, version), holds the rollout's [T, E] buffers, keeps
the episodes' accounting, clips the rewards, flags terminal and time-limit steps, and computes the n-step returns
once the next prediction's value is known (the bootstrap), or with GAE_LAMBDA < 1 the lambda-returns and
the GAE advantages. It imports no torch: agents stay small processes.

Where the observations and the recurrent state live is the caller's: an agent process hands its shared
observation slot and its shared (h, c) rows, so that a predictor reads them in place; a Ray agent group hands
arrays of its own. With a recurrent network (LSTM), an environment's (h, c) is zeroed when it resets, so an
episode's first step starts from zero, and the rollout remembers the state its first step started from (h0, c0):
the predictor updates (h, c) in place, so the state is saved when the step that ends a rollout has been acted on,
which is just before the prediction that starts the next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ga3c import SharedBuffers as sb
from ga3c.Experience import clip_reward, n_step_returns


class Rollout:
    def __init__(self, cfg, envs: Sequence, obs: np.ndarray, rng: np.random.Generator,
                 state: tuple[np.ndarray, np.ndarray] | None = None, env_seconds: np.ndarray | None = None) -> None:
        """envs: the E environments; obs: the [E, ...] array their observations are written to; state: the
        [E, H] (h, c) arrays of their recurrent state (None: a feed-forward network); env_seconds: a 1-element
        array the time spent in the emulators is added to."""
        self.cfg = cfg
        self.envs = list(envs)
        self.obs = obs
        self.rng = rng
        self.state = state
        self.env_seconds = env_seconds
        tmax, n = int(cfg.TIME_MAX), len(self.envs)
        self.tmax = tmax
        self.lam = float(cfg.GAE_LAMBDA)
        self.t = 0
        self.states = np.empty((tmax + 1,) + obs.shape, dtype=obs.dtype)
        self.actions = np.zeros((tmax, n), dtype=np.int64)
        self.rewards = np.zeros((tmax, n), dtype=np.float32)
        self.terminated = np.zeros((tmax, n), dtype=bool)
        self.truncated = np.zeros((tmax, n), dtype=bool)
        self.values = np.zeros((tmax, n), dtype=np.float32)
        self.logp = np.zeros((tmax, n), dtype=np.float32)
        self.versions = np.zeros((tmax, n), dtype=np.int64)
        self.ep_reward = np.zeros(n, dtype=np.float64)
        self.ep_length = np.zeros(n, dtype=np.int64)
        self._rows = np.arange(n)
        if state is not None:
            # the state the rollout being gathered started from, and the one the next rollout starts from
            self.start_state = (np.zeros_like(state[0]), np.zeros_like(state[1]))
            self.next_state = (np.zeros_like(state[0]), np.zeros_like(state[1]))

    def reset(self) -> None:
        """Resets every environment, zeroes their state: the first rollout starts here."""
        for e, env in enumerate(self.envs):
            self.obs[e] = env.reset()
        if self.state is not None:
            for a in self.state + self.start_state:
                a[:] = 0.0
        self.t = 0

    @property
    def full(self) -> bool:
        return self.t == self.tmax

    def act(self, policy: np.ndarray, value: np.ndarray, version: int,
            on_episode: Callable[[float, int], bool]) -> bool:
        """Samples an action per environment from `policy` [E, A], steps every environment and records the step.
        `on_episode(reward, length)` is told of each finished episode; False from it stops here (returns False)."""
        t = self.t
        cum = np.cumsum(policy, axis=1)
        u = self.rng.random(len(self.envs), dtype=np.float32) * cum[:, -1]
        chosen = (cum < u[:, None]).sum(axis=1)
        np.minimum(chosen, policy.shape[1] - 1, out=chosen)
        self.states[t] = self.obs
        self.actions[t] = chosen
        self.values[t] = value
        self.logp[t] = np.log(policy[self._rows, chosen] + 1e-20)
        self.versions[t] = version
        clock = time.perf_counter
        for e, env in enumerate(self.envs):
            t0 = clock()
            obs, reward, term, trunc = env.step(int(chosen[e]))
            if self.env_seconds is not None:
                self.env_seconds[0] += clock() - t0
            self.ep_reward[e] += reward
            self.ep_length[e] += 1
            self.rewards[t, e] = clip_reward(reward, self.cfg.REWARD_MIN, self.cfg.REWARD_MAX)
            self.terminated[t, e] = term
            self.truncated[t, e] = trunc and not term
            if term or trunc:
                if not on_episode(float(self.ep_reward[e]), int(self.ep_length[e])):
                    return False
                self.ep_reward[e] = 0.0
                self.ep_length[e] = 0
                obs = env.reset()
                if self.state is not None:
                    self.state[0][e] = 0.0
                    self.state[1][e] = 0.0
            self.obs[e] = obs
        self.t = t + 1
        if self.state is not None and self.t == self.tmax:
            self.next_state[0][:] = self.state[0]
            self.next_state[1][:] = self.state[1]
        return True

    def restore_start_state(self) -> None:
        """Puts back the state this rollout started from, before its first step is predicted again (a Ray group
        whose bootstrap prediction, which advanced the state, was made with weights it has since replaced)."""
        assert self.t == 0, "only before the rollout's first step"
        self.state[0][:] = self.start_state[0]
        self.state[1][:] = self.start_state[1]

    def take(self, bootstrap: np.ndarray) -> dict[str, np.ndarray]:
        """The rollout's first t steps (views, valid until the next act) with their n-step returns bootstrapped
        from `bootstrap` (V of the observations after them), the observations after them as states[t], and with
        a recurrent network its start state h0, c0; then a new rollout starts. With GAE_LAMBDA < 1 the returns
        are lambda-returns and `advantages` holds the GAE advantages (returns - the values acted with)."""
        n = self.t
        self.states[n] = self.obs
        out = dict(steps=n, states=self.states[:n + 1], actions=self.actions[:n], rewards=self.rewards[:n],
                   done=self.terminated[:n], truncated=self.truncated[:n], values=self.values[:n],
                   logp=self.logp[:n], versions=self.versions[:n],
                   returns=n_step_returns(self.rewards[:n], self.terminated[:n], self.truncated[:n],
                                          self.values[:n], bootstrap, self.cfg.DISCOUNT, self.lam))
        if self.lam != 1.0:
            out["advantages"] = out["returns"] - self.values[:n]
        if self.state is not None:
            out["h0"], out["c0"] = self.start_state
            self.start_state, self.next_state = self.next_state, self.start_state
        self.t = 0
        return out


def write_slot(sh: sb.SharedBuffers, s: int, cols: slice, out: dict, versions) -> None:
    """Copies the columns `cols` of a rollout (`Rollout.take`) into experience slot s."""
    n = out["steps"]
    sh.exp_states[s, :n + 1] = out["states"][:, cols]
    sh.exp_actions[s, :n] = out["actions"][:, cols]
    sh.exp_returns[s, :n] = out["returns"][:, cols]
    if "advantages" in out:
        sh.exp_advantages[s, :n] = out["advantages"][:, cols]
    sh.exp_rewards[s, :n] = out["rewards"][:, cols]
    sh.exp_done[s, :n] = out["done"][:, cols]
    sh.exp_truncated[s, :n] = out["truncated"][:, cols]
    sh.exp_logp[s, :n] = out["logp"][:, cols]
    sh.exp_version[s, :n] = versions if np.ndim(versions) == 0 else versions[:, cols]
    if sh.layout.recurrent:
        sh.exp_h0[s] = out["h0"][cols]
        sh.exp_c0[s] = out["c0"][cols]
