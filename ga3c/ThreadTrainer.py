"""ThreadTrainer: gathers rollouts until the batch is larger than TRAINING_MIN_BATCH_SIZE, then trains.

Several trainers train the one shared model at once, as the original: each computes its gradients on its own
and the optimizer step is serialised inside NetworkVP. Each rollout is copied out of its shared slot into
tensors allocated once, and the slot is released at once, so the agents never wait on a training step.
Every transition carries the model version that acted on it; the lag (updates between acting and training)
is counted here, and with MAX_POLICY_LAG experience older than that is dropped and counted.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from ga3c import SharedBuffers as sb


class ThreadTrainer(threading.Thread):
    def __init__(self, server, thread_id: int) -> None:
        super().__init__(name=f"trainer-{thread_id}", daemon=True)
        self.server = server
        self.exit_flag = False

    def run(self) -> None:
        try:
            self._train_loop()
        except BaseException as exc:  # noqa: BLE001 - reported to the server, which stops the run cleanly
            self.server.component_failed(self.name, exc)

    def _train_loop(self) -> None:
        srv, cfg = self.server, self.server.cfg
        sh = srv.shared
        lay = sh.layout
        state_shape = tuple(lay.state_shape)
        capacity = cfg.TRAINING_MIN_BATCH_SIZE + lay.time_max * lay.envs
        pin = srv.device.type == "cuda"
        states = torch.empty((capacity,) + state_shape, dtype=torch.from_numpy(sh.obs[:0]).dtype, pin_memory=pin)
        actions = torch.empty(capacity, dtype=torch.int64, pin_memory=pin)
        returns = torch.empty(capacity, dtype=torch.float32, pin_memory=pin)
        states_np, actions_np, returns_np = states.numpy(), actions.numpy(), returns.numpy()
        versions = np.empty(capacity, dtype=np.int64)
        clock = time.perf_counter
        while True:
            n = 0
            wait = copy = 0.0
            t0 = clock()
            while n <= cfg.TRAINING_MIN_BATCH_SIZE:
                record = srv.next_experience(wait=not self.exit_flag)
                t1 = clock()
                wait += t1 - t0
                t0 = t1
                if record is None:
                    if self.exit_flag:
                        break
                    continue
                _agent, slot, steps = record
                count = steps * lay.envs
                end = n + count
                states_np[n:end] = sh.exp_states[slot, :steps].reshape((count,) + state_shape)
                actions_np[n:end] = sh.exp_actions[slot, :steps].reshape(count)
                returns_np[n:end] = sh.exp_returns[slot, :steps].reshape(count)
                versions[n:end] = sh.exp_version[slot, :steps].reshape(count)
                srv.release_slot(slot)
                n = end
                t0 = clock()
                copy += t0 - t1
            if n:
                self._train(states, actions, returns, versions, n)
            with srv.counter_lock:
                sh.counters[sb.C_T_TRAIN_WAIT] += wait
                sh.counters[sb.C_T_TRAIN_COPY] += copy
                sh.counters[sb.C_T_TRAIN_MODEL] += clock() - t0
            if not n and self.exit_flag:
                return

    def _train(self, states, actions, returns, versions, n: int) -> None:
        srv, cfg = self.server, self.server.cfg
        sh = srv.shared
        lag = srv.network.version - versions[:n]
        dropped = 0
        if cfg.MAX_POLICY_LAG > 0:
            keep = lag <= cfg.MAX_POLICY_LAG
            dropped = int(n - keep.sum())
            if dropped:
                index = torch.from_numpy(np.flatnonzero(keep))
                states, actions, returns = states[index], actions[index], returns[index]
                lag = lag[keep]
        used = n - dropped
        scalars = None
        if used:
            scalars = srv.network.train(states[:used], actions[:used], returns[:used], srv.learning_rate, srv.beta)
        with srv.counter_lock:
            c = sh.counters
            c[sb.C_DROPPED] += dropped
            if used:
                c[sb.C_UPDATES] += 1
                c[sb.C_TRAIN_BATCHES] += 1
                c[sb.C_TRAINED] += used
                c[sb.C_LAG_SUM] += float(lag.sum())
                c[sb.C_LAG_MAX] = max(c[sb.C_LAG_MAX], float(lag.max()))
        if scalars is not None:
            srv.training_scalars(scalars, float(lag.mean()), int(lag.max()))
