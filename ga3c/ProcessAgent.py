"""ProcessAgent: one process stepping ENVS_PER_AGENT environments; it never imports torch.

Each step it writes its states into its shared observation slot, asks a predictor for (policy, value) by
writing its id into the request pipe, waits for one byte on its own reply pipe, samples the actions, and
steps. Every TIME_MAX steps the next prediction's values bootstrap the n-step returns of the rollout, which
goes to the trainers through a shared experience slot. When told to stop, it sends the partial rollout it
holds (so no experience is lost or duplicated) and exits without waiting for the episode to end.

It may also die at any moment (killed, or its environment raises): the read that takes an experience slot writes
its index into shared memory, so that the server gives the slot back, and it writes each finished episode into
the episode pipe with one atomic write, so that its death cannot leave a lock held or a record torn. When the
server dies, the agent's next read or write of a pipe fails (end of file, broken pipe) and it exits."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from ga3c import SharedBuffers as sb
from ga3c.Environment import Environment
from ga3c.Experience import clip_reward, n_step_returns


class ProcessAgent:
    """Runs in its own process: see `run`."""

    def __init__(self, agent_id: int, incarnation: int, cfg, shared: sb.SharedBuffers, request_conn, reply_conn,
                 free_conn, experience_conn, episode_conn) -> None:
        self.id = agent_id
        self.incarnation = incarnation
        self.cfg = cfg
        self.shared = shared
        self.request_fd = request_conn.fileno()
        self.reply_fd = reply_conn.fileno()
        self.free_fd = free_conn.fileno()
        self.experience_fd = experience_conn.fileno()
        self.episode_fd = episode_conn.fileno()
        # keep the connections alive so their file descriptors stay open
        self._conns = (request_conn, reply_conn, free_conn, experience_conn, episode_conn)

    def _predict(self) -> bool:
        """Asks for a prediction of the states in the slot; False when the server is gone."""
        try:
            os.write(self.request_fd, sb.REQUEST.pack(self.id))
            return len(os.read(self.reply_fd, 1)) == 1
        except OSError:
            return False

    def _free_slot(self) -> int | None:
        """Takes a free experience slot (waits while MAX_QUEUE_SIZE rollouts wait for the trainers); None: server
        gone. The count goes up first, then the slot's index is read straight into the agent's shared note, so
        that the read that takes the slot also records it: a death at any instruction leaves a note the server
        can trust (see SharedBuffers)."""
        sh, me = self.shared, self.id
        sh.agent_taken[me] += 1
        try:
            got = os.readv(self.free_fd, [sh.agent_slot[me:me + 1]])
        except OSError:
            return None
        return int(sh.agent_slot[me]) if got == sb.SLOT.size else None

    def run(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us in order
        signal.signal(signal.SIGTERM, lambda *_: self.shared.stop.__setitem__(self.id, 1))
        cfg, sh, me = self.cfg, self.shared, self.id
        if sh.stop[me]:  # told to stop while it was starting
            return
        envs_n, tmax = cfg.ENVS_PER_AGENT, cfg.TIME_MAX
        seed0 = cfg.SEED + 1_000_003 * self.incarnation + me * envs_n
        rng = np.random.default_rng(seed0)
        envs = [Environment(cfg, seed=seed0 + e) for e in range(envs_n)]
        obs = sh.obs[me]
        for e, env in enumerate(envs):
            obs[e] = env.reset()

        # local rollout buffers, [T, E]
        states = np.empty((tmax + 1,) + obs.shape, dtype=obs.dtype)
        actions = np.zeros((tmax, envs_n), dtype=np.int64)
        rewards = np.zeros((tmax, envs_n), dtype=np.float32)
        terminated = np.zeros((tmax, envs_n), dtype=bool)
        truncated = np.zeros((tmax, envs_n), dtype=bool)
        values = np.zeros((tmax, envs_n), dtype=np.float32)
        logp = np.zeros((tmax, envs_n), dtype=np.float32)
        versions = np.zeros((tmax, envs_n), dtype=np.int64)
        ep_reward = np.zeros(envs_n, dtype=np.float64)
        ep_length = np.zeros(envs_n, dtype=np.int64)
        rows = np.arange(envs_n)
        times = sh.agent_time[me]
        t = 0
        clock = time.perf_counter
        loop_start = clock()
        try:
            while True:
                t0 = clock()
                if not self._predict():
                    return
                t1 = clock()
                times[sb.A_T_PREDICT_WAIT] += t1 - t0
                policy = sh.policy[me]
                value = sh.value[me]
                stopping = bool(sh.stop[me])
                if t == tmax or (stopping and t > 0):
                    if not self._send(t, states, obs, actions, rewards, terminated, truncated, values, logp,
                                      versions, value):
                        return
                    t = 0
                    times[sb.A_T_SEND] += clock() - t1
                if stopping:
                    return
                cum = np.cumsum(policy, axis=1)
                u = rng.random(envs_n, dtype=np.float32) * cum[:, -1]
                chosen = (cum < u[:, None]).sum(axis=1)
                np.minimum(chosen, policy.shape[1] - 1, out=chosen)
                states[t] = obs
                actions[t] = chosen
                values[t] = value
                logp[t] = np.log(policy[rows, chosen] + 1e-20)
                versions[t] = sh.version[me]
                for e, env in enumerate(envs):
                    t2 = clock()
                    state, reward, term, trunc = env.step(int(chosen[e]))
                    times[sb.A_T_ENV] += clock() - t2
                    ep_reward[e] += reward
                    ep_length[e] += 1
                    rewards[t, e] = clip_reward(reward, cfg.REWARD_MIN, cfg.REWARD_MAX)
                    terminated[t, e] = term
                    truncated[t, e] = trunc and not term
                    if term or trunc:
                        if not self._episode(float(ep_reward[e]), int(ep_length[e])):
                            return
                        ep_reward[e] = 0.0
                        ep_length[e] = 0
                        state = env.reset()
                    obs[e] = state
                t += 1
                sh.agent_steps[me] += envs_n
        finally:
            times[sb.A_T_TOTAL] += clock() - loop_start
            times[sb.A_T_PREPROCESS] += sum(env.preprocess_seconds for env in envs)
            for env in envs:
                env.close()

    def _episode(self, reward: float, length: int) -> bool:
        """Reports a finished episode to the stats process; False when it is gone."""
        try:
            os.write(self.episode_fd, sb.EPISODE.pack(time.time(), self.id, reward, length))
        except OSError:
            return False
        return True

    def _send(self, n, states, obs, actions, rewards, terminated, truncated, values, logp, versions,
              bootstrap) -> bool:
        """Writes the first n steps of the rollout into a free slot and announces it to the trainers."""
        s = self._free_slot()
        if s is None:
            return False
        sh = self.shared
        returns = n_step_returns(rewards[:n], terminated[:n], truncated[:n], values[:n], bootstrap,
                                 self.cfg.DISCOUNT)
        sh.exp_states[s, :n] = states[:n]
        sh.exp_states[s, n] = obs
        sh.exp_actions[s, :n] = actions[:n]
        sh.exp_returns[s, :n] = returns
        sh.exp_rewards[s, :n] = rewards[:n]
        sh.exp_done[s, :n] = terminated[:n]
        sh.exp_truncated[s, :n] = truncated[:n]
        sh.exp_logp[s, :n] = logp[:n]
        sh.exp_version[s, :n] = versions[:n]
        try:
            os.write(self.experience_fd, sb.EXPERIENCE.pack(self.id, s, n))
        except OSError:
            return False
        sh.agent_slot[self.id] = -1
        return True


def run_agent(*args) -> None:
    """Process target (spawn imports this module, not torch)."""
    ProcessAgent(*args).run()
