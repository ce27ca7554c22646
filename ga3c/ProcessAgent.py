"""ProcessAgent: one process stepping ENVS_PER_AGENT environments; it never imports torch.

Each step it writes its states into its shared observation slot, asks a predictor for (policy, value) by
writing its id into the request pipe, waits for one byte on its own reply pipe, samples the actions, and
steps. Every TIME_MAX steps the next prediction's values bootstrap the n-step returns of the rollout, which
goes to the trainers through a shared experience slot. The acting itself is `ga3c/Rollout.py`'s (the Ray agent
groups use it too); with the LSTM network the environments' recurrent state is the agent's shared (h, c) rows,
which the predictor advances and the agent zeroes when an environment resets. When told to stop, it sends the
partial rollout it holds (so no experience is lost or duplicated) and exits without waiting for the episode to
end.

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
from ga3c.Rollout import Rollout, write_slot


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
        envs_n = cfg.ENVS_PER_AGENT
        seed0 = cfg.SEED + 1_000_003 * self.incarnation + me * envs_n
        envs = [Environment(cfg, seed=seed0 + e) for e in range(envs_n)]
        times = sh.agent_time[me]
        state = (sh.h[me], sh.c[me]) if sh.layout.recurrent else None
        rollout = Rollout(cfg, envs, sh.obs[me], np.random.default_rng(seed0), state,
                          times[sb.A_T_ENV:sb.A_T_ENV + 1])
        rollout.reset()
        clock = time.perf_counter
        loop_start = clock()
        try:
            while True:
                t0 = clock()
                if not self._predict():
                    return
                t1 = clock()
                times[sb.A_T_PREDICT_WAIT] += t1 - t0
                stopping = bool(sh.stop[me])
                if rollout.full or (stopping and rollout.t > 0):
                    if not self._send(rollout.take(sh.value[me])):
                        return
                    times[sb.A_T_SEND] += clock() - t1
                if stopping:
                    return
                if not rollout.act(sh.policy[me], sh.value[me], sh.version[me], self._episode):
                    return
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

    def _send(self, out: dict) -> bool:
        """Writes a rollout (`Rollout.take`) into a free slot and announces it to the trainers."""
        s = self._free_slot()
        if s is None:
            return False
        sh = self.shared
        n = out["steps"]
        write_slot(sh, s, slice(None), out, out["versions"])
        try:
            os.write(self.experience_fd, sb.EXPERIENCE.pack(self.id, s, n))
        except OSError:
            return False
        sh.agent_slot[self.id] = -1
        return True


def run_agent(*args) -> None:
    """Process target (spawn imports this module, not torch)."""
    ProcessAgent(*args).run()
