"""CLUSTER='ray': agent groups as Ray actors feeding the trainers here, on a local Ray instance with 2 CPUs.

Needs Ray (pip install 'ga3c[ray]'). The end-to-end tests run the real Server with its agents, predictors,
trainers and stats process, plus two agent groups, on CartPole and on Pong; one kills a group's actor (as a node
death would) and checks that Ray restarts it, that rollouts flow again, and that the accounting stays exact. The
last one removes a whole worker node of a three-node Ray cluster on this machine (`ray.cluster_utils.Cluster`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import ray
import torch

from ga3c import SharedBuffers as sb
from ga3c.errors import ConfigError
from ga3c.Experience import n_step_returns
from ga3c.NetworkVP import NetworkVP
from ga3c.ray_cluster import AgentGroup, ThreadRayAgents, cluster_steps
from ga3c.Rollout import write_slot
from ga3c.Server import Server
from ga3c.settings import parse_settings


# ------------------------------------------------------------------------------------------------ no Ray needed
def test_settings_of_the_cluster():
    cfg = parse_settings(["CLUSTER=ray", "CLUSTER_AGENT_GROUPS=3", "CLUSTER_ENVS_PER_GROUP=8", "ENVS_PER_AGENT=4",
                          "WEIGHT_SYNC_UPDATES=5"])
    assert (cfg.CLUSTER, cfg.CLUSTER_AGENT_GROUPS, cfg.WEIGHT_SYNC_UPDATES) == ("ray", 3, 5)
    assert parse_settings([]).CLUSTER == ""
    # without a cluster the groups' size does not constrain the agents (CLUSTER_ENVS_PER_GROUP's default is 8)
    assert parse_settings(["ENVS_PER_AGENT=16"]).ENVS_PER_AGENT == 16
    for bad, match in ((["CLUSTER=dask"], "CLUSTER"),
                       (["CLUSTER=ray", "CLUSTER_ENVS_PER_GROUP=6", "ENVS_PER_AGENT=4"], "multiple"),
                       (["CLUSTER_AGENT_GROUPS=9", "CLUSTER_MAX_AGENT_GROUPS=8"], "CLUSTER_MAX_AGENT_GROUPS"),
                       (["WEIGHT_SYNC_UPDATES=0"], "WEIGHT_SYNC_UPDATES"), (["CLUSTER_AGENT_GROUPS=-1"], "at least")):
        with pytest.raises(ConfigError, match=match):
            parse_settings(bad)


def test_nothing_imports_ray_without_cluster():
    code = ("import sys; import ga3c.GA3C, ga3c.Server, ga3c.settings, ga3c.ProcessAgent; "
            "from ga3c.settings import parse_settings; parse_settings([]); "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("lam", [1.0, 0.9], ids=["n-step", "GAE_LAMBDA=0.9"])
def test_agent_group_rollout_matches_an_agent(lam):
    """One group in-process: shapes, the acting policy's log-probabilities and version, n-step returns (or with
    GAE the lambda-returns and advantages) with the V bootstrap exactly as ProcessAgent computes them, written
    into a slot column by column, and the bootstrap state that starts the next rollout."""
    cfg = parse_settings(["ATARI_GAME=CartPole-v1", "CLUSTER_ENVS_PER_GROUP=3", "TIME_MAX=6", "SEED=3",
                          f"GAE_LAMBDA={lam}"])
    group = AgentGroup(cfg, group_id=0, generation=1, state_shape=(4,), num_actions=2)
    assert group.rollout() is None  # no weights yet
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    weights = {k: v.numpy() for k, v in net.get_state()["model"].items()}
    first = group.rollout(weights, 7)
    second = group.rollout()
    for out in (first, second):
        assert out["states"].shape == (7, 3, 4) and out["states"].dtype == np.float32
        assert out["actions"].shape == out["returns"].shape == out["logp"].shape == (6, 3)
        assert out["version"] == 7 and out["steps"] == 6 and out["truncated"].shape == (6, 3)
        policy, value = net.predict(torch.from_numpy(out["states"].reshape(-1, 4)))
        policy, value = policy.numpy().reshape(7, 3, 2), value.numpy().reshape(7, 3)
        chosen = np.take_along_axis(policy[:6], out["actions"][..., None], axis=2)[..., 0]
        np.testing.assert_allclose(out["logp"], np.log(chosen + 1e-20), rtol=1e-5, atol=1e-6)
        expected = n_step_returns(out["rewards"], out["done"].astype(bool), out["truncated"].astype(bool),
                                  value[:6], value[6], cfg.DISCOUNT, lam)
        np.testing.assert_allclose(out["returns"], expected, rtol=1e-5, atol=1e-5)
        if lam == 1.0:
            assert "advantages" not in out
        else:
            np.testing.assert_allclose(out["advantages"], expected - value[:6], rtol=1e-5, atol=1e-5)
            layout = sb.Layout(max_agents=1, slots=1, envs=2, time_max=6, state_shape=(4,), state_dtype="float32",
                               num_actions=2)
            sh = sb.SharedBuffers(mp.get_context("spawn"), layout)
            write_slot(sh, 0, slice(1, 3), out, out["version"])
            np.testing.assert_array_equal(sh.exp_advantages[0], out["advantages"][:, 1:3])
            np.testing.assert_array_equal(sh.exp_returns[0], out["returns"][:, 1:3])
    np.testing.assert_array_equal(first["states"][6], second["states"][0])
    # outside a Ray actor: not a restart, and the seeds follow from SEED, the group and the generation
    info = group.ready()
    assert info["restarted"] is False and info["node"] == ""
    assert info["seeds"] == [cfg.SEED + 500_000_000 + 1_000_003 + e for e in range(3)]
    group.close()


# ------------------------------------------------------------------------------------------------ on Ray
@pytest.fixture(scope="module", autouse=True)
def ray_down_at_the_end():
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def no_server_left():
    yield
    while Running.started:
        run = Running.started.pop()
        if run.server is not None and run.thread.is_alive():
            run.server.request_stop("test ended")
            run.thread.join(timeout=60)


@pytest.fixture
def local_ray():
    """A local Ray instance with 2 CPUs, kept from test to test (the cluster test replaces it)."""
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False)
    yield


def cluster_cfg(tmp_path, *extra):
    return parse_settings([
        "CLUSTER=ray", "AGENTS=1", "MAX_AGENTS=4", "PREDICTORS=1", "TRAINERS=1", "DEVICE=cpu",
        "DYNAMIC_SETTINGS=false", "CLUSTER_AGENT_GROUPS=2", "CLUSTER_ENVS_PER_GROUP=4", "ENVS_PER_AGENT=2",
        "MAX_QUEUE_SIZE=16", "SAVE_MODELS=false", f"RESULTS_FILENAME={tmp_path / 'results.txt'}",
        "PRINT_STATS_FREQUENCY=1000", *extra])


def check_accounting(server) -> None:
    """Every transition produced (agent processes + agent groups) was trained on, dropped or discarded."""
    c = server.shared.counters
    produced = int(server.shared.agent_steps.sum()) + cluster_steps(server.shared)
    assert cluster_steps(server.shared) == server.cluster.steps > 0
    assert produced == int(c[sb.C_TRAINED] + c[sb.C_DROPPED] + c[sb.C_DISCARDED])
    lines = (server.cfg.RESULTS_FILENAME and open(server.cfg.RESULTS_FILENAME).read().splitlines())
    assert len(lines) == server.episodes()


def wait_cpus_free(expected: float, timeout: float = 20.0) -> None:
    """Killed actors give their CPUs back (asynchronously)."""
    deadline = time.time() + timeout
    while ray.available_resources().get("CPU", 0) < expected and time.time() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == expected


class Running:
    """The server's main loop in a thread, so that the test can watch it, stop it, and kill a group meanwhile."""

    started: list[Running] = []  # stopped at the end of each test, so that a failed test leaves no server running

    def __init__(self, cfg) -> None:
        Running.started.append(self)
        self.server = None
        self.status = None
        self.built = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(cfg,), daemon=True)
        self.thread.start()
        self.built.wait(timeout=120)
        assert self.server is not None, "the server could not be built"

    def _main(self, cfg) -> None:
        try:
            self.server = Server(cfg)  # built in this thread: it leaves the signal handlers alone
        finally:
            self.built.set()
        self.status = self.server.main()

    def wait_for(self, condition, what: str, timeout: float = 90.0, progress=None) -> None:
        """Wait for condition; fail after timeout seconds, or, given progress (a counter that grows while the run
        is working towards the condition), only after timeout seconds in which it did not grow: a slow or loaded
        machine slows these tests, a stalled run fails them."""
        deadline = time.time() + timeout
        last = progress() if progress else None
        while not condition():
            if progress and (now := progress()) != last:
                last, deadline = now, time.time() + timeout
            assert time.time() < deadline, (f"timed out waiting for {what}" if progress is None else
                                            f"no progress for {timeout:.0f} s while waiting for {what}")
            assert self.thread.is_alive(), f"the server ended while waiting for {what}: {self.server.stop_reason}"
            time.sleep(0.1)

    def cluster(self) -> ThreadRayAgents:
        self.wait_for(lambda: self.server.cluster is not None, "the agent groups to start")
        return self.server.cluster

    def stop(self) -> int:
        self.server.request_stop("test over")
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        return self.status


@pytest.mark.parametrize("network", ["feedforward", "lstm"])
def test_cartpole_end_to_end(local_ray, tmp_path, network):
    cfg = cluster_cfg(tmp_path, "ATARI_GAME=CartPole-v1", "WEIGHT_SYNC_UPDATES=2",
                      "TRAINING_MIN_BATCH_SIZE=32", f"NETWORK_TYPE={network}", "LSTM_SIZE=32")
    run = Running(cfg)
    cl = run.cluster()
    run.wait_for(lambda: cl.live_groups() == 2 and cl.episodes >= 20, "20 episodes from the agent groups",
                 progress=lambda: cl.rollouts)
    assert run.stop() == 0
    server = run.server
    assert cl.rollouts > 0 and cl.weight_pushes >= 2 and cl.lost_rollouts == 0 and cl.failure is None
    assert cl.steps == cl.rollouts * cfg.TIME_MAX * cfg.CLUSTER_ENVS_PER_GROUP
    assert 0 <= cl.mean_lag() <= cl.lag_max <= server.network.version
    check_accounting(server)
    c = server.shared.counters
    assert c[sb.C_UPDATES] > 0
    assert cl.live_groups() == 0 and not cl.is_alive()
    if network == "lstm":  # the groups' rollouts brought the states they started from into the slots
        assert server.network.recurrent_size == 32 and np.abs(server.shared.exp_h0).sum() > 0
    wait_cpus_free(2)


def test_pong_end_to_end_vtrace(local_ray, tmp_path):
    # two environments a group: its first episodes end after about 900 steps of each (a random Pong player's);
    # bf16 where native (emulated is 6x slower); no time limit: the wait fails only when the groups stall
    cfg = cluster_cfg(tmp_path, "ATARI_GAME=PongDeterministic-v4", "POLICY_LAG_CORRECTION=vtrace",
                      "CLUSTER_ENVS_PER_GROUP=2", "TRAINING_MIN_BATCH_SIZE=64", "PRECISION=auto")
    run = Running(cfg)
    cl = run.cluster()
    run.wait_for(lambda: cl.episodes >= 2, "2 Pong episodes from the agent groups", progress=lambda: cl.rollouts)
    assert run.stop() == 0
    server = run.server
    assert cl.lost_rollouts == 0 and cl.failure is None
    check_accounting(server)
    scores = [float(line.split(",")[1]) for line in open(cfg.RESULTS_FILENAME)]
    assert len(scores) >= 2 and all(-21 <= s <= 21 for s in scores)
    wait_cpus_free(2)


def test_killed_group_is_restarted_and_training_goes_on(local_ray, tmp_path):
    cfg = cluster_cfg(tmp_path, "ATARI_GAME=CartPole-v1", "TRAINING_MIN_BATCH_SIZE=32")
    run = Running(cfg)
    server = run.server
    cl = run.cluster()
    run.wait_for(lambda: cl.live_groups() == 2 and cl.rollouts >= 10, "rollouts from two live groups",
                 progress=lambda: cl.rollouts)
    victim = cl.groups[0]
    before = cl.rollouts
    ray.kill(victim.actor, no_restart=False)  # as a node death: Ray restarts the actor
    run.wait_for(lambda: cl.restarts >= 1, "the death to be seen")
    run.wait_for(lambda: victim.live and cl.live_groups() == 2, "the group to be live again")
    assert server.shared.counters[sb.C_CLUSTER_GROUPS] == 2
    run.wait_for(lambda: cl.rollouts >= before + 20, "rollouts after the restart", progress=lambda: cl.rollouts)
    trained = server.shared.counters[sb.C_TRAINED]
    run.wait_for(lambda: server.shared.counters[sb.C_TRAINED] > trained, "training to go on")
    assert run.stop() == 0
    assert cl.restarts >= 1 and cl.failure is None
    check_accounting(server)
    wait_cpus_free(2)


# ------------------------------------------------------------------------------------------------ a lost node
NODE_STORE_BYTES = 80 * 2**20  # each node's object store (CartPole rollouts are a few KB)


@pytest.fixture
def three_nodes():
    """A Ray cluster on this machine: a head without CPUs (no group lands there) and two worker nodes of 2 CPUs.
    A node that stops answering is declared dead after about 1.5 s instead of the default 15 s."""
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=0, object_store_memory=NODE_STORE_BYTES, include_dashboard=False,
        _system_config={"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                        "health_check_failure_threshold": 3}))
    workers = [cluster.add_node(num_cpus=2, object_store_memory=NODE_STORE_BYTES) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def test_lost_node_groups_restart_elsewhere_with_fresh_seeds(three_nodes, tmp_path):
    """Three groups over two worker nodes (2 + 1); the node with two is removed without warning: their calls are
    counted lost, one group restarts on the other node with new seeds while training goes on, the other waits for
    a CPU until a third node joins, and the accounting stays exact."""
    cluster, workers = three_nodes
    cfg = cluster_cfg(tmp_path, "ATARI_GAME=CartPole-v1", "CLUSTER_AGENT_GROUPS=3",
                      "TRAINING_MIN_BATCH_SIZE=32")
    run = Running(cfg)
    server = run.server
    cl = run.cluster()
    run.wait_for(lambda: cl.live_groups() == 3 and cl.rollouts >= 10, "rollouts from three live groups",
                 progress=lambda: cl.rollouts)
    node_of = {g.id: g.starts[-1]["node"] for g in cl.groups}
    assert sorted(node_of.values()) != sorted(set(node_of.values())) and \
        set(node_of.values()) == {w.node_id for w in workers}  # 2 + 1: both nodes have groups
    doomed = max(workers, key=lambda w: list(node_of.values()).count(w.node_id))
    other = next(w for w in workers if w is not doomed)
    victims = [g for g in cl.groups if node_of[g.id] == doomed.node_id]
    first_seeds = {g.id: g.starts[0]["seeds"] for g in cl.groups}
    assert all(not g.starts[0]["restarted"] for g in cl.groups)
    assert len(set(s for seeds in first_seeds.values() for s in seeds)) == 3 * cfg.CLUSTER_ENVS_PER_GROUP
    lost, restarts = cl.lost_rollouts, cl.restarts

    cluster.remove_node(doomed, allow_graceful=False)
    logging.getLogger("ga3c").info("test: node %s removed", doomed.node_id[:12])  # times in the log
    run.wait_for(lambda: cl.restarts >= restarts + 2, "both groups' deaths to be seen")
    run.wait_for(lambda: any(g.live for g in victims), "one group to restart on the other node")
    moved = next(g for g in victims if g.live)
    waiting = next(g for g in victims if g is not moved)
    assert moved.starts[-1]["node"] == other.node_id and moved.starts[-1]["restarted"]
    assert not set(moved.starts[-1]["seeds"]) & set(first_seeds[moved.id])  # fresh seeds, reported
    assert not waiting.live and len(waiting.starts) == 1  # no CPU left for the other: it waits
    assert cl.lost_rollouts >= lost + 2  # each dead group had a call in flight or sent one to the dead actor
    rollouts, trained = cl.rollouts, server.shared.counters[sb.C_TRAINED]
    run.wait_for(lambda: cl.rollouts >= rollouts + 20 and server.shared.counters[sb.C_TRAINED] > trained,
                 "training to go on with two groups")

    joined = cluster.add_node(num_cpus=2, object_store_memory=NODE_STORE_BYTES)
    logging.getLogger("ga3c").info("test: node %s joined", joined.node_id[:12])
    run.wait_for(lambda: waiting.live and cl.live_groups() == 3, "the waiting group to be placed on the new node")
    assert waiting.starts[-1]["node"] == joined.node_id and waiting.starts[-1]["restarted"]
    assert not set(waiting.starts[-1]["seeds"]) & set(first_seeds[waiting.id])
    assert waiting.starts[-1]["seeds"] != moved.starts[-1]["seeds"]
    assert server.shared.counters[sb.C_CLUSTER_GROUPS] == 3
    assert run.stop() == 0
    assert cl.failure is None
    check_accounting(server)
