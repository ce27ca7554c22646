"""The data path, step by step: agent -> observation slot -> predictor -> reply -> agent -> rollout -> experience
slot -> trainer. Each component is the real one, run through its public interfaces, and its neighbours are
stand-ins that write or check known numbers:

- a real ProcessAgent (run in this thread) with real gymnasium environments, real shared buffers and real pipes,
  answered by a scripted predictor whose policy, value and version are known for every step;
- the real ThreadPredictor serving a stand-in network whose output encodes its input;
- the real ThreadTrainer reading experience slots the test filled, with the network's train() recording its batch.

No learning and no timing: every check is exact (or a statistical test with a fixed seed)."""

from __future__ import annotations

import fcntl
import math
import multiprocessing as mp
import os
import select
import signal
import threading
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import FakeServer, wait_until

from ga3c import SharedBuffers as sb
from ga3c.NetworkVP import NetworkVP
from ga3c.ProcessAgent import ProcessAgent
from ga3c.settings import parse_settings
from ga3c.ThreadPredictor import ThreadPredictor
from ga3c.ThreadTrainer import ThreadTrainer

ACTIONS = 3
TIME_LIMIT = 6  # the TimeLimit of SHORT
BASE_POLICY = np.array([0.1, 0.3, 0.6])


class StepEnv(gym.Env):
    """A real gymnasium environment whose observation says where it is: [its number (the order in which the
    environments were made), episode, step in the episode, steps since it was made]. Episode n of env i ends
    (terminated) after 3 + (i + n) % 5 steps unless `episode_length` fixes it, or the TimeLimit of its
    registration cuts it first; the reward of a step is 0.5 * action - 0.1 * (step in the episode). `StepEnv.made`
    lists the environments made, and each logs its steps in `log` as (state before, action, reward, terminated)."""

    made: list[StepEnv] = []

    def __init__(self, episode_length: int | None = None, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(ACTIONS)
        self.episode_length = episode_length
        self.number = len(StepEnv.made)
        StepEnv.made.append(self)
        self.log: list[tuple[np.ndarray, int, float, bool]] = []
        self.episode = -1
        self.step_in_episode = 0
        self.total = 0
        self.length = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.number, self.episode, self.step_in_episode, self.total], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.step_in_episode = 0
        self.length = self.episode_length or 3 + (self.number + self.episode) % 5
        return self._obs(), {}

    def step(self, action):
        before = self._obs()
        reward = 0.5 * int(action) - 0.1 * self.step_in_episode
        self.step_in_episode += 1
        self.total += 1
        terminated = self.step_in_episode >= self.length
        self.log.append((before, int(action), reward, terminated))
        return self._obs(), reward, terminated, False, {}


SHORT = "ga3c-test/Steps-v0"  # episodes of 3..7 steps, cut at TIME_LIMIT: terminals and time limits
LONG = "ga3c-test/LongSteps-v0"  # one endless episode
for _id, _kwargs, _limit in ((SHORT, {}, TIME_LIMIT), (LONG, {"episode_length": 10**9}, None)):
    if _id not in gym.envs.registry:
        gym.register(id=_id, entry_point=StepEnv, max_episode_steps=_limit, kwargs=_kwargs)


def agent_cfg(game: str, *extra: str):
    return parse_settings([f"ATARI_GAME={game}", "DEVICE=cpu", "DISCOUNT=0.9", "REWARD_MIN=-0.3", "REWARD_MAX=0.8",
                           *extra])


# ------------------------------------------------------------------------------------------------- the agent
def rotated_policy(k: int, envs: int) -> np.ndarray:
    """Reply k's policy: env e gets BASE_POLICY rotated by (k + e) % 3, so each step and env differ."""
    return np.stack([np.roll(BASE_POLICY, (k + e) % ACTIONS) for e in range(envs)]).astype(np.float32)


def step_value(k: int, envs: int) -> np.ndarray:
    return (k + 0.25 * np.arange(envs) + 0.125).astype(np.float32)


def step_version(k: int) -> int:
    return 10 * k + 7


class ScriptedPredictor(threading.Thread):
    """Answers one agent's requests as a predictor does (policy, value and version into its reply arrays, then one
    byte on its reply pipe), from the script above: reply k is for step k. It keeps a copy of the states it was
    asked about; reply `stop_at` also raises the agent's stop flag. A request after that one is counted and
    answered by closing the reply pipe, which ends the agent."""

    def __init__(self, shared, agent_id: int, request_fd: int, reply_conn, stop_at: int) -> None:
        super().__init__(daemon=True)
        self.shared, self.agent_id, self.request_fd, self.reply_conn = shared, agent_id, request_fd, reply_conn
        self.stop_at = stop_at
        self.asked: list[np.ndarray] = []
        self.requesters: list[int] = []
        self.late = 0
        self.done = False

    def run(self) -> None:
        sh, me = self.shared, self.agent_id
        envs = sh.layout.envs
        while not self.done:
            if not select.select([self.request_fd], [], [], 0.05)[0]:
                continue
            (who,) = sb.REQUEST.unpack(os.read(self.request_fd, sb.REQUEST.size))
            k = len(self.asked)
            if k > self.stop_at:
                self.late += 1
                self.reply_conn.close()
                return
            self.requesters.append(who)
            self.asked.append(sh.obs[me].copy())
            sh.policy[me] = rotated_policy(k, envs)
            sh.value[me] = step_value(k, envs)
            sh.version[me] = step_version(k)
            if k == self.stop_at:
                sh.stop[me] = 1
            os.write(self.reply_conn.fileno(), b"\x01")


def read_all(fd: int, size: int) -> list[bytes]:
    """Every record waiting in a pipe, without blocking."""
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    assert len(data) % size == 0, f"a torn record: {len(data)} bytes"
    return [data[i:i + size] for i in range(0, len(data), size)]


@dataclass
class AgentRun:
    cfg: object
    shared: sb.SharedBuffers
    agent_id: int
    envs: list[StepEnv]  # the agent's environments, in its order
    predictor: ScriptedPredictor
    records: list[tuple[int, int, int]]  # (agent, slot, steps) as announced, in order
    rollouts: list[dict]  # each announced slot's content, copied
    episodes: list[tuple[float, int, float, int]]  # (time, agent, reward, length) as reported


def run_agent_here(cfg, stop_at: int) -> AgentRun:
    """Runs a real ProcessAgent (agent 1 of 2, first incarnation) in this thread until the scripted predictor stops
    it at reply `stop_at`; the free pipe holds a slot for every rollout it can send, so it never waits for one."""
    envs, tmax = cfg.ENVS_PER_AGENT, cfg.TIME_MAX
    slots = stop_at // tmax + 2
    layout = sb.Layout(max_agents=2, slots=slots, envs=envs, time_max=tmax, state_shape=(4,), state_dtype="float32",
                       num_actions=ACTIONS)
    ctx = mp.get_context("spawn")
    sh = sb.SharedBuffers(ctx, layout)
    (req_r, req_w), (rep_r, rep_w), (free_r, free_w), (exp_r, exp_w), (ep_r, ep_w) = (
        ctx.Pipe(duplex=False) for _ in range(5))
    for slot in range(slots):
        os.write(free_w.fileno(), sb.SLOT.pack(slot))
    agent_id = 1
    predictor = ScriptedPredictor(sh, agent_id, req_r.fileno(), rep_w, stop_at)
    predictor.start()
    StepEnv.made.clear()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        ProcessAgent(agent_id, 1, cfg, sh, req_w, rep_r, free_r, exp_w, ep_w).run()
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        predictor.done = True
        predictor.join(timeout=10)
    records = [sb.EXPERIENCE.unpack(r) for r in read_all(exp_r.fileno(), sb.EXPERIENCE.size)]
    episodes = [sb.EPISODE.unpack(r) for r in read_all(ep_r.fileno(), sb.EPISODE.size)]
    rollouts = []
    for _agent, slot, n in records:
        rollouts.append(dict(
            states=sh.exp_states[slot, :n + 1].copy(), actions=sh.exp_actions[slot, :n].copy(),
            returns=sh.exp_returns[slot, :n].copy(), rewards=sh.exp_rewards[slot, :n].copy(),
            done=sh.exp_done[slot, :n].copy(), truncated=sh.exp_truncated[slot, :n].copy(),
            logp=sh.exp_logp[slot, :n].copy(), versions=sh.exp_version[slot, :n].copy(),
            advantages=sh.exp_advantages[slot, :n].copy()))
    for conn in (req_r, req_w, rep_r, free_r, free_w, exp_r, exp_w, ep_r, ep_w):
        conn.close()
    return AgentRun(cfg, sh, agent_id, list(StepEnv.made), predictor, records, rollouts, episodes)


def reference_returns(rewards, terminated, truncated, values, bootstrap, gamma) -> np.ndarray:
    """The n-step returns as Experience.py documents them, one env and one step at a time."""
    steps, envs = rewards.shape
    out = np.zeros((steps, envs))
    for e in range(envs):
        following = float(bootstrap[e])
        for t in range(steps - 1, -1, -1):
            if terminated[t, e]:
                following = rewards[t, e]
            elif truncated[t, e]:
                following = rewards[t, e] + gamma * values[t, e]
            else:
                following = rewards[t, e] + gamma * following
            out[t, e] = following
    return out


def reference_gae(rewards, terminated, truncated, values, bootstrap, gamma, lam) -> np.ndarray:
    """GAE advantages (Schulman et al. 2016) one env and one step at a time: A_t = delta_t + gamma * lam * A_{t+1},
    delta_t = r_t + gamma * V_next - V_t, the sum ending with the episode (terminal: V_next = 0; time limit: V_next
    = V_t, as the n-step returns) or with the rollout (V_next = the bootstrap)."""
    steps, envs = rewards.shape
    out = np.zeros((steps, envs))
    for e in range(envs):
        following, v_next = 0.0, float(bootstrap[e])
        for t in range(steps - 1, -1, -1):
            if terminated[t, e]:
                following, v_next = 0.0, 0.0
            elif truncated[t, e]:
                following, v_next = 0.0, values[t, e]
            following = rewards[t, e] + gamma * v_next - values[t, e] + gamma * lam * following
            out[t, e] = following
            v_next = values[t, e]
    return out


def expected_steps(run: AgentRun, steps: int, time_limit: int | None) -> dict:
    """What the environments' logs and the script say about each step k < `steps`, [steps, E] arrays."""
    cfg, envs = run.cfg, run.cfg.ENVS_PER_AGENT
    assert len(run.envs) == envs
    logs = [env.log for env in run.envs]
    assert [len(log) for log in logs] == [steps] * envs, "the environments did not take one step per reply"
    def column(i, dtype):
        return np.array([[logs[e][k][i] for e in range(envs)] for k in range(steps)], dtype=dtype).reshape(
            (steps, envs) + ((4,) if i == 0 else ()))

    states, actions, raw, terminated = column(0, np.float32), column(1, np.int64), column(2, float), column(3, bool)
    cut = (states[:, :, 2] + 1 >= time_limit) if time_limit else np.zeros_like(terminated)
    policies = np.array([rotated_policy(k, envs) for k in range(steps)]).reshape(steps, envs, ACTIONS)
    return dict(
        states=states, actions=actions, raw=raw, rewards=np.clip(raw, cfg.REWARD_MIN, cfg.REWARD_MAX),
        terminated=terminated, truncated=cut & ~terminated,
        values=np.array([step_value(k, envs) for k in range(steps)]).reshape(steps, envs),
        logp=np.log(np.take_along_axis(policies, actions[..., None], axis=2)[..., 0] + 1e-20),
        versions=np.array([[step_version(k)] * envs for k in range(steps)]).reshape(steps, envs))


def test_agent_writes_gae_advantages_and_lambda_returns():
    """With GAE_LAMBDA < 1 each slot holds the GAE advantages of its steps (with the values the agent acted with)
    and, as returns, the lambda-returns advantage + V; episode ends of both kinds inside the rollouts."""
    tmax, envs, gamma, lam, stop_at = 5, 2, 0.9, 0.8, 23
    run = run_agent_here(agent_cfg(SHORT, f"TIME_MAX={tmax}", f"ENVS_PER_AGENT={envs}", f"GAE_LAMBDA={lam}"), stop_at)
    exp = expected_steps(run, stop_at, TIME_LIMIT)
    assert exp["terminated"].any() and exp["truncated"].any()
    start = 0
    for got in run.rollouts:
        n = got["actions"].shape[0]
        span = slice(start, start + n)
        adv = reference_gae(exp["rewards"][span], exp["terminated"][span], exp["truncated"][span],
                            exp["values"][span], step_value(start + n, envs), gamma, lam)
        np.testing.assert_allclose(got["advantages"], adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["returns"], adv + exp["values"][span], rtol=1e-5, atol=1e-5)
        start += n
    assert start == stop_at


@pytest.mark.parametrize("stop_at", [23, 10, 0], ids=["partial-last-rollout", "stop-after-a-full-one", "at-once"])
def test_agent_rollouts_are_aligned_step_by_step(stop_at):
    tmax, envs, gamma = 5, 2, 0.9
    run = run_agent_here(agent_cfg(SHORT, f"TIME_MAX={tmax}", f"ENVS_PER_AGENT={envs}"), stop_at)
    pred, sh, me = run.predictor, run.shared, run.agent_id
    assert pred.late == 0, "the agent asked for a prediction after it was told to stop"
    assert pred.requesters == [me] * (stop_at + 1)
    exp = expected_steps(run, stop_at, TIME_LIMIT)
    # the state in the observation slot at request k is the state the environment was in before step k
    np.testing.assert_array_equal(np.array(pred.asked[:stop_at]).reshape(exp["states"].shape), exp["states"])
    if stop_at == 23:  # the run has both kinds of episode end, and clipped rewards at both bounds
        assert exp["terminated"].any() and exp["truncated"].any() and (exp["terminated"] & (
            exp["states"][:, :, 2] + 1 == TIME_LIMIT)).any()
        assert (exp["raw"] > run.cfg.REWARD_MAX).any() and (exp["raw"] < run.cfg.REWARD_MIN).any()

    lengths = [tmax] * (stop_at // tmax) + ([stop_at % tmax] if stop_at % tmax else [])
    assert [(agent, n) for agent, _, n in run.records] == [(me, n) for n in lengths]
    assert len({slot for _, slot, _ in run.records}) == len(run.records)
    start = 0
    for n, got in zip(lengths, run.rollouts, strict=True):
        span = slice(start, start + n)
        boot = start + n  # the reply that bootstrapped this rollout
        np.testing.assert_array_equal(got["states"][:n], exp["states"][span])
        np.testing.assert_array_equal(got["states"][n], pred.asked[boot])
        np.testing.assert_array_equal(got["actions"], exp["actions"][span])
        np.testing.assert_allclose(got["rewards"], exp["rewards"][span], rtol=1e-6)
        np.testing.assert_array_equal(got["done"], exp["terminated"][span])
        np.testing.assert_array_equal(got["truncated"], exp["truncated"][span])
        np.testing.assert_allclose(got["logp"], exp["logp"][span], rtol=1e-6)
        np.testing.assert_array_equal(got["versions"], exp["versions"][span])
        returns = reference_returns(exp["rewards"][span], exp["terminated"][span], exp["truncated"][span],
                                    exp["values"][span], step_value(boot, envs), gamma)
        np.testing.assert_allclose(got["returns"], returns, rtol=1e-5)
        start += n
    assert int(sh.agent_steps[me]) == stop_at * envs
    assert int(sh.agent_taken[me]) == len(lengths) and int(sh.agent_slot[me]) == -1

    # every finished episode reported once, in order, with its raw (unclipped) score and length
    finished = []
    for k in range(stop_at):
        for e in range(envs):
            if exp["terminated"][k, e] or exp["truncated"][k, e]:
                first = k - int(exp["states"][k, e, 2])
                finished.append((pytest.approx(exp["raw"][first:k + 1, e].sum()), k - first + 1))
    assert [(agent, reward, length) for _, agent, reward, length in run.episodes] == [
        (me, reward, length) for reward, length in finished]


def test_agent_samples_actions_with_the_policys_probabilities():
    """6,000 draws from policies [0.1, 0.3, 0.6] rotated by step and env: the draws fall on the three
    probabilities in proportion (chi-square, 2 degrees of freedom: p = exp(-chi2 / 2))."""
    steps, envs = 1500, 4
    run = run_agent_here(agent_cfg(LONG, "TIME_MAX=5", f"ENVS_PER_AGENT={envs}", "SEED=1"), steps)
    actions = np.concatenate([r["actions"] for r in run.rollouts])
    assert actions.shape == (steps, envs)
    drawn = np.take_along_axis(np.stack([rotated_policy(k, envs) for k in range(steps)]), actions[..., None],
                               axis=2)[..., 0]
    counts = np.array([np.isclose(drawn, p).sum() for p in BASE_POLICY])
    assert counts.sum() == steps * envs
    expected = BASE_POLICY * steps * envs
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert math.exp(-chi2 / 2) > 1e-3, f"draws per probability {counts.tolist()}, expected {expected.tolist()}"
    # and no env copies another's draw: per env, the same test
    for e in range(envs):
        per_env = np.array([np.isclose(drawn[:, e], p).sum() for p in BASE_POLICY])
        chi2 = float(((per_env - BASE_POLICY * steps) ** 2 / (BASE_POLICY * steps)).sum())
        assert math.exp(-chi2 / 2) > 1e-3, (e, per_env.tolist())


# ------------------------------------------------------------------------------------------------- the predictor
class EncodingNetwork:
    """Stands for NetworkVP in a predictor: policy and value encode the states given (column 0 holds each state's
    id) and the version the call began with; each call moves `version` on by one while it computes, as a trainer's
    update landing during the forward pass would. `calls` keeps (version at the start, ids seen) per call."""

    def __init__(self) -> None:
        self.version = 100
        self.calls: list[tuple[int, list[float]]] = []

    def predict(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        began = self.version
        ids = states[:, 0].clone()
        self.version += 1
        self.calls.append((began, ids.tolist()))
        return torch.stack([ids, ids + 0.5, torch.full_like(ids, float(began))], dim=1), ids * 2.0


class PredictorServer:
    """What a ThreadPredictor uses of the server; `reply` notes what the agent finds in its arrays when woken."""

    def __init__(self, cfg, shared) -> None:
        self.cfg, self.shared, self.network = cfg, shared, EncodingNetwork()
        self.device = torch.device("cpu")
        self.request_fd, self.request_writer = os.pipe()
        fcntl.fcntl(self.request_fd, fcntl.F_SETFL, fcntl.fcntl(self.request_fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self.request_lock, self.counter_lock = threading.Lock(), threading.Lock()
        self.replies: list[tuple[int, np.ndarray, np.ndarray, int]] = []
        self.failures: list[BaseException] = []

    def reply(self, agent_id: int) -> None:
        sh = self.shared
        self.replies.append((agent_id, sh.policy[agent_id].copy(), sh.value[agent_id].copy(),
                             int(sh.version[agent_id])))

    def component_failed(self, name: str, exc: BaseException) -> None:
        self.failures.append(exc)


def test_predictor_gives_each_agent_its_own_rows_and_the_version_that_computed_them():
    agents, envs = 7, 2
    cfg = parse_settings(["ATARI_GAME=CartPole-v1", "DEVICE=cpu", f"ENVS_PER_AGENT={envs}",
                          f"PREDICTION_BATCH_SIZE={3 * envs}"])  # at most 3 agents per forward pass
    layout = sb.Layout(max_agents=agents, slots=1, envs=envs, time_max=1, state_shape=(4,), state_dtype="float32",
                       num_actions=3)
    sh = sb.SharedBuffers(mp.get_context("spawn"), layout)
    for i in range(agents):
        for e in range(envs):
            sh.obs[i, e] = [10 * i + e + 1, -1.0, 0.5, i]
    srv = PredictorServer(cfg, sh)
    order = [5, 2, 6, 0, 3, 1, 4]
    os.write(srv.request_writer, b"".join(sb.REQUEST.pack(i) for i in order))
    predictor = ThreadPredictor(srv, 0)
    predictor.start()
    try:
        assert wait_until(lambda: len(srv.replies) >= agents or srv.failures, 30), srv.replies
    finally:
        predictor.exit_flag = True
        predictor.join(timeout=10)
        os.close(srv.request_fd)
        os.close(srv.request_writer)
    assert not srv.failures, srv.failures
    # batches of at most 3 agents, in the order of the requests, each agent's envs together
    batches = [order[:3], order[3:6], order[6:]]
    assert [ids for _, ids in srv.network.calls] == [[10 * i + e + 1 for i in b for e in range(envs)]
                                                    for b in batches]
    began = {i: 100 + n for n, b in enumerate(batches) for i in b}
    assert sorted(agent for agent, *_ in srv.replies) == list(range(agents))
    for agent, policy, value, version in srv.replies:
        ids = np.array([10 * agent + e + 1 for e in range(envs)], dtype=np.float32)
        np.testing.assert_array_equal(value, 2 * ids)
        np.testing.assert_array_equal(policy[:, 0], ids)
        np.testing.assert_array_equal(policy[:, 1], ids + 0.5)
        assert version == began[agent] == policy[0, 2], (agent, version, began[agent])
    assert int(sh.counters[sb.C_PREDICTIONS]) == agents * envs and int(sh.counters[sb.C_PREDICT_BATCHES]) == 3


# ------------------------------------------------------------------------------------------------- the trainer
@pytest.mark.parametrize("ppo", [False, True], ids=["", "PPO_CLIP=0.2,PPO_EPOCHS=3"])
@pytest.mark.parametrize("gae", [1.0, 0.9], ids=["n-step", "GAE_LAMBDA=0.9"])
@pytest.mark.parametrize("max_lag", [3, 0], ids=["MAX_POLICY_LAG=3", "MAX_POLICY_LAG=0"])
def test_trainer_batch_is_the_rollouts_and_max_policy_lag_keeps_its_boundary(max_lag, gae, ppo):
    """Rollouts of several lengths in slots out of order, lags around the limit: the batch train() gets is every
    kept transition of the rollouts, in order (rollout, step, env), with its own state, action and return (with
    GAE its advantage, with PPO_CLIP the log-probability its action was drawn with); a lag equal to
    MAX_POLICY_LAG is kept, one more is dropped (0: nothing is dropped). Each of PPO_EPOCHS steps is an update."""
    tmax, envs, now = 4, 2, 20
    epochs = 3 if ppo else 1
    cfg = parse_settings(["ATARI_GAME=CartPole-v1", "DEVICE=cpu", f"TIME_MAX={tmax}", f"ENVS_PER_AGENT={envs}",
                          f"MAX_POLICY_LAG={max_lag}", "TRAINING_MIN_BATCH_SIZE=1000", f"GAE_LAMBDA={gae}",
                          f"PPO_CLIP={0.2 if ppo else 0.0}", f"PPO_EPOCHS={epochs}"])
    layout = sb.Layout(max_agents=1, slots=6, envs=envs, time_max=tmax, state_shape=(4,), state_dtype="float32",
                       num_actions=2)
    sh = sb.SharedBuffers(mp.get_context("spawn"), layout)
    # (slot, lags [steps, envs]); the rest of each slot holds leftovers of an older rollout
    plan = [(3, [[0, 0], [1, 1], [2, 3], [3, 3]]), (0, [[4, 4], [3, 4]]), (5, [[5, 5], [4, 4], [3, 3], [3, 2]]),
            (1, [[4, 3]]), (2, [[3, 3], [2, 2], [2, 2]])]
    rng = np.random.default_rng(0)
    sh.exp_states[:] = -1.0
    sh.exp_actions[:] = 7
    sh.exp_version[:] = now - 100
    expected = []
    uid = 0
    for slot, lags in plan:
        steps = len(lags)
        for t in range(steps):
            for e in range(envs):
                uid += 1
                sh.exp_states[slot, t, e] = [uid, t, e, slot]
                sh.exp_actions[slot, t, e] = rng.integers(0, 2)
                sh.exp_returns[slot, t, e] = rng.normal()
                sh.exp_advantages[slot, t, e] = rng.normal()
                sh.exp_logp[slot, t, e] = -rng.uniform(0.1, 3.0)
                sh.exp_version[slot, t, e] = now - lags[t][e]
                if max_lag == 0 or lags[t][e] <= max_lag:
                    expected.append((uid, int(sh.exp_actions[slot, t, e]), float(sh.exp_returns[slot, t, e]),
                                     float(sh.exp_logp[slot, t, e]), float(sh.exp_advantages[slot, t, e]),
                                     lags[t][e]))
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    net.version = now
    calls = []

    def record_train(states, actions, returns, lr, beta, advantages=None, behaviour_logp=None):
        calls.append((states.clone(), actions.clone(), returns.clone(), None if advantages is None else
                      advantages.clone(), None if behaviour_logp is None else behaviour_logp.clone()))
        return {"loss_total": 0.0}

    net.train = record_train
    srv = FakeServer(cfg, sh, net, [(0, slot, len(lags)) for slot, lags in plan])
    trainer = ThreadTrainer(srv, 0)
    trainer.exit_flag = True  # train on what is queued, once, and return
    trainer.run()

    assert srv.released == [slot for slot, _ in plan]
    assert len(calls) == 1
    states, actions, returns, advantages, logp = calls[0]
    assert states[:, 0].tolist() == [float(uid) for uid, *_ in expected]
    assert actions.tolist() == [a for _, a, *_ in expected]
    np.testing.assert_array_equal(returns.numpy(), np.array([r for _, _, r, *_ in expected], dtype=np.float32))
    if ppo:
        np.testing.assert_array_equal(logp.numpy(), np.array([m for _, _, _, m, _, _ in expected], dtype=np.float32))
    else:
        assert logp is None
    if gae == 1.0:
        assert advantages is None
    else:
        np.testing.assert_array_equal(advantages.numpy(), np.array([a for *_, a, _ in expected], dtype=np.float32))
    produced = sum(len(lags) * envs for _, lags in plan)
    kept_lags = [lag for *_, lag in expected]
    c = sh.counters
    assert (c[sb.C_TRAINED], c[sb.C_DROPPED]) == (len(expected), produced - len(expected))
    assert c[sb.C_LAG_SUM] == sum(kept_lags) and c[sb.C_LAG_MAX] == max(kept_lags) and c[sb.C_UPDATES] == epochs
    assert srv.lag_seen == (pytest.approx(np.mean(kept_lags)), max(kept_lags))
