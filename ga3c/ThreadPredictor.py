"""ThreadPredictor: serves the agents' prediction requests in batches, as the original.

It waits for one request, then takes every request already queued, up to PREDICTION_BATCH_SIZE states, in one
read of the request pipe; gathers those agents' states from shared memory into one (pinned, on a GPU) staging
tensor; runs one forward pass; writes policy, value and the model version the pass started from into the agents'
reply arrays; and wakes each agent with one byte on its reply pipe. With the LSTM network it gathers each
environment's state (h, c) with its observation, runs one step of the LSTM from it and writes the next state
back in place.
"""

from __future__ import annotations

import os
import select
import threading
import time

import numpy as np
import torch

from ga3c import SharedBuffers as sb


class ThreadPredictor(threading.Thread):
    def __init__(self, server, thread_id: int) -> None:
        super().__init__(name=f"predictor-{thread_id}", daemon=True)
        self.server = server
        self.exit_flag = False

    def run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - reported to the server, which stops the run cleanly
            self.server.component_failed(self.name, exc)

    def _serve(self) -> None:
        srv = self.server
        sh = srv.shared
        envs = sh.layout.envs
        state_shape = tuple(sh.layout.state_shape)
        max_requests = max(1, srv.cfg.PREDICTION_BATCH_SIZE // envs)
        obs = torch.from_numpy(sh.obs)
        pin = srv.device.type == "cuda"
        staging = torch.empty((max_requests, envs) + state_shape, dtype=obs.dtype, pin_memory=pin)
        size = sh.layout.recurrent
        if size:  # the LSTM's state of each environment, gathered beside its observation
            hc = (torch.from_numpy(sh.h), torch.from_numpy(sh.c))
            hc_staging = tuple(torch.empty((max_requests, envs, size), pin_memory=pin) for _ in range(2))
        fd = srv.request_fd
        clock = time.perf_counter
        c = sh.counters
        while not self.exit_flag:
            t0 = clock()
            with srv.request_lock:
                if not select.select([fd], [], [], 0.05)[0]:
                    continue
                try:
                    data = os.read(fd, sb.REQUEST.size * max_requests)
                except BlockingIOError:
                    continue
            t1 = clock()
            ids = np.frombuffer(data, dtype="<i4").astype(np.int64)
            n = len(ids)
            batch = staging[:n]
            torch.index_select(obs, 0, torch.from_numpy(ids), out=batch)
            t2 = clock()
            # the version of the weights the forward pass starts from: an update landing during it must not pass
            # for the one that acted (the policy lag would be undercounted and MAX_POLICY_LAG would keep stale steps)
            version = srv.network.version
            states = batch.view((n * envs,) + state_shape)
            if size:
                index = torch.from_numpy(ids)
                for src, dst in zip(hc, hc_staging, strict=True):
                    torch.index_select(src, 0, index, out=dst[:n])
                policy, value, (h1, c1) = srv.network.predict(
                    states, (hc_staging[0][:n].view(n * envs, size), hc_staging[1][:n].view(n * envs, size)))
                sh.h[ids] = h1.numpy().reshape(n, envs, size)
                sh.c[ids] = c1.numpy().reshape(n, envs, size)
            else:
                policy, value = srv.network.predict(states)
            t3 = clock()
            sh.policy[ids] = policy.numpy().reshape(n, envs, -1)
            sh.value[ids] = value.numpy().reshape(n, envs)
            sh.version[ids] = version
            for agent_id in ids:
                srv.reply(int(agent_id))
            t4 = clock()
            with srv.counter_lock:
                c[sb.C_PREDICTIONS] += n * envs
                c[sb.C_PREDICT_BATCHES] += 1
                c[sb.C_T_PREDICT_WAIT] += t1 - t0
                c[sb.C_T_PREDICT_GATHER] += t2 - t1
                c[sb.C_T_PREDICT_MODEL] += t3 - t2
                c[sb.C_T_PREDICT_REPLY] += t4 - t3
