"""V-trace: `vtrace_targets` against a plain transcription of the paper's formulas (loops, the sum form of
equation 1), the on-policy identity with the agent's n-step returns, the trainer's V-trace path on rollouts of
mixed lengths with MAX_POLICY_LAG (a fake server, the real network), and a short CartPole run end to end."""

from __future__ import annotations

import math
import multiprocessing as mp

import numpy as np
import pytest
import torch
from conftest import (
    CARTPOLE,
    FakeServer,
    assert_accounted,
    leftover_processes,
    run_ga3c,
    summary,
    tagged_env,
    tail,
)

from ga3c import SharedBuffers as sb
from ga3c.Experience import n_step_returns
from ga3c.NetworkVP import NetworkVP
from ga3c.settings import parse_settings
from ga3c.ThreadTrainer import ThreadTrainer
from ga3c.vtrace import vtrace_targets


def reference(blogp, tlogp, rewards, values, bootstrap, discounts, rho_bar, c_bar, truncated=None):
    """IMPALA's equation (1), term by term, for every sequence b and start t:
        vs_t = V(x_t) + sum_{s=t}^{T-1} (prod_{i=t}^{s-1} gamma_i c_i) delta_s,
        delta_s = rho_s (r_s + gamma_s V(x_{s+1}) - V(x_s)),   A_t = rho_t (r_t + gamma_t vs_{t+1} - V(x_t)).
    A truncated step takes V(x_t) for its next state's value (and vs) and cuts the trace."""
    steps, batch = rewards.shape
    trunc = np.zeros((steps, batch), dtype=bool) if truncated is None else truncated
    vs = np.zeros((steps, batch))
    adv = np.zeros((steps, batch))
    for b in range(batch):
        ratio = [math.exp(float(tlogp[s, b]) - float(blogp[s, b])) for s in range(steps)]
        rho = [min(rho_bar, x) for x in ratio]
        c = [min(c_bar, x) for x in ratio]

        def next_value(s, b=b):
            if trunc[s, b]:
                return float(values[s, b])
            return float(values[s + 1, b]) if s + 1 < steps else float(bootstrap[b])

        for t in range(steps):
            total, coef = 0.0, 1.0
            for s in range(t, steps):
                delta = rho[s] * (rewards[s, b] + discounts[s, b] * next_value(s) - values[s, b])
                total += coef * delta
                coef *= 0.0 if trunc[s, b] else discounts[s, b] * c[s]
            vs[t, b] = values[t, b] + total
        for t in range(steps):
            if trunc[t, b]:
                nxt = float(values[t, b])
            else:
                nxt = vs[t + 1, b] if t + 1 < steps else float(bootstrap[b])
            adv[t, b] = rho[t] * (rewards[t, b] + discounts[t, b] * nxt - values[t, b])
    return vs, adv


def make_case(steps, batch, seed, log_ratio_scale=0.5, terminal_at=None, gamma=0.9):
    rng = np.random.default_rng(seed)
    blogp = np.log(rng.uniform(0.05, 0.95, (steps, batch))).astype(np.float32)
    tlogp = (blogp + rng.normal(0.0, log_ratio_scale, (steps, batch))).astype(np.float32)
    rewards = rng.uniform(-1, 1, (steps, batch)).astype(np.float32)
    values = rng.normal(0, 2, (steps, batch)).astype(np.float32)
    bootstrap = rng.normal(0, 2, batch).astype(np.float32)
    done = np.zeros((steps, batch), dtype=np.float32)
    if terminal_at is not None:
        done[terminal_at, :] = 1.0
    discounts = (gamma * (1.0 - done)).astype(np.float32)
    return blogp, tlogp, rewards, values, bootstrap, discounts


def run(case, rho_bar, c_bar, truncated=None):
    t = [torch.from_numpy(x) for x in case]
    tr = None if truncated is None else torch.from_numpy(truncated)
    vs, adv = vtrace_targets(*t, rho_bar, c_bar, truncated=tr)
    return vs.numpy(), adv.numpy()


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("clip", ["clipped", "unclipped"])
def test_matches_the_papers_formulas(batch, clip):
    case = make_case(steps=7, batch=batch, seed=batch, terminal_at=3)
    blogp, tlogp = case[0], case[1]
    if clip == "clipped":
        rho_bar = c_bar = 1.0
        # make sure the clipping is exercised: ratios above 1 and below 1
        assert (tlogp > blogp).any() and (tlogp < blogp).any()
    else:
        rho_bar = c_bar = 1e6
    vs, adv = run(case, rho_bar, c_bar)
    ref_vs, ref_adv = reference(*case, rho_bar, c_bar)
    assert vs.shape == adv.shape == (7, batch)
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    if clip == "unclipped":  # large thresholds and infinity are the same thing
        vs_inf, adv_inf = run(case, math.inf, math.inf)
        np.testing.assert_allclose(vs_inf, vs, rtol=1e-6)
        np.testing.assert_allclose(adv_inf, adv, rtol=1e-6)


def test_clipping_changes_the_targets_and_distinct_thresholds_work():
    case = make_case(steps=6, batch=3, seed=11, log_ratio_scale=1.0)
    clipped = run(case, 1.0, 1.0)
    unclipped = run(case, 1e6, 1e6)
    assert not np.allclose(clipped[0], unclipped[0])
    for rho_bar, c_bar in ((1.0, 0.5), (2.0, 1.0)):
        vs, adv = run(case, rho_bar, c_bar)
        ref_vs, ref_adv = reference(*case, rho_bar, c_bar)
        np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)


def test_terminal_cuts_the_trace():
    # after a terminal at t=2, nothing before it depends on the values and rewards after it
    case = list(make_case(steps=6, batch=2, seed=3, terminal_at=2))
    vs, adv = run(tuple(case), 1.0, 1.0)
    for i in (2, 3):  # rewards, values after the terminal
        case[i] = case[i].copy()
        case[i][3:] += 5.0
    case[4] = case[4] + 5.0  # bootstrap
    vs2, adv2 = run(tuple(case), 1.0, 1.0)
    np.testing.assert_allclose(vs2[:3], vs[:3], rtol=1e-6)
    np.testing.assert_allclose(adv2[:3], adv[:3], rtol=1e-6)


def hand_n_step(rewards, bootstrap, gamma):
    """sum_{k=t}^{T-1} gamma^{k-t} r_k + gamma^{T-t} V(x_T), by loops."""
    steps, batch = rewards.shape
    out = np.zeros((steps, batch))
    for b in range(batch):
        for t in range(steps):
            out[t, b] = sum(gamma ** (k - t) * rewards[k, b] for k in range(t, steps)) + \
                gamma ** (steps - t) * bootstrap[b]
    return out


@pytest.mark.parametrize("batch", [1, 5])
def test_on_policy_vs_is_the_n_step_return(batch):
    gamma = 0.99
    blogp, _, rewards, values, bootstrap, discounts = make_case(steps=5, batch=batch, seed=7, gamma=gamma)
    case = (blogp, blogp.copy(), rewards, values, bootstrap, discounts)
    vs, adv = run(case, 1.0, 1.0)
    expected = hand_n_step(rewards, bootstrap, gamma)
    np.testing.assert_allclose(vs, expected, rtol=1e-5, atol=1e-5)
    # the agent's own n-step returns are the same numbers
    no = np.zeros(rewards.shape, dtype=bool)
    np.testing.assert_allclose(vs, n_step_returns(rewards, no, no, values, bootstrap, gamma), rtol=1e-5, atol=1e-5)
    # and the advantage is r_t + gamma vs_{t+1} - V(x_t) = vs_t - V(x_t)
    np.testing.assert_allclose(adv, expected - values, rtol=1e-5, atol=1e-5)


def test_on_policy_with_terminals_and_truncations_matches_the_agents_returns():
    gamma = 0.97
    blogp, _, rewards, values, bootstrap, _ = make_case(steps=8, batch=4, seed=5, gamma=gamma)
    term = np.zeros(rewards.shape, dtype=bool)
    trunc = np.zeros(rewards.shape, dtype=bool)
    term[2, 0] = term[7, 1] = term[4, 3] = True
    trunc[5, 0] = trunc[3, 2] = trunc[7, 3] = True
    discounts = (gamma * (1.0 - term)).astype(np.float32)
    case = (blogp, blogp.copy(), rewards, values, bootstrap, discounts)
    vs, _ = run(case, 1.0, 1.0, truncated=trunc)
    np.testing.assert_allclose(vs, n_step_returns(rewards, term, trunc, values, bootstrap, gamma), rtol=1e-5,
                               atol=1e-5)
    off = make_case(steps=8, batch=4, seed=6, gamma=gamma)
    off = off[:5] + (discounts,)
    vs, adv = run(off, 1.0, 1.0, truncated=trunc)
    ref_vs, ref_adv = reference(*off, 1.0, 1.0, truncated=trunc)
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)


def test_no_gradient_flows():
    case = [torch.from_numpy(x).requires_grad_(True) for x in make_case(steps=4, batch=2, seed=1)]
    vs, adv = vtrace_targets(*case, 1.0, 1.0)
    assert not vs.requires_grad and not adv.requires_grad


# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ppo", [False, True], ids=["", "PPO_CLIP=0.1,PPO_EPOCHS=2"])
def test_trainer_vtrace_path_with_mixed_lengths_and_stale_steps(ppo):
    """A lag equal to MAX_POLICY_LAG is kept, one more drops the step and every step before it; the time-limit
    flags of the slots reach the V-trace targets; with PPO_CLIP each kept step's log mu reaches train() beside it,
    and each of PPO_EPOCHS steps is an update."""
    tmax, envs, gamma, max_lag, now = 5, 2, 0.95, 3, 20
    epochs = 2 if ppo else 1
    cfg = parse_settings(["ATARI_GAME=CartPole-v1", "DEVICE=cpu", "POLICY_LAG_CORRECTION=vtrace", "VTRACE_RHO=1.0",
                          "VTRACE_C=0.9", f"TIME_MAX={tmax}", f"ENVS_PER_AGENT={envs}", f"DISCOUNT={gamma}",
                          f"MAX_POLICY_LAG={max_lag}", "TRAINING_MIN_BATCH_SIZE=1000",
                          f"PPO_CLIP={0.1 if ppo else 0.0}", f"PPO_EPOCHS={epochs}"])
    layout = sb.Layout(max_agents=1, slots=8, envs=envs, time_max=tmax, state_shape=(4,), state_dtype="float32",
                       num_actions=2)
    sh = sb.SharedBuffers(mp.get_context("spawn"), layout)
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    net.version = now
    rng = np.random.default_rng(0)
    # (slot, steps, number of stale leading steps): full rollouts, partial ones (an agent stopping), one all stale
    plan = [(0, 5, 0), (1, 3, 0), (2, 5, 2), (3, 1, 0), (4, 5, 0), (5, 3, 3), (6, 3, 1)]
    ids = 0
    for slot, _steps, stale in plan:
        states = rng.normal(0, 1, (tmax + 1, envs, 4)).astype(np.float32)
        states[:, :, 0] = ids + np.arange((tmax + 1) * envs).reshape(tmax + 1, envs)  # a unique id per state
        ids += (tmax + 1) * envs
        sh.exp_states[slot] = states
        sh.exp_actions[slot] = rng.integers(0, 2, (tmax, envs))
        sh.exp_rewards[slot] = rng.uniform(-1, 1, (tmax, envs))
        sh.exp_done[slot] = rng.random((tmax, envs)) < 0.2
        sh.exp_truncated[slot] = (rng.random((tmax, envs)) < 0.25) & ~sh.exp_done[slot].astype(bool)
        sh.exp_logp[slot] = np.log(rng.uniform(0.2, 0.8, (tmax, envs)))
        versions = np.repeat(now - rng.integers(0, max_lag + 1, (tmax, 1)), envs, axis=1)
        versions[stale:stale + 1] = now - max_lag  # the first step kept is at the limit
        versions[:stale] = now - max_lag - 1 - np.arange(stale)[::-1, None]  # the last one dropped just above it
        sh.exp_version[slot] = versions
    srv = FakeServer(cfg, sh, net, [(0, slot, steps) for slot, steps, _ in plan])
    calls = []

    def fake_train(states, actions, returns, lr, beta, advantages=None, behaviour_logp=None):
        calls.append((states.clone(), actions.clone(), returns.clone(), advantages.clone(),
                      None if behaviour_logp is None else behaviour_logp.clone()))
        return {"loss_total": 0.0}

    net.train = fake_train
    trainer = ThreadTrainer(srv, 0)
    trainer.exit_flag = True  # drain what is queued, train once, and return
    trainer.run()

    assert sorted(srv.released) == [slot for slot, _, _ in plan]
    assert len(calls) == 1
    states, actions, vs, adv, logp = calls[0]
    assert (logp is not None) == ppo
    produced = sum(steps for _, steps, _ in plan) * envs
    dropped = sum(stale for _, _, stale in plan) * envs
    c = sh.counters
    assert c[sb.C_DROPPED] == dropped and c[sb.C_TRAINED] == produced - dropped == len(states)
    lags = np.concatenate([now - sh.exp_version[slot, stale:steps].ravel() for slot, steps, stale in plan])
    assert c[sb.C_UPDATES] == epochs and c[sb.C_LAG_MAX] == max_lag and c[sb.C_LAG_SUM] == lags.sum()
    assert srv.lag_seen == (pytest.approx(lags.mean()), max_lag)

    # expected: each rollout's fresh suffix on its own, the reference formulas, the network's current outputs
    expected = {}
    truncations = 0
    for slot, steps, stale in plan:
        m = steps - stale
        if m == 0:
            continue
        with torch.no_grad():
            x = torch.from_numpy(sh.exp_states[slot, stale:steps + 1].reshape(-1, 4).copy())
            logits, values = net.forward(x)
        values = values.view(m + 1, envs).numpy()
        pi = torch.softmax(logits[:m * envs], dim=1).numpy().reshape(m, envs, 2)
        acts = sh.exp_actions[slot, stale:steps]
        tlogp = np.log(np.take_along_axis(pi, acts[..., None], axis=2)[..., 0] + 1e-20)
        disc = gamma * (1.0 - sh.exp_done[slot, stale:steps].astype(np.float64))
        case = (sh.exp_logp[slot, stale:steps], tlogp, sh.exp_rewards[slot, stale:steps], values[:m], values[m],
                disc, 1.0, 0.9)
        trunc = sh.exp_truncated[slot, stale:steps].astype(bool)
        ref_vs, ref_adv = reference(*case, truncated=trunc)
        if trunc.any():  # the flags matter here: without them the targets differ
            truncations += 1
            assert not np.allclose(reference(*case)[0], ref_vs, rtol=1e-3)
        for t in range(m):
            for e in range(envs):
                key = int(sh.exp_states[slot, stale + t, e, 0])
                expected[key] = (sh.exp_states[slot, stale + t, e], acts[t, e], ref_vs[t, e], ref_adv[t, e],
                                 sh.exp_logp[slot, stale + t, e])
    assert len(expected) == len(states) and truncations >= 2
    for i in range(len(states)):
        state, action, ref_vs, ref_adv, mu = expected[int(states[i, 0])]
        if ppo:
            assert float(logp[i]) == float(mu)
        np.testing.assert_array_equal(states[i].numpy(), state)
        assert int(actions[i]) == int(action)
        assert float(vs[i]) == pytest.approx(ref_vs, rel=1e-4, abs=1e-5)
        assert float(adv[i]) == pytest.approx(ref_adv, rel=1e-4, abs=1e-5)


# ---------------------------------------------------------------------------------------------------------------
def test_cartpole_runs_with_vtrace(tmp_path, tag):
    rc, out, err = run_ga3c([*CARTPOLE, "POLICY_LAG_CORRECTION=vtrace", "AGENTS=3", "ENVS_PER_AGENT=2",
                             "TRAINING_MIN_BATCH_SIZE=32", "MAX_POLICY_LAG=2", "MAX_STEPS=3000",
                             "SAVE_MODELS=False"], tmp_path, timeout=180, env=tagged_env(tag))
    assert rc == 0, f"exit status {rc}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}"
    left = leftover_processes(tag)
    assert not left, "processes left behind by the run:\n" + "\n".join(left)
    s = summary(err)
    assert_accounted(s, err)
    assert s["steps"] >= 3000, s
    assert s["trained"] > 0 and s["updates"] > 0, s
