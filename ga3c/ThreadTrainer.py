"""ThreadTrainer: gathers rollouts until the batch is larger than TRAINING_MIN_BATCH_SIZE, then trains.

Several trainers train the one shared model at once, as the original: each computes its gradients on its own
and the optimizer step is serialised inside NetworkVP. Each rollout is copied out of its shared slot into
tensors allocated once, and the slot is released at once, so the agents never wait on a training step.
Every transition carries the model version that acted on it; the lag (updates between acting and training)
is counted here, and with MAX_POLICY_LAG experience older than that is dropped and counted.

With POLICY_LAG_CORRECTION='vtrace' (IMPALA's off-policy correction, `ga3c/vtrace.py`), or with the LSTM
network (NETWORK_TYPE='lstm', which unrolls each rollout from the state it started from), the rollouts stay
time-major: each is copied with its bootstrap state, and at training time the rollouts of equal length form a
[T, B] block (B = rollouts x envs; rollouts cut short when an agent stops have their own, shorter, block). The
current network's logits and values of every state, bootstrap states included, are computed without gradients,
then the V-trace targets; the training step fits V to vs and uses the V-trace advantages in the policy loss,
all blocks in one update. MAX_POLICY_LAG then drops, in each rollout, every step up to its last stale one (the
trace needs a contiguous run of steps up to the bootstrap state): the rest of the rollout is trained on and the
dropped transitions are counted as in the faithful path. As versions only grow along a rollout, this drops the
same transitions as the faithful path. The rollouts' own n-step returns are not used by V-trace.

With PPO_CLIP > 0 (both paths) each transition's log mu(a), as the agent computed it when acting, goes to the
training step with it: PPO's ratio is taken against the policy that acted, however stale (Sample Factory's APPO).

With GAE_LAMBDA < 1 (generalised advantage estimation, both paths) the rollouts' returns are lambda-returns, the
value targets, and their GAE advantages, computed by the agent with the values it acted with, are the policy
loss's advantages (instead of the returns minus the current network's values).

The LSTM network trains by truncated back-propagation through each block: it is unrolled from the rollouts'
stored start states, the state zeroed after every terminal or time-limit step (not-done masks), as the agents
zeroed it. When MAX_POLICY_LAG drops a stale prefix of a rollout, the state at the first kept step is that of
the current network unrolled over the dropped steps without gradient (`_start_states`).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from ga3c import SharedBuffers as sb
from ga3c.NetworkVP import action_logp
from ga3c.vtrace import vtrace_targets


class ThreadTrainer(threading.Thread):
    def __init__(self, server, thread_id: int) -> None:
        super().__init__(name=f"trainer-{thread_id}", daemon=True)
        self.server = server
        self.exit_flag = False  # finish the batch being gathered (without waiting for more), train it, exit
        self.drain = False  # with exit_flag: train on everything queued before exiting (the run's end)

    def run(self) -> None:
        try:
            if self.server.cfg.POLICY_LAG_CORRECTION == 'vtrace' or self.server.network.recurrent_size:
                self._sequence_loop()
            else:
                self._train_loop()
        except BaseException as exc:  # noqa: BLE001 - reported to the server, which stops the run cleanly
            self.server.component_failed(self.name, exc)

    def _loop(self, take, train) -> None:
        """Gathers rollouts until the batch is larger than TRAINING_MIN_BATCH_SIZE, trains, and again.

        `take(slot, steps, n)` copies one rollout out of its slot as the batch's next transitions (n so far);
        `train(n)` trains on the batch of n transitions. Once told to exit, no more waiting: the batch being
        gathered is trained on, and with `drain` every record still queued too."""
        srv, cfg = self.server, self.server.cfg
        sh = srv.shared
        envs = sh.layout.envs
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
                take(slot, steps, n)
                srv.release_slot(slot)
                n += steps * envs
                t0 = clock()
                copy += t0 - t1
            if n and cfg.TRAIN_MODELS:
                train(n)
            elif n:  # TRAIN_MODELS=False (the original's switch): the agents play, nothing is trained on
                self._count(n, 0, None, None)
            with srv.counter_lock:
                sh.counters[sb.C_T_TRAIN_WAIT] += wait
                sh.counters[sb.C_T_TRAIN_COPY] += copy
                sh.counters[sb.C_T_TRAIN_MODEL] += clock() - t0
            if self.exit_flag and (not n or not self.drain):
                return

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
        gae, ppo = cfg.GAE_LAMBDA != 1.0, cfg.PPO_CLIP > 0
        advantages = torch.empty(capacity if gae else 0, dtype=torch.float32, pin_memory=pin)
        logp = torch.empty(capacity if ppo else 0, dtype=torch.float32, pin_memory=pin)
        advantages_np, logp_np = advantages.numpy(), logp.numpy()

        def take(slot: int, steps: int, n: int) -> None:
            count = steps * lay.envs
            end = n + count
            states_np[n:end] = sh.exp_states[slot, :steps].reshape((count,) + state_shape)
            actions_np[n:end] = sh.exp_actions[slot, :steps].reshape(count)
            returns_np[n:end] = sh.exp_returns[slot, :steps].reshape(count)
            versions[n:end] = sh.exp_version[slot, :steps].reshape(count)
            if gae:
                advantages_np[n:end] = sh.exp_advantages[slot, :steps].reshape(count)
            if ppo:
                logp_np[n:end] = sh.exp_logp[slot, :steps].reshape(count)

        self._loop(take, lambda n: self._train(states, actions, returns, versions, n, advantages if gae else None,
                                               logp if ppo else None))

    def _train(self, states, actions, returns, versions, n: int, advantages: torch.Tensor | None = None,
               logp: torch.Tensor | None = None) -> None:
        """Trains on the first n transitions gathered (with GAE, on their GAE advantages too; with PPO_CLIP, on
        the acting policy's log-probabilities too)."""
        srv, cfg = self.server, self.server.cfg
        lag = srv.network.version - versions[:n]
        dropped = 0
        if cfg.MAX_POLICY_LAG > 0:
            keep = lag <= cfg.MAX_POLICY_LAG
            dropped = int(n - keep.sum())
            if dropped:
                index = torch.from_numpy(np.flatnonzero(keep))
                states, actions, returns = states[index], actions[index], returns[index]
                if advantages is not None:
                    advantages = advantages[index]
                if logp is not None:
                    logp = logp[index]
                lag = lag[keep]
        used = n - dropped
        scalars = None
        if used:
            extra = {} if logp is None else dict(behaviour_logp=logp[:used])
            scalars = srv.network.train(states[:used], actions[:used], returns[:used], srv.learning_rate, srv.beta,
                                        advantages=None if advantages is None else advantages[:used], **extra)
        self._count(dropped, used, lag, scalars)

    def _count(self, dropped: int, used: int, lag: np.ndarray | None, scalars: dict | None) -> None:
        """Counts a training step: transitions dropped as too old, trained on, and their policy lag."""
        srv = self.server
        with srv.counter_lock:
            c = srv.shared.counters
            c[sb.C_DROPPED] += dropped
            if used:
                c[sb.C_UPDATES] += srv.network.ppo_epochs  # optimizer steps: one per epoch over the batch
                c[sb.C_TRAIN_BATCHES] += 1
                c[sb.C_TRAINED] += used
                c[sb.C_LAG_SUM] += float(lag.sum())
                c[sb.C_LAG_MAX] = max(c[sb.C_LAG_MAX], float(lag.max()))
        if scalars is not None:
            srv.training_scalars(scalars, float(lag.mean()), int(lag.max()))

    # ------------------------------------------------------------------ whole rollouts (V-trace, LSTM)
    def _sequence_loop(self) -> None:
        """The loop of `_train_loop`, keeping each rollout whole: [steps + 1, E] states, [steps, E] the rest,
        and with the LSTM network the state its first step started from."""
        srv, cfg = self.server, self.server.cfg
        sh = srv.shared
        lay = sh.layout
        tmax, envs = lay.time_max, lay.envs
        # each rollout holds at least one step of every env, and gathering stops once n > TRAINING_MIN_BATCH_SIZE
        cap = cfg.TRAINING_MIN_BATCH_SIZE // envs + 1
        buf = dict(
            states=np.empty((cap, tmax + 1) + sh.exp_states.shape[2:], dtype=sh.exp_states.dtype),
            actions=np.empty((cap, tmax, envs), dtype=np.int64),
            returns=np.empty((cap, tmax, envs), dtype=np.float32),
            advantages=np.empty((cap, tmax, envs), dtype=np.float32),
            rewards=np.empty((cap, tmax, envs), dtype=np.float32),
            done=np.empty((cap, tmax, envs), dtype=np.uint8),
            truncated=np.empty((cap, tmax, envs), dtype=np.uint8),
            logp=np.empty((cap, tmax, envs), dtype=np.float32),
            versions=np.empty((cap, tmax, envs), dtype=np.int64),
            h0=np.empty((cap, envs, lay.recurrent), dtype=np.float32),
            c0=np.empty((cap, envs, lay.recurrent), dtype=np.float32),
        )
        lengths = np.empty(cap, dtype=np.int64)
        names = ("actions", "returns", "rewards", "done", "truncated", "logp", "versions", "advantages")
        sources = dict(zip(names, (sh.exp_actions, sh.exp_returns, sh.exp_rewards, sh.exp_done, sh.exp_truncated,
                                   sh.exp_logp, sh.exp_version, sh.exp_advantages), strict=True))
        if cfg.GAE_LAMBDA == 1.0:
            names = names[:-1]
        count = [0]  # rollouts in the batch being gathered

        def take(slot: int, steps: int, n: int) -> None:
            r = count[0] if n else 0  # n == 0: the first rollout of a new batch
            buf["states"][r, :steps + 1] = sh.exp_states[slot, :steps + 1]
            for name in names:
                buf[name][r, :steps] = sources[name][slot, :steps]
            buf["h0"][r] = sh.exp_h0[slot]
            buf["c0"][r] = sh.exp_c0[slot]
            lengths[r] = steps
            count[0] = r + 1

        self._loop(take, lambda n: self._train_sequences(buf, lengths[:count[0]], n))

    def _start_states(self, buf: dict, starts: np.ndarray, lengths: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM's state [R, E, H] at each rollout's first kept step: the stored start state, carried over a
        dropped stale prefix by unrolling the current network over it without gradient."""
        net = self.server.network
        rollouts, envs = len(starts), buf["actions"].shape[2]
        h = torch.from_numpy(buf["h0"][:rollouts].copy()).to(net.device)
        c = torch.from_numpy(buf["c0"][:rollouts].copy()).to(net.device)
        for s in np.unique(starts[(starts > 0) & (starts < lengths)]).tolist():
            idx = np.flatnonzero(starts == s)
            cols = idx[None, :]
            rows = np.arange(s)[:, None]
            width = len(idx) * envs
            states = torch.from_numpy(buf["states"][cols, rows].reshape((-1,) + buf["states"].shape[3:]))
            notdone = torch.from_numpy(self._notdone(buf, cols, rows).reshape(s, width))
            select = torch.from_numpy(idx).to(net.device)
            with torch.no_grad():
                _, _, (hs, cs) = net.forward(states, state=(h[select].view(width, -1), c[select].view(width, -1)),
                                             notdone=notdone)
            h[select] = hs.view(len(idx), envs, -1)
            c[select] = cs.view(len(idx), envs, -1)
        return h, c

    @staticmethod
    def _notdone(buf: dict, cols, rows) -> np.ndarray:
        """1 where the episode goes on after the step, 0 after a terminal or time-limit step (the agent zeroed
        the state there)."""
        return 1.0 - (buf["done"][cols, rows] | buf["truncated"][cols, rows]).astype(np.float32)

    def _train_sequences(self, buf: dict, lengths: np.ndarray, n: int) -> None:
        """Trains on whole rollouts, blocks of equal length [T, B] (time-major, B = rollouts x envs): with
        V-trace on its targets (the current network's logits and values of every state, bootstrap states
        included, without gradient), else on the rollouts' n-step returns; the LSTM network unrolls each block
        from its stored start state with not-done masks."""
        srv, cfg = self.server, self.server.cfg
        net = srv.network
        vtrace = cfg.POLICY_LAG_CORRECTION == 'vtrace'
        gae, ppo = cfg.GAE_LAMBDA != 1.0, cfg.PPO_CLIP > 0
        rollouts = len(lengths)
        envs = buf["actions"].shape[2]
        lag = net.version - buf["versions"][:rollouts]  # [R, T, E]; only the first lengths[i] steps are real
        starts = np.zeros(rollouts, dtype=np.int64)
        if cfg.MAX_POLICY_LAG > 0:
            for i in range(rollouts):
                stale = np.flatnonzero((lag[i, :lengths[i]] > cfg.MAX_POLICY_LAG).any(axis=1))
                if stale.size:
                    starts[i] = stale[-1] + 1
        kept = lengths - starts
        dropped = int(starts.sum()) * envs
        used = n - dropped
        recurrent = net.recurrent_size > 0
        if used and recurrent:
            h0, c0 = self._start_states(buf, starts, lengths)
        parts, lags, sequences = [], [], []
        with torch.no_grad():
            for m in np.unique(kept).tolist():
                if m == 0:
                    continue
                idx = np.flatnonzero(kept == m)
                # time-major gather: rows [starts, starts + m] of each rollout, the last one its bootstrap state
                rows = (starts[idx][None, :] + np.arange(m + 1)[:, None])  # [m + 1, B_r]
                cols = idx[None, :]
                width = len(idx) * envs
                if not vtrace:
                    rows = rows[:m]  # the n-step returns need no bootstrap state
                states = torch.from_numpy(buf["states"][cols, rows].reshape((-1,) + buf["states"].shape[3:]))
                block = {name: torch.from_numpy(buf[name][cols, rows[:m]].reshape(m, width)).to(net.device)
                         for name in ("actions", "returns", "rewards", "done", "truncated", "logp")
                         + (("advantages",) if gae else ())}
                actions = block["actions"]
                if recurrent:
                    select = torch.from_numpy(idx).to(net.device)
                    start = (h0[select].view(width, -1), c0[select].view(width, -1))
                    notdone = torch.from_numpy(self._notdone(buf, cols, rows[:m]).reshape(m, width))
                    sequences.append(start + (notdone,))
                if vtrace:
                    if recurrent:
                        logits, values, _ = net.forward(states, state=start,
                                                        notdone=torch.cat([notdone, torch.ones(1, width)]))
                    else:
                        logits, values = net.forward(states)
                    values = values.float().view(m + 1, width)
                    pi, _ = net._policy(logits[:m * width].float())
                    target_logp = action_logp(pi, actions).view(m, width)  # the agents' form of log mu
                    discounts = cfg.DISCOUNT * (1.0 - block["done"].float())
                    vs, advantages = vtrace_targets(block["logp"], target_logp, block["rewards"], values[:m],
                                                    values[m], discounts, float(cfg.VTRACE_RHO), float(cfg.VTRACE_C),
                                                    truncated=block["truncated"].bool())
                    part = dict(states=states[:m * width], returns=vs.view(-1), advantages=advantages.view(-1))
                else:
                    part = dict(states=states, returns=block["returns"].view(-1))
                    if gae:
                        part["advantages"] = block["advantages"].view(-1)
                part["actions"] = actions.view(-1)
                if ppo:
                    part["behaviour_logp"] = block["logp"].view(-1)
                parts.append(part)
                lags.append(lag[cols, rows[:m]].reshape(-1))
        scalars = lag_used = None
        if used:
            batch = parts[0] if len(parts) == 1 else {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
            lag_used = np.concatenate(lags)
            extra = dict(sequences=sequences) if recurrent else {}
            if ppo:
                extra["behaviour_logp"] = batch["behaviour_logp"]
            scalars = net.train(batch["states"], batch["actions"], batch["returns"], srv.learning_rate, srv.beta,
                                advantages=batch.get("advantages"), **extra)
        self._count(dropped, used, lag_used, scalars)
