"""Shared-memory transport between the agent processes and the predictor/trainer threads.

States and experience live in shared arrays; only small fixed-size records travel through OS pipes:
- prediction requests: one pipe shared by every agent; an agent writes its 4-byte id (atomic, below PIPE_BUF)
  after writing its states into its observation slot; a predictor reads up to a batch of ids in one read();
- prediction replies: the predictor writes policy, value and model version into the agent's reply arrays, then
  one byte into the agent's own reply pipe; with the LSTM network it also reads each environment's recurrent
  state (h, c) beside its observation and writes the next one back in place (the agent zeroes it at a reset);
- experience: MAX_QUEUE_SIZE rollout slots, handed over by index as in Sample Factory: an agent takes a free
  slot's 4-byte index from the free pipe (blocking: this bounds the rollouts waiting for the trainers, the
  original's MAX_QUEUE_SIZE), fills it, and writes a 12-byte record (agent, slot, steps) into the experience
  pipe; a trainer copies the slot out and writes its index back into the free pipe.
  An agent that dies must not take a slot with it, whatever instruction it dies at. Each agent has a shared
  count of the slots it asked for (`agent_taken`) and a note of the slot it holds (`agent_slot`, -1: none):
  it raises the count, then reads the slot's index with `readv` straight into its note, so the one system call
  that takes the slot from the pipe also records it (the kernel copies the bytes before the call returns, and a
  SIGKILL cannot split a pipe read); it fills the slot, announces it, and clears the note. When the server reaps
  a dead agent it puts a recovery record (-1, number) into the experience pipe behind everything the agent
  wrote; the reader of that record has seen every rollout the agent announced, and frees the noted slot only if
  the agent announced fewer slots than it asked for. A death before the read leaves no note (nothing to free),
  after the read and before the announcement a note and a count ahead (freed), after the announcement and before
  the clearing a note with the count even (the trainer frees it; never twice).
- finished episodes: a 28-byte record (time, agent, reward, length) in one pipe that every agent writes to and
  the stats process reads (one atomic write, no lock: an agent killed at any moment cannot block the others).

Measured on the 2-core CI machine with `scripts/bench_transport.py` (real processes, a batching server thread
without a model, 4x84x84 uint8 states; four runs on a loaded machine, range of the per-agent round trip):
    transport                                                   1 agent        8 agents
    mp.Queue with a pickled float32 state (the original)        125-221 us     1.25-1.8 ms
    mp.Queue with an index, state in shared memory              60-226 us      490-670 us
    mp.SimpleQueue with an index, state in shared memory        25-149 us      335-376 us
    raw pipe: 4-byte id + 1-byte reply, state in shared memory  14-41 us       65-121 us
The raw pipe needs no feeder thread and no pickling, and a predictor drains a whole batch of ids in one
system call, so it is what ga3c uses.

The arrays are `multiprocessing.RawArray`s: their backing files are unlinked as soon as they are created, so
no segment is ever left behind in /dev/shm, whatever way the processes end.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass

import numpy as np

from ga3c.errors import ConfigError

REQUEST = struct.Struct("<i")
SLOT = struct.Struct("<i")
EXPERIENCE = struct.Struct("<iii")
EPISODE = struct.Struct("<didq")  # time.time(), agent, reward, length

# Indices of the shared float64 counters.
C_EPISODES = 0  # episodes finished (the stats process counts them)
C_PREDICTIONS = 1  # states predicted
C_PREDICT_BATCHES = 2  # forward passes run by the predictors
C_UPDATES = 3  # training updates applied
C_TRAINED = 4  # transitions trained on
C_DROPPED = 5  # transitions dropped as too old (MAX_POLICY_LAG)
C_LAG_SUM = 6  # sum over trained transitions of (version at training - version that acted)
C_LAG_MAX = 7  # largest policy lag seen
C_NT = 8
C_NP = 9
C_NA = 10
C_STEPS_BASE = 11  # agent steps done before this run (resume)
C_TRAIN_BATCHES = 12  # trainer batches (for the mean training batch)
C_EPISODES_BASE = 13  # episodes done before this run (resume)
C_DISCARDED = 14  # transitions lost with agents that died (killed, or their environment raised) before sending them
C_RECOVERED = 15  # experience slots taken by an agent that died before announcing them, given back
# seconds spent by the predictor and trainer threads, summed over threads (the benchmark's --profile)
C_T_PREDICT_WAIT = 16  # waiting for requests
C_T_PREDICT_GATHER = 17  # gathering states from shared memory
C_T_PREDICT_MODEL = 18  # the forward pass
C_T_PREDICT_REPLY = 19  # writing the replies and waking the agents
C_T_TRAIN_WAIT = 20  # waiting for rollouts
C_T_TRAIN_COPY = 21  # copying rollouts out of their slots
C_T_TRAIN_MODEL = 22  # the training step
C_CLUSTER_STEPS = 24  # transitions the Ray agent groups delivered into experience slots (CLUSTER='ray')
C_CLUSTER_GROUPS = 25  # Ray agent groups live now (their last call succeeded)
N_COUNTERS = 26

# columns of the per-agent timing rows: seconds spent by each agent process
A_T_ENV = 0  # emulator step (gymnasium)
A_T_PREPROCESS = 1  # resize and frame stacking
A_T_PREDICT_WAIT = 2  # from sending a request to its reply (transport + batching + forward pass)
A_T_SEND = 3  # returns, copy into a slot, waiting for a free slot
A_T_TOTAL = 4  # wall time of the agent's loop
N_AGENT_TIMES = 5


@dataclass(frozen=True)
class Layout:
    """Shapes of the shared arrays, derived from the settings and the environment."""

    max_agents: int
    slots: int
    envs: int
    time_max: int
    state_shape: tuple
    state_dtype: str
    num_actions: int
    recurrent: int = 0  # width of the recurrent state (LSTM_SIZE with the LSTM network; 0: feed-forward)

    def nbytes(self) -> int:
        """Bytes of shared memory the layout needs."""
        item = np.dtype(self.state_dtype).itemsize * int(np.prod(self.state_shape))
        hc = self.envs * self.recurrent * 4 * 2  # (h, c) in float32
        per_agent = self.envs * item + self.envs * (self.num_actions + 1) * 4 + 36 + 8 * N_AGENT_TIMES + hc
        per_slot = (self.time_max + 1) * self.envs * item + self.time_max * self.envs * (8 + 4 * 4 + 8 + 2) + 8 + hc
        return self.max_agents * per_agent + self.slots * per_slot + N_COUNTERS * 8


def _shared(ctx, shape: tuple, dtype) -> tuple[object, np.ndarray]:
    dtype = np.dtype(dtype)
    count = int(np.prod(shape)) * dtype.itemsize
    raw = ctx.RawArray("B", max(count, 1))
    return raw, np.frombuffer(raw, dtype=np.uint8, count=count).view(dtype).reshape(shape)


class SharedBuffers:
    """The shared arrays. Created in the main process and handed to every agent at its start (spawn-safe)."""

    NAMES = (
        "obs", "policy", "value", "version", "agent_steps", "agent_time", "stop", "agent_slot", "agent_taken",
        "exp_states", "exp_actions", "exp_returns", "exp_advantages", "exp_rewards", "exp_done", "exp_truncated",
        "exp_logp", "exp_version",
        "counters",
        "h", "c", "exp_h0", "exp_c0",
    )

    def __init__(self, ctx, layout: Layout) -> None:
        self.layout = layout
        free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else None
        need = layout.nbytes()
        if free is not None and need > free * 0.9:
            raise ConfigError(
                f"the shared memory for MAX_AGENTS={layout.max_agents} x ENVS_PER_AGENT={layout.envs} needs "
                f"{need / 2**20:.0f} MiB but /dev/shm has {free / 2**20:.0f} MiB free; lower MAX_AGENTS, "
                f"ENVS_PER_AGENT, MAX_QUEUE_SIZE or TIME_MAX")
        a, e, t, s = layout.max_agents, layout.envs, layout.time_max, tuple(layout.state_shape)
        r = layout.recurrent
        n = layout.slots
        shapes = {
            "obs": ((a, e) + s, layout.state_dtype),
            "policy": ((a, e, layout.num_actions), np.float32),
            "value": ((a, e), np.float32),
            "version": ((a,), np.int64),
            "agent_steps": ((a,), np.int64),
            "agent_time": ((a, N_AGENT_TIMES), np.float64),
            "stop": ((a,), np.uint8),
            # the experience slot an agent has taken and not yet announced (-1: none), and how many it asked for
            "agent_slot": ((a,), np.int32),
            "agent_taken": ((a,), np.int64),
            # slot states: T steps plus the bootstrap state after them (V-trace needs it)
            "exp_states": ((n, t + 1, e) + s, layout.state_dtype),
            "exp_actions": ((n, t, e), np.int64),
            "exp_returns": ((n, t, e), np.float32),
            "exp_advantages": ((n, t, e), np.float32),  # GAE's (GAE_LAMBDA < 1); unused otherwise
            "exp_rewards": ((n, t, e), np.float32),
            "exp_done": ((n, t, e), np.uint8),
            "exp_truncated": ((n, t, e), np.uint8),  # the episode was cut by a time limit at this step
            "exp_logp": ((n, t, e), np.float32),
            "exp_version": ((n, t, e), np.int64),
            "counters": ((N_COUNTERS,), np.float64),
            # the recurrent state (LSTM) of every environment: the agent zeroes it when its environment resets, a
            # predictor reads it with the observation and writes the next state back; empty when feed-forward
            "h": ((a, e, r), np.float32),
            "c": ((a, e, r), np.float32),
            # the state a rollout's first step started from
            "exp_h0": ((n, e, r), np.float32),
            "exp_c0": ((n, e, r), np.float32),
        }
        self._raw = {}
        for name in self.NAMES:
            shape, dtype = shapes[name]
            self._raw[name], array = _shared(ctx, shape, dtype)
            setattr(self, name, array)
        self._shapes = shapes
        self.agent_slot[:] = -1

    def __getstate__(self) -> dict:
        return {"layout": self.layout, "_raw": self._raw, "_shapes": self._shapes}

    def __setstate__(self, state: dict) -> None:
        self.layout = state["layout"]
        self._raw = state["_raw"]
        self._shapes = state["_shapes"]
        for name in self.NAMES:
            shape, dtype = self._shapes[name]
            dtype = np.dtype(dtype)
            count = int(np.prod(shape)) * dtype.itemsize
            setattr(self, name, np.frombuffer(self._raw[name], dtype=np.uint8, count=count).view(dtype).reshape(shape))

