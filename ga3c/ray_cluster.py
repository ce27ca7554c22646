"""Agents past one machine: agent groups as Ray actors, the predictor and trainers where the GPU is (CLUSTER='ray').

The only module of ga3c that imports Ray, and only when CLUSTER='ray' (lazily, inside the functions below).

Agent groups (`AgentGroup`, a Ray actor with one CPU): each steps CLUSTER_ENVS_PER_GROUP environments and holds
a CPU copy of the policy (one torch thread), so a whole TIME_MAX rollout is acted on where the environments are:
a per-step remote prediction would be a few hundred bytes of work for a Ray task, far below Ray's task-size
guideline, and would add a network round trip to every step. A rollout comes back as numpy arrays through Ray's
object store: states uint8 [T+1, E, ...] (the bootstrap state included), actions, n-step returns bootstrapped
with V as ProcessAgent computes them (lambda-returns and GAE advantages with GAE_LAMBDA < 1), clipped rewards,
terminal and time-limit flags, the acting policy's log-probabilities (log(pi(a) + 1e-20), as ProcessAgent) and the
version of the weights that acted, plus the episodes it finished. The acting loop is `ga3c/Rollout.py`'s, the
agent processes' own. With the LSTM network the group carries its environments' recurrent state itself, and
each rollout brings the state it started from (h0, c0).

`ThreadRayAgents`, a thread in the main process, keeps PIPELINE_DEPTH rollout calls queued on every group,
`ray.wait`s on them, and writes each rollout into experience slots exactly as an agent process does: a free slot
index from the free pipe, the slot filled, an (agent, slot, steps) record into the experience pipe. A group's
CLUSTER_ENVS_PER_GROUP columns fill CLUSTER_ENVS_PER_GROUP / ENVS_PER_AGENT slots. The records carry the agent id
MAX_AGENTS, reserved for the groups (no agent process has it). Every WEIGHT_SYNC_UPDATES updates the thread puts
the model's weights into the object store once and hands the reference to the groups with their next call;
each group pulls them once. The policy lag this adds is in what the trainers report (every transition carries its
version) and, for the groups alone, in the lag at delivery this thread logs at the end (`mean_lag`, `lag_max`);
POLICY_LAG_CORRECTION='vtrace' corrects it.

Faults: groups are restartable actors (max_restarts): when a node dies Ray restarts its groups elsewhere; the
calls that were running on it fail, are counted (`lost_rollouts`) and are sent again to the restarted group with
the current weights. Ray runs a restarted group's constructor again with the same arguments, so a restarted group
draws fresh environment seeds (OS entropy) instead of replaying its first episodes; its ready() answer reports
them with its node, and they are logged. A group still waiting for a CPU (no node has one free) is asked again
every PING_RETRY_SECONDS, not counted as a new death, and starts as soon as a node joins. A group that cannot be
restarted is replaced by a new actor; more than GROUP_DEATHS_ALLOWED failures in GROUP_DEATH_WINDOW seconds stop
the run (a crash loop). A rollout is counted as produced only once it is written into a slot, so nothing the
trainers took is lost and the summary's accounting stays exact.

Counters (shared with the stats process when SharedBuffers defines them): C_CLUSTER_STEPS, the transitions the
groups delivered; C_CLUSTER_GROUPS, the groups whose last call succeeded (the live groups).
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
import time

import numpy as np

from ga3c import SharedBuffers as sb
from ga3c.Rollout import Rollout, write_slot

log = logging.getLogger("ga3c")

PIPELINE_DEPTH = 2  # rollout calls queued on each group: the next one starts while the last one travels
GROUP_MAX_RESTARTS = 4  # Ray restarts of one group actor (node death, process killed) before it is replaced
GROUP_DEATH_WINDOW = 60.0  # seconds
GROUP_DEATHS_ALLOWED = 20  # failed calls in GROUP_DEATH_WINDOW that stop the run (groups cannot run)
PING_RETRY_SECONDS = 1.0  # between ready() calls to a group Ray is restarting
STOP_SECONDS = 10.0  # time stop() gives the calls in flight to arrive and be written into slots
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20  # object store of a Ray instance started here (rollouts are ~1.4 MB)


def cluster_steps(shared) -> int:
    """Transitions the agent groups delivered in this run."""
    return int(shared.counters[sb.C_CLUSTER_STEPS])


# ---------------------------------------------------------------------------------------------------- the actor
def _in_ray_actor() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def _restarted_by_ray() -> bool:
    """Whether Ray is building this actor again after its process or node died (False outside a Ray actor)."""
    if not _in_ray_actor():
        return False
    import ray

    return bool(ray.get_runtime_context().was_current_actor_reconstructed)


class AgentGroup:
    """CLUSTER_ENVS_PER_GROUP environments and a CPU copy of the policy, stepped one rollout per call.

    A plain class: `ThreadRayAgents` turns it into a Ray actor (`ray.remote(num_cpus=1, max_restarts=...)`), and a
    test may run it in-process.
    """

    def __init__(self, cfg, group_id: int, generation: int, state_shape: tuple, num_actions: int) -> None:
        import torch

        torch.set_num_threads(1)
        from ga3c.Environment import Environment
        from ga3c.NetworkVP import NetworkVP

        self.cfg = cfg
        self.torch = torch
        envs_n = int(cfg.CLUSTER_ENVS_PER_GROUP)
        seed0 = cfg.SEED + 500_000_000 + 1_000_003 * generation + group_id * envs_n
        self.restarted = _restarted_by_ray()
        if self.restarted:  # Ray runs this constructor again with the same arguments: new episodes need new seeds
            seed0 = int(np.random.SeedSequence().generate_state(1)[0]) % (2**31 - envs_n)
        self.seeds = [seed0 + e for e in range(envs_n)]  # reported by ready()
        self.envs = [Environment(cfg, seed=s) for s in self.seeds]
        self.net = NetworkVP(cfg, tuple(state_shape), int(num_actions), torch.device("cpu"))
        self.obs = np.empty((envs_n,) + tuple(state_shape), dtype=self.envs[0].state_dtype)
        # with the LSTM network the group carries its environments' recurrent state itself
        size = self.net.recurrent_size
        self.state = (np.zeros((envs_n, size), np.float32), np.zeros((envs_n, size), np.float32)) if size else None
        self.roll = Rollout(cfg, self.envs, self.obs, np.random.default_rng(seed0), self.state)
        self.roll.reset()
        self.version = -1  # no weights yet: the first call brings them
        self.cached = None  # (policy, value, version) of self.obs, computed as the last rollout's bootstrap

    def set_weights(self, weights: dict, version: int) -> None:
        torch = self.torch
        self.net.model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
        self.version = int(version)
        self.cached = None

    def ready(self) -> dict:
        """Answers once the actor is built (its first answer tells the driver it may send work): where it runs,
        whether Ray restarted it, and its environments' seeds."""
        node = ""
        if _in_ray_actor():
            import ray

            node = ray.get_runtime_context().get_node_id()
        return dict(pid=os.getpid(), node=node, restarted=self.restarted, seeds=list(self.seeds))

    def _predict(self, first: bool) -> tuple[np.ndarray, np.ndarray]:
        """Policy and value of self.obs, advancing the recurrent state; `first`: a rollout's first step, which
        the last rollout's bootstrap prediction has already computed unless the weights changed since."""
        if first and self.cached is not None and self.cached[2] == self.version:
            policy, value, _ = self.cached
            self.cached = None
            return policy, value
        if first and self.state is not None:
            self.roll.restore_start_state()  # the bootstrap prediction advanced it with the old weights
        torch = self.torch
        if self.state is None:
            policy, value = self.net.predict(torch.from_numpy(self.obs))
        else:
            h, c = (torch.from_numpy(a) for a in self.state)
            policy, value, (h1, c1) = self.net.predict(torch.from_numpy(self.obs), (h, c))
            self.state[0][:] = h1.numpy()
            self.state[1][:] = c1.numpy()
        return policy.numpy(), value.numpy()

    def rollout(self, weights: dict | None = None, version: int = -1) -> dict | None:
        """Steps TIME_MAX steps of every environment; None when it holds no weights (a restarted actor)."""
        if weights is not None:
            self.set_weights(weights, version)
        if self.version < 0:
            return None
        start = time.perf_counter()
        episodes: list[tuple[float, float, int]] = []

        def on_episode(reward: float, length: int) -> bool:
            episodes.append((time.time(), reward, length))
            return True

        while not self.roll.full:
            policy, value = self._predict(self.roll.t == 0)
            self.roll.act(policy, value, self.version, on_episode)
        policy, value = self._predict(False)
        self.cached = (policy, value, self.version)  # the next rollout's first step
        out = self.roll.take(value)
        result = dict(states=out["states"].copy(), actions=out["actions"].copy(), returns=out["returns"],
                      rewards=out["rewards"].copy(), done=out["done"].astype(np.uint8),
                      truncated=out["truncated"].astype(np.uint8), logp=out["logp"].copy(), version=self.version,
                      steps=out["steps"], episodes=episodes, seconds=time.perf_counter() - start)
        if self.state is not None:
            result["h0"], result["c0"] = out["h0"].copy(), out["c0"].copy()
        if "advantages" in out:
            result["advantages"] = out["advantages"]
        return result

    def close(self) -> None:
        for env in self.envs:
            env.close()


# ---------------------------------------------------------------------------------------------------- the driver
class _Group:
    """The thread's view of one agent group."""

    def __init__(self, group_id: int, actor) -> None:
        self.id = group_id
        self.actor = actor
        self.in_flight = 0
        self.ready = False  # built (its ready() answered): rollouts are sent only then, with fresh weights
        self.pinged = False  # a ready() call is in flight
        self.ping_after = 0.0  # time.time() before which no ready() call is sent (while Ray restarts it)
        self.synced = -1  # version of the weights the actor holds, as far as the thread knows (-1: none)
        self.live = False  # its last call succeeded
        self.failures = 0  # consecutive failed calls
        self.retired = False  # removed by set_groups: its calls in flight are delivered, then it is killed
        self.starts: list[dict] = []  # each ready() answer: pid, node, restarted, the environments' seeds
        self.down_since: float | None = None  # when its first call failed, until it delivers again


class ThreadRayAgents(threading.Thread):
    """Runs the agent groups from the main process; see the module docstring. `start()`, `stop()`,
    `set_groups(n)` (for the dynamic adjustment), `live_groups()`."""

    def __init__(self, server) -> None:
        super().__init__(name="ray-agents", daemon=True)
        import ray

        self.ray = ray
        self.server = server
        cfg = self.cfg = server.cfg
        sh = server.shared
        self.layout = sh.layout
        self.agent_id = int(cfg.MAX_AGENTS)  # reserved: no agent process has this id
        if cfg.CLUSTER_ENVS_PER_GROUP % self.layout.envs:
            raise ValueError(f"CLUSTER_ENVS_PER_GROUP={cfg.CLUSTER_ENVS_PER_GROUP} is not a multiple of "
                             f"ENVS_PER_AGENT={self.layout.envs}")
        self.started_ray = False
        self.target = int(cfg.CLUSTER_AGENT_GROUPS)  # 0 until connected: then one per CPU of the cluster
        self.remote_cls = None
        # the reading end of the free-slot pipe, opened again as a file of its own: non-blocking here only
        self.free_fd = os.open(f"/proc/self/fd/{server.free_reader.fileno()}", os.O_RDONLY | os.O_NONBLOCK)
        self.experience_fd = server.experience_writer.fileno()
        self.groups: list[_Group] = []
        self.retired: list[_Group] = []
        self.pending: dict = {}  # object ref -> (group, 'ping' or 'rollout', the actor called)
        self.next_id = 0
        self.generation = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # no new calls: deliver what is in flight
        self.halt = threading.Event()  # leave now
        self.weights_ref = None
        self.weights_version = -1
        self.deaths: list[float] = []
        # what it did, for the log, the tests and the benchmark
        self.steps = 0  # transitions written into slots
        self.rollouts = 0
        self.episodes = 0
        self.lost_rollouts = 0  # calls that failed (their group died): never counted as produced
        self.restarts = 0  # group deaths seen (each followed by a Ray restart or a new actor)
        self.weight_pushes = 0
        self.act_seconds = 0.0  # seconds the groups spent producing the delivered rollouts
        # the policy lag the groups add, seen when a rollout reaches its slots (updates since the weights that
        # acted; the trainers' lag adds the time in the queue): sum over transitions, and the largest
        self.lag_sum = 0.0
        self.lag_max = 0
        self.failure: BaseException | None = None

    # ------------------------------------------------------------------ public
    def set_groups(self, n: int) -> None:
        """Sets the number of agent groups, within [1, CLUSTER_MAX_AGENT_GROUPS] (ThreadDynamicAdjustment may call
        it); a removed group's rollouts in flight are still delivered."""
        with self.lock:
            self.target = int(min(max(n, 1), self.cfg.CLUSTER_MAX_AGENT_GROUPS))

    def group_count(self) -> int:
        return self.target

    def live_groups(self) -> int:
        return sum(1 for g in self.groups if g.live)

    def mean_lag(self) -> float:
        """Mean policy lag of the delivered transitions when they reached their slots (updates)."""
        return self.lag_sum / self.steps if self.steps else 0.0

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Delivers the rollouts in flight (while the trainers still run), then kills the groups; bounded in time."""
        self.stopping.set()
        if self.ident is not None:
            self.join(timeout=timeout)
            self.halt.set()
            self.join(timeout=2.0)
        self.halt.set()
        ray = self.ray
        for g in self.groups + self.retired:
            try:
                ray.kill(g.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.groups, self.retired = [], []
        self.pending.clear()
        self._set_live()
        try:
            os.close(self.free_fd)
        except OSError:
            pass
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        log.info("ray agents: %d rollouts, %d transitions, %d episodes delivered; policy lag at delivery %.1f "
                 "mean, %d max; %d rollouts lost with dead groups, %d group restarts, %d weight pushes",
                 self.rollouts, self.steps, self.episodes, self.mean_lag(), self.lag_max, self.lost_rollouts,
                 self.restarts, self.weight_pushes)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - reported to the server, which stops the run cleanly
            self.failure = exc
            self.server.component_failed(self.name, exc)

    def _connect(self) -> None:
        """Connects to Ray (or starts a local instance) in this thread, so the server's loop never waits on it."""
        ray, cfg = self.ray, self.cfg
        if not ray.is_initialized():
            address = cfg.RAY_ADDRESS or os.environ.get("RAY_ADDRESS", "")
            if address:
                ray.init(address=address, log_to_driver=True)
                log.info("ray: connected to the cluster at %s", address)
            else:
                ray.init(num_cpus=os.cpu_count(), object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                         include_dashboard=False, log_to_driver=True)
                log.info("ray: started a local instance with %d CPUs", os.cpu_count())
            self.started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 0))
        with self.lock:
            if not self.target:
                self.target = int(min(max(cpus, 1), cfg.CLUSTER_MAX_AGENT_GROUPS))
        if self.target > cpus:
            log.warning("ray: %d agent groups of one CPU each, but the cluster has %d CPUs: the others wait for "
                        "CPUs to join", self.target, cpus)
        self.remote_cls = ray.remote(num_cpus=1, max_restarts=GROUP_MAX_RESTARTS, max_task_retries=0)(AgentGroup)

    def _loop(self) -> None:
        ray = self.ray
        self._connect()
        while not self.halt.is_set():
            if not self.stopping.is_set():
                self._sync_weights()
                self._resize()
                for g in self.groups:
                    if not g.ready:
                        if not g.pinged and time.time() >= g.ping_after:
                            self._track(g.actor.ready.remote(), g, "ping")
                            g.pinged = True
                        continue
                    while g.in_flight < PIPELINE_DEPTH:
                        self._submit(g)
            elif not self.pending:
                return
            if not self.pending:
                time.sleep(0.05)
                continue
            refs = list(self.pending)
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.1)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                g, kind, actor = self.pending.pop(ref)
                g.in_flight -= 1
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    self._failed(g, kind, actor, exc)
                    continue
                if kind == "ping":
                    if actor is g.actor:
                        g.ready, g.pinged, g.synced = True, False, -1
                        self._group_started(g, out)
                    continue
                if out is None:  # a restarted actor without weights: the next call brings them
                    if actor is g.actor:
                        g.synced = -1
                    continue
                if actor is g.actor:
                    g.failures = 0
                    if not g.live:
                        g.live = True
                        self._set_live()
                        if g.down_since is not None:
                            log.info("ray agent group %d: delivering again %.1f s after it failed", g.id,
                                     time.time() - g.down_since)
                            g.down_since = None
                self._deliver(out)
            for g in list(self.retired):
                if g.in_flight == 0:
                    ray.kill(g.actor, no_restart=True)
                    self.retired.remove(g)

    def _group_started(self, g: _Group, info: dict) -> None:
        g.starts.append(info)
        seeds = info["seeds"]
        log.log(logging.INFO if info["restarted"] else logging.DEBUG, "ray agent group %d: %s on node %s (pid %d), "
                "environment seeds %d..%d", g.id, "restarted by Ray" if info["restarted"] else "started",
                info["node"][:12], info["pid"], seeds[0], seeds[-1])

    def _track(self, ref, g: _Group, kind: str) -> None:
        self.pending[ref] = (g, kind, g.actor)
        g.in_flight += 1

    def _new_group(self) -> _Group:
        g = _Group(self.next_id, self._new_actor(self.next_id))
        self.next_id += 1
        return g

    def _new_actor(self, group_id: int):
        self.generation += 1
        return self.remote_cls.remote(self.cfg, group_id, self.generation, tuple(self.layout.state_shape),
                                      int(self.layout.num_actions))

    def _resize(self) -> None:
        with self.lock:
            target = self.target
        while len(self.groups) < target:
            self.groups.append(self._new_group())
        while len(self.groups) > target:
            g = self.groups.pop()
            g.retired = True
            self.retired.append(g)
        self._set_live()

    def _sync_weights(self) -> None:
        """Every WEIGHT_SYNC_UPDATES updates: the weights into the object store, once."""
        net = self.server.network
        due = self.weights_ref is None or net.version // self.cfg.WEIGHT_SYNC_UPDATES > \
            self.weights_version // self.cfg.WEIGHT_SYNC_UPDATES
        if not due:
            return
        state = net.get_state()
        weights = {k: v.numpy() for k, v in state["model"].items()}
        self.weights_ref = self.ray.put(weights)
        self.weights_version = int(state["version"])
        self.weight_pushes += 1

    def _submit(self, g: _Group) -> None:
        if g.synced != self.weights_version:
            ref = g.actor.rollout.remote(self.weights_ref, self.weights_version)
            g.synced = self.weights_version
        else:
            ref = g.actor.rollout.remote()
        self._track(ref, g, "rollout")

    def _failed(self, g: _Group, kind: str, actor, exc: BaseException) -> None:
        """A call failed: its group died (node lost, process killed) and is restarting, or is gone for good.
        The group gets work again once its ready() answers (after Ray restarted it), with the current weights."""
        if kind == "rollout":
            self.lost_rollouts += 1
        if actor is not g.actor:
            return  # a call to an actor already replaced
        if kind == "ping" and not g.ready and isinstance(exc, self.ray.exceptions.ActorUnavailableError):
            g.pinged = False  # Ray is still restarting it (waiting for a node or a CPU): asked again shortly
            g.ping_after = time.time() + PING_RETRY_SECONDS
            return
        first = g.ready or kind == "ping"  # one death per incident, not one per call in flight
        g.ready = g.pinged = False
        g.synced = -1
        if g.live:
            g.live = False
            self._set_live()
        if not first:
            return
        g.failures += 1
        self.restarts += 1
        now = time.time()
        if g.down_since is None:
            g.down_since = now
        self.deaths = [t for t in self.deaths if now - t < GROUP_DEATH_WINDOW] + [now]
        replace = g.failures > GROUP_MAX_RESTARTS
        log.warning("ray agent group %d: a %s call failed (%s); %s", g.id, kind, type(exc).__name__,
                    "replacing it with a new actor" if replace else "Ray restarts it")
        allowed = max(GROUP_DEATHS_ALLOWED, 2 * len(self.groups))
        if len(self.deaths) > allowed:
            raise RuntimeError(f"{len(self.deaths)} agent-group failures in {GROUP_DEATH_WINDOW:.0f} s: the groups "
                               f"cannot run (last error: {exc})")
        if replace and not g.retired:
            try:
                self.ray.kill(g.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            g.actor = self._new_actor(g.id)
            g.failures = 0

    def _set_live(self) -> None:
        self.server.shared.counters[sb.C_CLUSTER_GROUPS] = self.live_groups()

    # ------------------------------------------------------------------ into the slots
    def _take_slot(self) -> int | None:
        """A free experience slot, waiting while every slot waits for the trainers; None when told to leave."""
        while not self.halt.is_set():
            if not select.select([self.free_fd], [], [], 0.1)[0]:
                continue
            try:
                data = os.read(self.free_fd, sb.SLOT.size)
            except BlockingIOError:  # an agent process took it first
                continue
            if len(data) != sb.SLOT.size:
                return None  # the pipe is closed
            return sb.SLOT.unpack(data)[0]
        return None

    def _deliver(self, out: dict) -> None:
        """Writes one group rollout into slots (ENVS_PER_AGENT columns each) and announces them."""
        srv = self.server
        sh = srv.shared
        envs = self.layout.envs
        steps = int(out["steps"])
        states = out["states"]
        written = 0
        for first in range(0, states.shape[1], envs):
            s = self._take_slot()
            if s is None:
                break
            write_slot(sh, s, slice(first, first + envs), out, out["version"])
            # counted before the record is visible, so a trainer never sees more trained than produced
            self._count_steps(steps * envs)
            os.write(self.experience_fd, sb.EXPERIENCE.pack(self.agent_id, s, steps))
            written += 1
        if written * envs < states.shape[1]:
            self.lost_rollouts += 1  # told to leave while waiting for slots: the rest is never counted
        self.rollouts += 1
        self.act_seconds += float(out.get("seconds", 0.0))
        lag = max(srv.network.version - int(out["version"]), 0)
        self.lag_sum += lag * written * envs * steps
        self.lag_max = max(self.lag_max, lag)
        for when, reward, length in out["episodes"]:
            self._episode(when, reward, length)

    def _count_steps(self, n: int) -> None:
        self.steps += n
        with self.server.counter_lock:
            self.server.shared.counters[sb.C_CLUSTER_STEPS] += n

    def _episode(self, when: float, reward: float, length: int) -> None:
        srv = self.server
        self.episodes += 1
        writer = getattr(srv, "episode_writer", None)
        if writer is not None:
            try:
                os.write(writer.fileno(), sb.EPISODE.pack(when, self.agent_id, reward, length))
            except OSError:
                pass  # the stats process is gone; the server stops the run
        else:  # a server whose stats process reads a queue
            from datetime import datetime

            srv.stats_queue.put((datetime.fromtimestamp(when), self.agent_id, reward, length))
