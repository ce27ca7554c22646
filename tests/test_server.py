"""The server's own rules, with real processes on the CPU: a crash loop of agents stops the run with one clear line;
a dead agent's id and reply pipe stay unused for DEAD_ID_SECONDS; the learning rate and beta follow their
annealing; the `train/*` scalars and the run's settings reach the TensorBoard event file."""

from __future__ import annotations

import logging
import os
import re
import signal
import time

import pytest
from conftest import (
    CARTPOLE,
    latest_checkpoint,
    leftover_processes,
    result_lines,
    run_ga3c,
    summary,
    tagged_env,
    tail,
    wait_until,
)
from test_reliability import in_process_server, run_with_driver

from ga3c import Server as server_module
from ga3c import SharedBuffers as sb
from ga3c.settings import setting_names

CRASHING_ENV = '''
import gymnasium
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CrashingCartPole(CartPoleEnv):
    """CartPole that resets (so the server's probe passes) but raises at every step: every agent dies at once."""

    def step(self, action):
        raise RuntimeError("injected: this environment cannot step")


if "CrashingCartPole-v1" not in gymnasium.envs.registry:
    gymnasium.register(id="CrashingCartPole-v1", entry_point="ga3c_test_crashing:CrashingCartPole")
'''


def test_a_crash_loop_of_agents_stops_the_run_with_one_clear_line(tmp_path, tag):
    site = tmp_path / "site"
    site.mkdir()
    (site / "ga3c_test_crashing.py").write_text(CRASHING_ENV)
    (site / "sitecustomize.py").write_text("import ga3c_test_crashing  # noqa: F401\n")
    env = tagged_env(tag, {"PYTHONPATH": os.pathsep.join([str(site), tagged_env(tag)["PYTHONPATH"]])})
    rc, out, err = run_ga3c(["ATARI_GAME=CrashingCartPole-v1", "DEVICE=cpu", "DYNAMIC_SETTINGS=False", "AGENTS=4",
                             "MAX_AGENTS=32", "SAVE_MODELS=False", "MAX_SECONDS=300"], tmp_path, timeout=400, env=env)
    assert rc == 1, f"exit status {rc}\n{tail(err)}"
    allowed = server_module.AGENT_DEATHS_ALLOWED
    stops = [line for line in err.splitlines() if "agents cannot run" in line]
    assert len(stops) == 1, tail(err)
    assert f"the {allowed + 1}-th agent death in {server_module.AGENT_DEATH_WINDOW} s" in stops[0]
    assert "stopping: agents keep dying" in err
    # each death before the last one allowed was replaced; none after
    assert sum("starting a replacement" in line for line in err.splitlines()) == allowed, tail(err)
    assert "injected: this environment cannot step" in err  # the agents' own error is on stderr
    s = summary(err)
    assert s["agent_deaths"] >= allowed + 1 and s["steps"] == 0 and s["lost"] == 0, s
    left = leftover_processes(tag)
    assert not left, "processes left behind:\n" + "\n".join(left)


def test_a_dead_agents_id_and_reply_pipe_stay_unused_for_their_quarantine(tmp_path, monkeypatch, tag, caplog):
    """MAX_AGENTS=2 and two agents: the killed agent's replacement must wait for its id, DEAD_ID_SECONDS after the
    death was noticed, and its reply pipe stays open that long (a late reply finds no reused descriptor)."""
    caplog.set_level(logging.INFO, logger="ga3c")
    quarantine = server_module.DEAD_ID_SECONDS
    server, _ = in_process_server([*CARTPOLE, "AGENTS=2", "MAX_AGENTS=2", "PREDICTORS=1", "TRAINERS=1",
                                   "MAX_SECONDS=200", "EPISODES=1000000", "SAVE_MODELS=False",
                                   "PRINT_STATS_FREQUENCY=100000"], tmp_path, monkeypatch, tag)
    seen: dict[str, object] = {}

    def drive(srv) -> None:
        try:
            assert wait_until(lambda: srv.shared.counters[sb.C_TRAINED] > 0, 90), "training never started"
            with srv.components_lock:
                proc, writer = srv.agents[0]
            os.kill(proc.pid, signal.SIGKILL)
            killed = time.time()
            assert wait_until(lambda: srv.deaths == 1, 10), "the death was not noticed"
            seen["during"] = (sorted(srv.agents), srv.replacements_due, writer.closed, srv.reply_fds[0])
            assert wait_until(lambda: len(srv.agents) == 2, quarantine + 20), "the agent was never replaced"
            seen["replaced_after"] = time.time() - killed
            seen["after"] = sorted(srv.agents)
            assert wait_until(lambda: writer.closed, 5), "the dead agent's reply pipe was never closed"
            assert wait_until(lambda: srv.shared.agent_steps[0] > 0, 30), "the new agent 0 does not run"
        finally:
            srv.request_stop("test")

    rc, errors = run_with_driver(server, drive)
    assert not errors, errors[0]
    assert rc == 0
    assert seen["during"] == ([1], 1, False, -1), seen
    assert seen["replaced_after"] >= quarantine, seen
    assert seen["after"] == [0, 1]
    assert sum("exited with code -9; starting a replacement" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("episodes, progress", [(0, 0.0), (250, 0.25), (1000, 1.0), (5000, 1.0)])
def test_learning_rate_and_beta_follow_their_annealing(tmp_path, monkeypatch, episodes, progress):
    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    monkeypatch.chdir(tmp_path)
    server = Server(parse_settings([*CARTPOLE, "SAVE_MODELS=False", "ANNEALING_EPISODE_COUNT=1000",
                                    "LEARNING_RATE_START=0.001", "LEARNING_RATE_END=0.0002", "BETA_START=0.02",
                                    "BETA_END=0.004"]))
    try:
        server.shared.counters[sb.C_EPISODES] = episodes
        server._anneal()
        assert server.learning_rate == pytest.approx(0.001 - 0.0008 * progress, rel=1e-9)
        assert server.beta == pytest.approx(0.02 - 0.016 * progress, rel=1e-9)
    finally:
        server.close()


@pytest.mark.parametrize("steps, progress", [(0, 0.0), (300_000, 0.25), (1_200_000, 1.0), (9_000_000, 1.0)])
def test_annealing_over_agent_steps(tmp_path, monkeypatch, steps, progress):
    """ANNEALING_STEP_COUNT anneals over agent steps, this run's and a resumed run's, whatever the episodes."""
    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    monkeypatch.chdir(tmp_path)
    server = Server(parse_settings([*CARTPOLE, "SAVE_MODELS=False", "ANNEALING_STEP_COUNT=1200000",
                                    "ANNEALING_EPISODE_COUNT=10", "LEARNING_RATE_START=0.001",
                                    "LEARNING_RATE_END=0.0002", "BETA_START=0.02", "BETA_END=0.004"]))
    try:
        server.shared.counters[sb.C_EPISODES] = 5  # half-way by episodes: must not count
        server.shared.counters[sb.C_STEPS_BASE] = steps // 3  # steps of the run this one resumed
        server.shared.agent_steps[:] = 0
        server.shared.agent_steps[0] = steps - steps // 3
        server._anneal()
        assert server.learning_rate == pytest.approx(0.001 - 0.0008 * progress, rel=1e-9)
        assert server.beta == pytest.approx(0.02 - 0.016 * progress, rel=1e-9)
    finally:
        server.close()


def test_a_run_trains_on_the_step_schedule(tmp_path, tag):
    """A real run with ANNEALING_STEP_COUNT: the rate and beta logged with each update follow the line over
    agent steps (with at most a few ticks of delay), and the optimizer ends on LEARNING_RATE_END (its value in
    the final checkpoint), so the trainers take the schedule, not a value read once at the start."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    count, slack = 20000, 5000  # slack: agent steps the logged value may trail the schedule by
    rc, _, err = run_ga3c([*CARTPOLE, "AGENTS=2", "TENSORBOARD=True", "TENSORBOARD_UPDATE_FREQUENCY=5",
                           f"ANNEALING_STEP_COUNT={count}", "MAX_STEPS=30000", "LEARNING_RATE_START=0.001",
                           "LEARNING_RATE_END=0.0001", "BETA_START=0.02", "BETA_END=0.002"], tmp_path,
                          timeout=240, env=tagged_env(tag))
    assert rc == 0, tail(err)
    acc = EventAccumulator(str(tmp_path / "logs"))
    acc.Reload()

    def line(start, end, step):
        return start + (end - start) * min(max(step, 0), count) / count

    for name, start, end in (("learning_rate", 0.001, 0.0001), ("beta", 0.02, 0.002)):
        points = acc.Scalars(f"train/{name}")
        assert len(points) >= 10 and points[-1].step >= count + slack, (name, len(points), points[-1].step)
        for p in points:
            assert line(start, end, p.step) - 1e-9 <= p.value <= line(start, end, p.step - slack) + 1e-9, (name, p)
        assert points[-1].value == pytest.approx(end)
    ckpt = latest_checkpoint(tmp_path / "checkpoints")
    assert [g["lr"] for g in ckpt["network"]["optimizers"][0]["param_groups"]] == pytest.approx([0.0001])


@pytest.mark.parametrize("period", [60, 0])
def test_the_main_loop_gives_freed_heap_pages_back_every_trim_period(tmp_path, monkeypatch, period):
    """keep_freed_memory's heaps keep every freed page (a 2-hour soak's main process held 545 MB of free chunks):
    the main loop hands them back once per TRIM_SECONDS, not on every tick; never with TRIM_SECONDS=0."""
    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    calls = []
    monkeypatch.setattr(server_module, "release_freed_memory", lambda: calls.append(time.time()) or True)
    monkeypatch.chdir(tmp_path)
    server = Server(parse_settings([*CARTPOLE, "SAVE_MODELS=False", f"TRIM_SECONDS={period}"]))
    try:
        server.stop_reason = "test"  # a tick without the components a running server has
        if period == 0:
            for _ in range(3):
                server._tick()
            assert calls == [] and server.next_trim == float("inf")
            return
        assert server.next_trim > time.time() + period - 30  # not at once: the heaps are new
        server._tick()
        assert calls == []
        server.next_trim = time.time() - 1  # the period is over
        for _ in range(3):
            server._tick()
        assert len(calls) == 1
        assert server.next_trim == pytest.approx(calls[0] + period, abs=1.0)
    finally:
        server.close()


TRAIN_TAGS = ("loss_policy", "loss_value", "loss_total", "entropy", "grad_norm", "batch_size", "value_mean",
              "version", "learning_rate", "beta", "policy_lag_mean", "policy_lag_max", "updates")


@pytest.mark.parametrize("ppo", [False, True], ids=["", "PPO_CLIP=0.2,PPO_EPOCHS=2"])
def test_train_scalars_reach_tensorboard(tmp_path, tag, ppo):
    """The run ends on EPISODES (counted by the stats process, which writes the event file): a run stopped
    before the stats process has imported TensorBoard would have nothing to show. With PPO_CLIP, its clip
    fraction and KL estimate too (and only then)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rc, out, err = run_ga3c([*CARTPOLE, "AGENTS=2", "TENSORBOARD=True", "TENSORBOARD_UPDATE_FREQUENCY=5",
                             "EPISODES=40", "SAVE_MODELS=False", "LEARNING_RATE_START=0.0005",
                             "LEARNING_RATE_END=0.0005", "BETA_START=0.02", "BETA_END=0.02",
                             *(["PPO_CLIP=0.2", "PPO_EPOCHS=2"] if ppo else [])], tmp_path, timeout=240,
                            env=tagged_env(tag))
    assert rc == 0, tail(err)
    s = summary(err)
    acc = EventAccumulator(str(tmp_path / "logs"))
    acc.Reload()
    # the run's settings: the changed ones in the log, all of them in TensorBoard's text tab at the first step
    logged = set(re.search(r"settings other than Config.py's: (.*)$", err, re.MULTILINE).group(1).split())
    assert {"ATARI_GAME=CartPole-v1", "AGENTS=2", "EPISODES=40", "LEARNING_RATE_START=0.0005"} <= logged, logged
    assert ("PPO_CLIP=0.2" in logged) == ppo and not any(w.startswith("DISCOUNT=") for w in logged)
    (text,) = acc.Tensors("settings/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert text.step == 0 and "| EPISODES | 40 | 400000 |" in table and "| DISCOUNT | 0.99 |  |" in table
    assert ("| PPO_CLIP | 0.2 | 0.0 |" in table) == ppo and table.count("\n") == len(setting_names()) + 1
    tags = set(acc.Tags()["scalars"])
    ppo_tags = ("clip_fraction", "approx_kl")
    missing = [t for t in TRAIN_TAGS + (ppo_tags if ppo else ()) if f"train/{t}" not in tags]
    assert not missing, (missing, sorted(tags))
    assert ppo or not {f"train/{t}" for t in ppo_tags} & tags
    if ppo:
        assert all(0 <= e.value <= 1 for e in acc.Scalars("train/clip_fraction"))
        assert all(e.value >= -1e-6 for e in acc.Scalars("train/approx_kl"))  # k3 = (r - 1) - log r >= 0
    series = {t: acc.Scalars(f"train/{t}") for t in TRAIN_TAGS}
    n = len(series["updates"])
    assert n >= 2 and all(len(v) == n for v in series.values()), {t: len(v) for t, v in series.items()}
    updates = [e.value for e in series["updates"]]
    assert updates == sorted(set(updates)) and updates[-1] <= s["updates"], (updates, s)
    # one point per TENSORBOARD_UPDATE_FREQUENCY updates at most
    assert len({int(u) // 5 for u in updates}) == n
    assert all(e.value == pytest.approx(0.0005) for e in series["learning_rate"])
    assert all(e.value == pytest.approx(0.02) for e in series["beta"])
    for total, policy, value in zip(series["loss_total"], series["loss_policy"], series["loss_value"], strict=True):
        assert total.value == pytest.approx(policy.value + value.value, rel=1e-4, abs=1e-4)
    assert all(e.value >= 1 for e in series["batch_size"])
    assert all(0 <= e.value <= 1 for e in series["policy_lag_mean"][:1])  # the first update acts on fresh weights
    steps = [e.step for e in series["updates"]]
    assert steps == sorted(steps) and steps[-1] <= s["steps"]


SLOW_TENSORBOARD = """
import sys
import time


class SlowTensorBoard:
    \"\"\"Makes importing torch's TensorBoard writer take longer than the server waits for the stats process.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == "torch.utils.tensorboard":
            time.sleep(float(__import__("os").environ["GA3C_TEST_TB_DELAY"]))
        return None


sys.meta_path.insert(0, SlowTensorBoard())
"""


def test_a_run_ending_while_tensorboard_loads_keeps_every_episode(tmp_path, tag):
    """The stats process imports TensorBoard (seconds of torch) while it writes the results: a run that ends before
    the import does keeps every episode in results.txt (it lost them all when the import came first)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_TENSORBOARD)
    env = tagged_env(tag, {"GA3C_TEST_TB_DELAY": str(server_module.STATS_JOIN_SECONDS + 10)})
    env["PYTHONPATH"] += os.pathsep + str(site)
    rc, out, err = run_ga3c([*CARTPOLE, "AGENTS=2", "TENSORBOARD=True", "MAX_STEPS=2000", "SAVE_MODELS=False"],
                            tmp_path, timeout=240, env=env)
    assert rc == 0, tail(err)
    s = summary(err)
    lines = result_lines(tmp_path / "results.txt")
    assert s["episodes"] > 0 and len(lines) == s["episodes"], (len(lines), s, tail(err))
