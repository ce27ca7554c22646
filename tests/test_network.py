"""NetworkVP and RMSPropTF against hand-computed / numpy references (CPU)."""

import copy
import logging
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from ga3c import NetworkVP as network_module
from ga3c.Config import Config
from ga3c.errors import ConfigError
from ga3c.NetworkVP import NetworkVP, clip_by_global_norm_, global_norm, native_bf16, resolve_device
from ga3c.RMSPropTF import RMSPropTF

CPU = torch.device('cpu')


def make_cfg(**kw):
    cfg = Config()
    cfg.MLP_HIDDEN_SIZE = 16
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def mlp(**kw):
    return NetworkVP(make_cfg(**kw), (4,), 3, CPU)


def small_cnn(**kw):
    return NetworkVP(make_cfg(**kw), (20, 24, 2), 4, CPU)  # (H, W, frames), not square: a swapped axis shows


def mlp_batch(b=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, 4, generator=g), torch.randint(0, 3, (b,), generator=g), torch.randn(b, generator=g))


def cnn_batch(b=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (b, 20, 24, 2), generator=g, dtype=torch.uint8),
            torch.randint(0, 4, (b,), generator=g), torch.randn(b, generator=g))


# ---------------------------------------------------------------- RMSPropTF
def np_rmsprop(p, g, ms, mom, lr, decay, momentum, eps):
    ms = decay * ms + (1 - decay) * g * g
    mom = momentum * mom + lr * g / np.sqrt(ms + eps)
    return p - mom, ms, mom


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_rmsprop_tf_matches_numpy_two_steps(momentum):
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=(3, 4)).astype(np.float64)
    grads = [rng.normal(size=(3, 4)), rng.normal(size=(3, 4)) * 3]
    lr, decay, eps = 0.01, 0.9, 0.1
    p = torch.tensor(p0, requires_grad=True)
    opt = RMSPropTF([p], lr=lr, decay=decay, momentum=momentum, eps=eps)
    ref, ms, mom = p0.copy(), np.ones_like(p0), np.zeros_like(p0)  # TF: mean square starts at ONE
    for i, g in enumerate(grads):
        if i == 0:
            opt.step(grads=[torch.tensor(g)])
        else:  # the .grad path
            p.grad = torch.tensor(g)
            opt.step()
        ref, ms, mom = np_rmsprop(ref, g, ms, mom, lr, decay, momentum, eps)
        np.testing.assert_allclose(p.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(opt.state[p]['ms'].numpy(), ms, rtol=1e-12)


def test_rmsprop_tf_first_step_by_hand():
    # g = 2, ms = 0.99 * 1 + 0.01 * 4 = 1.03; step = 0.1 * 2 / sqrt(1.03 + 0.1)
    p = torch.tensor([1.0], dtype=torch.float64)
    RMSPropTF([p], lr=0.1, decay=0.99, momentum=0.0, eps=0.1).step(grads=[torch.tensor([2.0], dtype=torch.float64)])
    assert p.item() == pytest.approx(1.0 - 0.2 / np.sqrt(1.13), abs=1e-15)


def test_rmsprop_tf_none_grad_skips_and_state_dict_round_trips():
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    opt = RMSPropTF([a, b], lr=0.1, momentum=0.5)
    opt.step(grads=[torch.ones(2), None])
    assert b.abs().sum() == 0 and b not in opt.state  # no gradient: untouched, as TF's apply_gradients
    a2, b2 = a.detach().clone(), b.detach().clone()
    opt2 = RMSPropTF([a2, b2], lr=0.1, momentum=0.5)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for o in (opt, opt2):
        o.step(grads=[torch.full((2,), 2.0), torch.ones(2)])
    assert torch.equal(a, a2) and torch.equal(b, b2)
    with pytest.raises(ValueError):
        opt.step(grads=[torch.ones(2)])


# ---------------------------------------------------------------- losses vs numpy
def np_losses(logits, v, a, r, beta, log_eps, min_policy, use_log_softmax, adv=None, normalize=False, coef=1.0,
              mean=False):
    logits, v, r = (np.asarray(x, dtype=np.float64) for x in (logits, v, r))
    n, na = logits.shape
    z = logits - logits.max(axis=1, keepdims=True)
    sm = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    if use_log_softmax:
        pi, logpi = sm, z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    else:
        pi = (sm + min_policy) / (1 + min_policy * na)
        logpi = np.log(pi + log_eps)
    adv = r - v if adv is None else np.asarray(adv, dtype=np.float64)
    if normalize:  # per batch, the sample standard deviation (n - 1), as torch's .std() in PPO/A2C implementations
        adv = (adv - adv.sum() / n) / (np.sqrt(((adv - adv.sum() / n) ** 2).sum() / (n - 1)) + 1e-8)
    ent = -(pi * logpi).sum(axis=1)
    lp = -(logpi[np.arange(n), a] * adv + beta * ent).sum()
    lv = coef * 0.5 * ((r - v) ** 2).sum()
    if mean:
        lp, lv = lp / n, lv / n
    return lp, lv, ent.mean(), pi


@pytest.mark.parametrize('variant', [
    dict(),
    dict(LOG_EPSILON=0.05),
    dict(MIN_POLICY=0.1),
    dict(USE_LOG_SOFTMAX=True),
    dict(USE_LOG_SOFTMAX=True, MIN_POLICY=0.1),  # the original ignores MIN_POLICY with log_softmax
    dict(advantages=True),
    dict(NORMALIZE_ADVANTAGES=True),
    dict(NORMALIZE_ADVANTAGES=True, advantages=True),
    dict(VALUE_LOSS_COEF=0.25),
    dict(LOSS_REDUCTION='mean'),
    dict(LOSS_REDUCTION='mean', VALUE_LOSS_COEF=0.5, NORMALIZE_ADVANTAGES=True, USE_LOG_SOFTMAX=True),
])
def test_losses_match_numpy(variant):
    variant = dict(variant)
    use_adv = variant.pop('advantages', False)
    net = mlp(**variant)
    cfg = net.cfg
    x, a, r = mlp_batch(7)
    with torch.no_grad():  # push logits far apart, so that LOG_EPSILON and MIN_POLICY matter
        net.model.policy.weight.mul_(20.0)
    with torch.no_grad():
        logits, v = net.forward(x)
    adv = torch.linspace(-1, 2, 7) if use_adv else None
    lp, lv, ent, pi = np_losses(logits.numpy(), v.numpy(), a.numpy(), r.numpy(), 0.05, cfg.LOG_EPSILON,
                                cfg.MIN_POLICY, cfg.USE_LOG_SOFTMAX, None if adv is None else adv.numpy(),
                                cfg.NORMALIZE_ADVANTAGES, cfg.VALUE_LOSS_COEF, cfg.LOSS_REDUCTION == 'mean')
    probs, values = net.predict(x)
    np.testing.assert_allclose(probs.numpy(), pi, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(values.numpy(), v.numpy(), rtol=1e-6)
    out = net.train(x, a, r, lr=1e-3, beta=0.05, advantages=adv)
    assert out['loss_policy'] == pytest.approx(lp, rel=1e-5, abs=1e-5)
    assert out['loss_value'] == pytest.approx(lv, rel=1e-5)
    assert out['loss_total'] == pytest.approx(lp + lv, rel=1e-5, abs=1e-5)
    assert out['entropy'] == pytest.approx(ent, rel=1e-5)
    assert out['value_mean'] == pytest.approx(float(v.mean()), rel=1e-5, abs=1e-7)
    assert out['batch_size'] == 7


# ---------------------------------------------------------------- PPO's clipped surrogate (PPO_CLIP, PPO_EPOCHS)
def np_ppo_policy_loss(logits, a, adv, mu_logp, clip, beta, log_eps, min_policy, normalize=False, mean=False):
    """Schulman et al. 2017, eq. 7, summed (or averaged) over the batch, plus the entropy bonus; the ratio taken
    against the acting policy's log-probabilities, log pi(a) in the agents' form log(pi(a) + 1e-20)."""
    logits = np.asarray(logits, dtype=np.float64)
    n, na = logits.shape
    z = logits - logits.max(axis=1, keepdims=True)
    pi = (np.exp(z) / np.exp(z).sum(axis=1, keepdims=True) + min_policy) / (1 + min_policy * na)
    adv = np.asarray(adv, dtype=np.float64)
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(np.log(pi[np.arange(n), a] + 1e-20) - np.asarray(mu_logp, dtype=np.float64))
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - clip, 1 + clip) * adv)
    ent = -(pi * np.log(pi + log_eps)).sum(axis=1)
    lp = -(surrogate + beta * ent).sum()
    kl = ((ratio - 1) - np.log(ratio)).mean()
    return (lp / n if mean else lp), np.mean(np.abs(ratio - 1) > clip), kl, ratio


def ppo_case(net, n=8, seed=2):
    """A batch, its advantages, and acting log-probabilities whose ratios to the network's policy run from 0.5
    to 1.6: inside and outside the clip range on both sides, for advantages of both signs."""
    x, a, r = mlp_batch(n, seed)
    with torch.no_grad():
        logits, _ = net.forward(x)
    pi_a = torch.softmax(logits, dim=1).gather(1, a.view(-1, 1)).squeeze(1)
    if net.min_policy:
        pi_a = (pi_a + net.min_policy) / (1 + net.min_policy * net.num_actions)
    ratios = torch.linspace(0.5, 1.6, n)
    adv = torch.tensor([1.0, -1.0] * (n // 2)) * torch.linspace(0.5, 2.0, n)
    return x, a, r, adv, torch.log(pi_a + 1e-20) - torch.log(ratios), logits


@pytest.mark.parametrize('variant', [dict(), dict(MIN_POLICY=0.1), dict(NORMALIZE_ADVANTAGES=True),
                                     dict(LOSS_REDUCTION='mean')])
def test_ppo_clipped_surrogate_matches_numpy(variant):
    net = mlp(PPO_CLIP=0.2, **variant)
    x, a, r, adv, mu, logits = ppo_case(net)
    lp, frac, kl, ratio = np_ppo_policy_loss(logits.numpy(), a.numpy(), adv.numpy(), mu.numpy(), 0.2, 0.05,
                                             net.log_epsilon, net.min_policy, net.normalize_advantages,
                                             net.mean_loss)
    np.testing.assert_allclose(ratio, np.linspace(0.5, 1.6, 8), rtol=1e-5)
    assert 0 < frac < 1
    out = net.train(x, a, r, lr=1e-3, beta=0.05, advantages=adv, behaviour_logp=mu)
    assert out['loss_policy'] == pytest.approx(lp, rel=1e-5, abs=1e-6)
    assert out['clip_fraction'] == pytest.approx(frac) and out['approx_kl'] == pytest.approx(kl, rel=1e-4)


def test_ppo_gradient_vanishes_exactly_where_the_ratio_is_clipped():
    """d loss / d logits: zero (bar the entropy, here off) for a sample whose ratio is clipped on the side its
    advantage pushes, -A * r * (onehot(a) - pi) for the others (the gradient of -r * A)."""
    net = mlp(PPO_CLIP=0.2)
    x, a, r, adv, mu, logits = ppo_case(net)
    logits = logits.clone().requires_grad_(True)
    _, values = net.forward(x)
    out = net.losses(logits, values.detach(), a, r, 0.0, adv, mu)
    (grad,) = torch.autograd.grad(out['loss_policy'], logits)
    pi = torch.softmax(logits.detach(), dim=1).double().numpy()
    ratio = np.linspace(0.5, 1.6, 8)
    flat = (adv.numpy() > 0) & (ratio > 1.2) | (adv.numpy() < 0) & (ratio < 0.8)
    assert flat.any() and (~flat).any()
    onehot = np.eye(3)[a.numpy()]
    want = -(adv.numpy() * ratio)[:, None] * (onehot - pi)
    want[flat] = 0.0
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-4, atol=1e-7)


def test_ppo_on_policy_step_is_the_originals_policy_gradient():
    """Where the acting policy is the current one (r = 1), the clipped surrogate's gradient is that of
    log pi(a) * A: one step with PPO_CLIP leaves the same weights as one without (LOG_EPSILON=0 to match the
    agents' log form)."""
    plain, ppo = mlp(LOG_EPSILON=0.0), mlp(LOG_EPSILON=0.0, PPO_CLIP=0.2)
    x, a, r = mlp_batch(8, 3)
    probs, _ = plain.predict(x)
    mu = torch.log(probs.gather(1, a.view(-1, 1)).squeeze(1) + 1e-20)
    plain.train(x, a, r, lr=1e-2, beta=0.01)
    out = ppo.train(x, a, r, lr=1e-2, beta=0.01, behaviour_logp=mu)
    assert out['clip_fraction'] == 0.0 and abs(out['approx_kl']) < 1e-6
    for p, q in zip(plain.model.parameters(), ppo.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-7)
    assert not torch.equal(plain.model.policy.weight, mlp().model.policy.weight)  # the step did move them


@pytest.mark.parametrize('network', ['mlp', 'lstm'])
def test_ppo_epochs_are_steps_from_the_last_weights_with_the_first_advantages(network):
    """PPO_EPOCHS=3 in one call = three single steps, each from the weights the one before left, all with the
    advantages R - V of the weights before the first (not recomputed); three updates on the version."""
    kw = dict(PPO_CLIP=0.2, NETWORK_TYPE='lstm', LSTM_SIZE=8) if network == 'lstm' else dict(PPO_CLIP=0.2)
    three, one = mlp(PPO_EPOCHS=3, **kw), mlp(**kw)
    x, a, r = mlp_batch(8, 4)
    seq = [(torch.zeros(4, 8), torch.zeros(4, 8), torch.ones(2, 4))] if network == 'lstm' else None
    extra = dict(sequences=seq) if seq else {}
    with torch.no_grad():
        out = one.forward(x, state=seq[0][:2], notdone=seq[0][2]) if seq else one.forward(x)
    adv0 = r - out[1].float()
    mu = torch.full((8,), -1.1)
    got = three.train(x, a, r, lr=1e-2, beta=0.01, behaviour_logp=mu, **extra)
    steps = [one.train(x, a, r, lr=1e-2, beta=0.01, advantages=adv0, behaviour_logp=mu, **extra) for _ in range(3)]
    for p, q in zip(one.model.parameters(), three.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-7)
    assert three.version == 3 and got['version'] == 3.0
    assert got['loss_policy'] == pytest.approx(steps[0]['loss_policy'], rel=1e-5)  # the first step's losses
    assert got['clip_fraction'] == pytest.approx(np.mean([s['clip_fraction'] for s in steps]))
    assert steps[-1]['clip_fraction'] > 0  # the later steps moved the policy far enough to clip


def test_ppo_needs_the_acting_log_probabilities():
    with pytest.raises(ValueError, match="acting policy"):
        mlp(PPO_CLIP=0.2).train(*mlp_batch(4), lr=1e-3, beta=0.01)


def test_log_epsilon_keeps_gradient_below_epsilon():
    # log(pi + eps), the paper's form: a chosen action with pi (4.5e-5) < eps still gets a gradient (a clamp would not)
    net = mlp(LOG_EPSILON=1e-3)
    with torch.no_grad():
        net.model.policy.bias.copy_(torch.tensor([0.0, -10.0, 0.0]))
    x, _, r = mlp_batch(4)
    a = torch.ones(4, dtype=torch.int64)
    before = net.model.policy.bias.detach().clone()
    net.train(x, a, r, lr=1e-2, beta=0.0)
    assert net.model.policy.bias[1] != before[1]


# ---------------------------------------------------------------- the training step
def expected_grads(net, x, a, r, beta):
    params = [p.detach().clone().requires_grad_(True) for p in net.model.parameters()]
    logits, v = net.forward(x, params)
    out = net.losses(logits, v, a, r, beta)
    gp = torch.autograd.grad(out['loss_policy'], params, retain_graph=True, allow_unused=True)
    gv = torch.autograd.grad(out['loss_value'], params, allow_unused=True)
    return params, gp, gv


def combine(gp, gv):
    """The gradient of loss_p + loss_v from the gradients of each (None: no gradient)."""
    return [(p if p is not None else 0) + (v if v is not None else 0) for p, v in zip(gp, gv, strict=True)]


def np_apply(p, g, lr, cfg, ms=None):
    ms = np.ones_like(p) if ms is None else ms
    new, ms, _ = np_rmsprop(p, g, ms, 0.0, lr, cfg.RMSPROP_DECAY, 0.0, cfg.RMSPROP_EPSILON)
    return new, ms


@pytest.mark.parametrize('maker,batch', [(mlp, mlp_batch), (small_cnn, cnn_batch)])
def test_train_step_applies_rmsprop_tf_to_autograd_grads(maker, batch):
    net = maker(RMSPROP_EPSILON=0.1)
    x, a, r = batch()
    lr = 0.01
    for step in range(2):
        params, gp, gv = expected_grads(net, x, a, r, 0.01)
        grads = combine(gp, gv)
        ms_before = [net.optimizers[0].state[p]['ms'].numpy().copy() if step else None
                     for p in net.model.parameters()]
        out = net.train(x, a, r, lr=lr, beta=0.01)
        assert net.version == step + 1 == out['version']
        assert out['grad_norm'] == pytest.approx(float(global_norm(grads)), rel=1e-5)
        for p0, g, p1, ms in zip(params, grads, net.model.parameters(), ms_before, strict=True):
            ref, _ = np_apply(p0.detach().double().numpy(), g.double().numpy(), lr, net.cfg, ms)
            np.testing.assert_allclose(p1.detach().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_clip_by_global_norm():
    g = [torch.full((3,), 3.0), torch.full((2, 2), 4.0)]
    norm = clip_by_global_norm_(g, 1.0)
    assert float(norm) == pytest.approx(np.sqrt(27 + 64))
    assert float(global_norm(g)) == pytest.approx(1.0, rel=1e-6)
    small = [torch.tensor([0.3, 0.4])]
    clip_by_global_norm_(small, 1.0)
    assert torch.equal(small[0], torch.tensor([0.3, 0.4]))


def test_train_clips_by_global_norm_and_counts_the_update():
    net = mlp(USE_GRAD_CLIP=True, GRAD_CLIP_NORM=0.01)
    x, a, r = mlp_batch()
    params, gp, gv = expected_grads(net, x, a, r, 0.01)
    grads = combine(gp, gv)
    pre = float(global_norm(grads))
    assert pre > 0.01
    clipped = [g * (0.01 / pre) for g in grads]
    assert float(global_norm(clipped)) == pytest.approx(0.01, rel=1e-5)
    out = net.train(x, a, r, lr=0.1, beta=0.01)
    assert out['grad_norm'] == pytest.approx(pre, rel=1e-5)
    assert net.version == 1
    for p0, g, p1 in zip(params, clipped, net.model.parameters(), strict=True):
        ref, _ = np_apply(p0.detach().double().numpy(), g.double().numpy(), 0.1, net.cfg)
        np.testing.assert_allclose(p1.detach().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_dual_rmsprop_uses_two_optimizers():
    net = mlp(DUAL_RMSPROP=True)
    assert len(net.optimizers) == 2
    x, a, r = mlp_batch()
    params, gp, gv = expected_grads(net, x, a, r, 0.01)
    net.train(x, a, r, lr=0.05, beta=0.01)
    assert net.version == 1
    names = [n for n, _ in net.model.named_parameters()]
    for name, p0, g1, g2, p1 in zip(names, params, gp, gv, net.model.parameters(), strict=True):
        ref = p0.detach().double().numpy()
        for opt_i, g in enumerate((g1, g2)):
            if g is None:  # the value head has no policy-loss gradient, and vice versa
                assert p1 not in net.optimizers[opt_i].state
                continue
            step, _ = np_apply(np.zeros_like(ref), g.double().numpy(), 0.05, net.cfg)
            ref = ref + step
        np.testing.assert_allclose(p1.detach().numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=name)
    assert gp[names.index('value.weight')] is None and gv[names.index('policy.weight')] is None


def test_normalized_advantages_of_one_sample_are_zero():
    # a batch of one has no standard deviation: its advantage is centred only (0), not NaN
    net = mlp(NORMALIZE_ADVANTAGES=True, VALUE_LOSS_COEF=2.0)
    x, a, r = mlp_batch(1)
    with torch.no_grad():
        logits, v = net.forward(x)
    out = net.losses(logits, v, a, r, 0.0)
    assert float(out['loss_policy']) == 0.0
    assert float(out['loss_value']) == pytest.approx(float((r - v).square().sum()), rel=1e-6)


# ---------------------------------------------------------------- Adam (OPTIMIZER='adam')
def np_adam(p, g, m, v, k, lr, eps, b1=0.9, b2=0.999):
    """Kingma & Ba 2015, Algorithm 1, as torch.optim.Adam writes it (epsilon added to sqrt(v_hat))."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** k), v / (1 - b2 ** k)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def test_adam_first_step_by_hand():
    # step 1: m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps): 1 - 0.1 * 2 / (2 + 1e-5)
    net = mlp(OPTIMIZER='adam', ADAM_EPSILON=1e-5)
    x, a, r = mlp_batch()
    params, gp, gv = expected_grads(net, x, a, r, 0.01)
    grads = combine(gp, gv)
    net.train(x, a, r, lr=0.1, beta=0.01)
    for p0, g, p1 in zip(params, grads, net.model.parameters(), strict=True):
        g = g.double().numpy()
        ref = p0.detach().double().numpy() - 0.1 * g / (np.abs(g) + 1e-5)
        np.testing.assert_allclose(p1.detach().numpy(), ref, rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in net.model.parameters())  # .grad only lives during the step


def test_adam_train_steps_match_numpy_and_the_checkpoint_restores_its_state(caplog):
    net = small_cnn(OPTIMIZER='adam', ADAM_EPSILON=1e-3)
    x, a, r = cnn_batch()
    lrs = (0.01, 0.003)
    ms = vs = None
    for k, lr in enumerate(lrs, start=1):
        params, gp, gv = expected_grads(net, x, a, r, 0.01)
        grads = combine(gp, gv)
        ms = ms or [np.zeros(p.shape) for p in params]
        vs = vs or [np.zeros(p.shape) for p in params]
        net.train(x, a, r, lr=lr, beta=0.01)
        for i, (p0, g, p1) in enumerate(zip(params, grads, net.model.parameters(), strict=True)):
            ref, ms[i], vs[i] = np_adam(p0.detach().double().numpy(), g.double().numpy(), ms[i], vs[i], k, lr, 1e-3)
            np.testing.assert_allclose(p1.detach().numpy(), ref, rtol=1e-4, atol=1e-6)
    state = copy.deepcopy(net.get_state())
    assert state['optimizer'] == 'adam'
    other = small_cnn(OPTIMIZER='adam', ADAM_EPSILON=1e-3, SEED=5)
    other.set_state(state)
    for p, m in zip(other.model.parameters(), ms, strict=True):
        np.testing.assert_allclose(other.optimizers[0].state[p]['exp_avg'].numpy(), m, rtol=1e-4, atol=1e-8)
        assert float(other.optimizers[0].state[p]['step']) == 2
    net.train(x, a, r, lr=0.001, beta=0.01)
    other.train(x, a, r, lr=0.001, beta=0.01)
    for p, q in zip(net.model.parameters(), other.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    # a checkpoint of TF's RMSProp (or of one from before OPTIMIZER) in an Adam run: a fresh Adam, one warning line
    rms = small_cnn()
    old = rms.get_state()
    del old['optimizer']
    with caplog.at_level(logging.WARNING, logger='ga3c.NetworkVP'):
        other.set_state(old)
    assert 'OPTIMIZER changed' in caplog.text and not other.optimizers[0].state
    assert isinstance(other.optimizers[0], torch.optim.Adam)


def test_adam_refuses_dual_rmsprop():
    with pytest.raises(ConfigError, match='DUAL_RMSPROP'):
        mlp(OPTIMIZER='adam', DUAL_RMSPROP=True)


# ---------------------------------------------------------------- shapes, scaling, precision
def test_pong_network_parameter_count():
    net = NetworkVP(make_cfg(), (84, 84, 4), 6, CPU)
    # TF 'SAME' padding: 84 -> ceil(84/4) = 21 -> ceil(21/2) = 11
    conv1 = 8 * 8 * 4 * 16 + 16
    conv2 = 4 * 4 * 16 * 32 + 32
    dense = 11 * 11 * 32 * 256 + 256
    heads = 256 * 6 + 6 + 256 * 1 + 1
    assert net.num_parameters() == conv1 + conv2 + dense + heads == 1_005_623
    assert net.kind == 'cnn'
    assert net.model.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    probs, values = net.predict(torch.zeros(2, 84, 84, 4, dtype=torch.uint8))
    assert probs.shape == (2, 6) and values.shape == (2,)


def tf_same_conv(x, w, b, stride):
    """TensorFlow's conv2d(padding='SAME') on NHWC x, written out: out = ceil(in / stride), the padding split with
    the odd pixel at the bottom/right; w in torch's (out, in, kh, kw)."""
    n, h, wd, _ = x.shape
    _, _, kh, kw = w.shape
    oh, ow = -(-h // stride), -(-wd // stride)
    ph, pw = max((oh - 1) * stride + kh - h, 0), max((ow - 1) * stride + kw - wd, 0)
    xp = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    hwio = w.transpose(0, 2, 3, 1)
    out = np.empty((n, oh, ow, w.shape[0]))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.einsum('nhwc,ohwc->no', patch, hwio)
    return out + b


def test_cnn_is_the_originals_graph_on_frames_last_states():
    """The original's TensorFlow network on (B, H, W, frames) states, in numpy: x / 128 - 1, conv 16 8x8 stride 4
    SAME, ReLU, conv 32 4x4 stride 2 SAME, ReLU, flattened in NHWC order, dense 256, ReLU, the two heads. H != W,
    so a swapped axis or a flattening in another order shows."""
    net = small_cnn()
    x, _, _ = cnn_batch(3)
    c1w, c1b, c2w, c2b, fw, fb, pw, pb, vw, vb = (p.detach().double().numpy() for p in net._params)
    h = np.maximum(tf_same_conv(x.double().numpy() / 128.0 - 1.0, c1w, c1b, 4), 0)
    h = np.maximum(tf_same_conv(h, c2w, c2b, 2), 0)
    h = np.maximum(h.reshape(len(h), -1) @ fw.T + fb, 0)
    logits, values = net.forward(x)
    np.testing.assert_allclose(logits.detach().numpy(), h @ pw.T + pb, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values.detach().numpy(), (h @ vw.T + vb)[:, 0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_uint8_states_are_scaled_exactly_as_x_over_128_minus_1(precision):
    """uint8 states take a shortcut ((x - 128) as int8, conv1's weights / 128); it must give the network's output
    bit for bit as the states scaled to x / 128 - 1 in float32 do, in fp32 and in bf16."""
    net = small_cnn(PRECISION=precision)
    x, _, _ = cnn_batch(7)
    with torch.no_grad():
        got = net.forward(x)
        want = net.forward(x.float() / 128.0 - 1.0)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_predict_shapes_and_probabilities():
    net = small_cnn(MIN_POLICY=0.05)
    x, _, _ = cnn_batch(9)
    probs, values = net.predict(x)
    assert probs.shape == (9, 4) and values.shape == (9,)
    assert probs.dtype == values.dtype == torch.float32 and probs.device.type == 'cpu'
    np.testing.assert_allclose(probs.sum(1).numpy(), 1.0, rtol=1e-6)
    assert float(probs.min()) >= 0.05 / 1.2 - 1e-7
    p1, v1 = net.predict(x[0])  # one state without a batch dimension
    assert p1.shape == (1, 4)
    torch.testing.assert_close(p1[0], probs[0])


def test_uint8_states_are_scaled_on_the_device():
    net = small_cnn()
    x, _, _ = cnn_batch(3)
    p_u8, v_u8 = net.predict(x)
    p_f, v_f = net.predict(x.float() / 128.0 - 1.0)
    torch.testing.assert_close(p_u8, p_f)
    torch.testing.assert_close(v_u8, v_f)
    p_raw, _ = net.predict(x.float())  # unscaled floats give another answer: the scaling did happen
    assert not torch.allclose(p_raw, p_u8)


def test_seeded_initialisation():
    a, b, c = mlp(SEED=3), mlp(SEED=3), mlp(SEED=4)
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.model.fc1.weight, c.model.fc1.weight)
    bound = 1 / np.sqrt(4)
    assert float(a.model.fc1.weight.detach().abs().max()) <= bound


def _gram(w):
    """W W^T or W^T W, whichever is the smaller: gain^2 times the identity for an orthogonal W times gain."""
    w = w.detach().double().reshape(w.shape[0], -1).numpy()
    return w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w


@pytest.mark.parametrize('maker, network', [(mlp, 'feedforward'), (small_cnn, 'feedforward'), (mlp, 'lstm')])
def test_orthogonal_initialisation(maker, network):
    net = maker(WEIGHT_INIT='orthogonal', NETWORK_TYPE=network, LSTM_SIZE=8, SEED=3)
    m = net.model
    gains = {'policy.weight': 0.01, 'value.weight': 1.0, 'lstm.w_ih': 1.0, 'lstm.w_hh': 1.0}
    weights = [(n, p) for n, p in m.named_parameters() if p.dim() > 1 or n.startswith('lstm.w')]
    assert len(weights) == (3 if maker is mlp else 4) + (2 if network == 'lstm' else 0) + 1
    for name, p in weights:
        g = gains.get(name, np.sqrt(2))
        gram = _gram(p)
        np.testing.assert_allclose(gram, g * g * np.eye(gram.shape[0]), atol=1e-5 * g * g, err_msg=name)
    for name, p in m.named_parameters():
        if p.dim() == 1:
            assert not p.detach().any(), name
    # The policy head's gain 0.01: the first policy is uniform to within 1% on any state
    x = mlp_batch()[0] if maker is mlp else cnn_batch(8)[0]
    p = net.predict(x)[0]  # the LSTM's from a zero state
    np.testing.assert_allclose(p.numpy(), 1.0 / p.shape[1], rtol=0.01)
    # Seeded: the same seed gives the same weights, another seed others; the default is still the original's
    again, other = maker(WEIGHT_INIT='orthogonal', SEED=3), maker(WEIGHT_INIT='orthogonal', SEED=4)
    assert torch.equal(again.model.policy.weight, maker(WEIGHT_INIT='orthogonal', SEED=3).model.policy.weight)
    assert not torch.equal(again.model.policy.weight, other.model.policy.weight)
    original = maker(SEED=3).model.policy.weight
    assert Config.WEIGHT_INIT == 'original' and bool(original.detach().any())
    gram = _gram(original)
    assert not np.allclose(gram, gram[0, 0] * np.eye(gram.shape[0]), atol=1e-3)


def test_bf16_runs_and_is_close_to_fp32():
    n32, n16 = small_cnn(), small_cnn(PRECISION='bf16')
    x, a, r = cnn_batch(8)
    p32, v32 = n32.predict(x)
    p16, v16 = n16.predict(x)
    assert p16.dtype == torch.float32
    torch.testing.assert_close(p16, p32, atol=2e-2, rtol=0)
    torch.testing.assert_close(v16, v32, atol=3e-2, rtol=0)
    o32, o16 = n32.train(x, a, r, 1e-3, 0.01), n16.train(x, a, r, 1e-3, 0.01)
    assert o16['loss_total'] == pytest.approx(o32['loss_total'], rel=5e-2, abs=5e-2)
    assert all(p.dtype == torch.float32 for p in n16.model.parameters())
    assert n16.version == 1


def _autocast_prediction(net, x):
    """What predict computes, by autocast from the fp32 parameters on every call (no cached bf16 copies)."""
    with torch.inference_mode():
        logits, values = net.forward(x)[:2]
        return torch.softmax(logits.float(), dim=1), values.float()


@pytest.mark.parametrize("network", ["feedforward", "lstm"])
def test_bf16_prediction_casts_the_weights_once_per_change_and_never_serves_stale_ones(network):
    """predict keeps bf16 copies of the weights: its output must equal autocast's from the current fp32 weights,
    bit for bit, after every way the weights change (a training step, a checkpoint, Ray's load_state_dict)."""
    kw = dict(PRECISION='bf16', NETWORK_TYPE=network, LSTM_SIZE=8)
    net, other = small_cnn(**kw), small_cnn(SEED=7, **kw)
    x, a, r = cnn_batch(6)
    seq = [(torch.zeros(6, 8), torch.zeros(6, 8), torch.ones(1, 6))] if network == "lstm" else None

    def check():
        pi, v = net.predict(x)[:2]
        ref_pi, ref_v = _autocast_prediction(net, x)
        assert torch.equal(pi, ref_pi) and torch.equal(v, ref_v)
        return pi

    first = check()
    assert torch.equal(check(), first)  # nothing changed: the cached copies serve again
    net.train(x, a, r, 1e-2, 0.01, sequences=seq)
    assert not torch.equal(check(), first)
    net.set_state(other.get_state())
    check()
    with torch.no_grad():
        net.model.load_state_dict({k: v * 0.5 for k, v in other.model.state_dict().items()})
    check()


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_where_native(monkeypatch, native):
    monkeypatch.setattr(network_module, "native_bf16", lambda device: native)
    net = small_cnn(PRECISION='auto')
    assert net.precision == ('bf16' if native else 'fp32') and net.bf16 is native
    x, _, _ = cnn_batch(4)
    logits, values = net.forward(x)  # as computed: bf16 under autocast
    assert logits.dtype == (torch.bfloat16 if native else torch.float32)
    p_auto, _ = net.predict(x)
    p_ref, _ = small_cnn(PRECISION='bf16' if native else 'fp32').predict(x)  # same seed, same weights
    assert torch.equal(p_auto, p_ref)


def test_explicit_precision_is_kept_and_emulated_bf16_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(network_module, "native_bf16", lambda device: False)
    monkeypatch.setattr(network_module, "_warned_precision", set())
    with caplog.at_level(logging.WARNING, logger="ga3c.NetworkVP"):
        assert small_cnn(PRECISION='bf16').precision == 'bf16'
        assert small_cnn(PRECISION='bf16').bf16
        assert small_cnn(PRECISION='fp32').precision == 'fp32'
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "without native bfloat16" in warnings[0] and "PRECISION='auto'" in warnings[0]


@pytest.mark.parametrize("machine, helpers, flags, expected", [
    ("x86_64", (False, False), {"avx2"}, False),  # AVX2 only (Zen 1-3, most desktops before 2023)
    ("x86_64", (True, False), {"avx512_bf16"}, True),  # Zen 4, Cooper Lake
    ("x86_64", (False, True), {"amx_bf16"}, True),  # Sapphire Rapids and later
    ("x86_64", None, {"avx2", "avx512f"}, False),  # a torch without the helpers: /proc/cpuinfo decides
    ("x86_64", None, {"avx512f", "avx512_bf16"}, True),
    ("aarch64", None, {"fp", "asimd", "bf16"}, True),  # Armv8.6 BF16
    ("aarch64", None, {"fp", "asimd"}, False),
    ("riscv64", None, {"bf16"}, False),
])
def test_native_bf16_reads_the_cpu(monkeypatch, machine, helpers, flags, expected):
    monkeypatch.setattr(network_module.platform, "machine", lambda: machine)
    monkeypatch.setattr(network_module, "_cpu_flags", lambda: flags)
    for name, value in zip(("_is_avx512_bf16_supported", "_is_amx_tile_supported"), helpers or (None, None),
                           strict=True):
        if helpers is None:
            monkeypatch.delattr(torch.cpu, name, raising=False)
        else:
            monkeypatch.setattr(torch.cpu, name, lambda value=value: value)
    assert native_bf16(CPU) is expected


def test_native_bf16_on_this_cpu_agrees_with_proc_cpuinfo():
    """The real check on this machine against an independent reading of the kernel's flags."""
    import platform
    if platform.machine() != "x86_64" or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("reads the x86 flags of Linux's /proc/cpuinfo")
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split(":", 1)[1].split()
    assert native_bf16(CPU) == bool({"avx512_bf16", "amx_bf16"} & set(flags))


def test_native_bf16_on_a_gpu_asks_for_hardware_support(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: asked.append(
        including_emulation) or False)
    assert native_bf16(torch.device("cuda", 0)) is False and asked == [False]


def test_concurrent_train_and_predict():
    torch.manual_seed(0)
    net = small_cnn()
    x, a, r = cnn_batch(16)
    errors, stop = [], threading.Event()

    def trainer():
        try:
            for _ in range(15):
                net.train(x, a, r, 1e-3, 0.01)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def predictor():
        try:
            while not stop.is_set():
                p, _ = net.predict(x[:4])
                assert torch.isfinite(p).all()
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=trainer) for _ in range(2)]
    pt = threading.Thread(target=predictor)
    pt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    pt.join()
    assert not errors, errors
    assert net.version == 30


# ---------------------------------------------------------------- devices
def test_resolve_device(monkeypatch, caplog):
    assert resolve_device('cpu') == CPU
    assert resolve_device('cpu:0') == CPU
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    for name in ('gpu:0', 'gpu', 'cuda', 'cuda:1'):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert resolve_device(name) == CPU
        warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
        assert len(warnings) == 1 and 'CPU' in warnings[0].getMessage() and '\n' not in warnings[0].getMessage()
    caplog.clear()
    resolve_device('cpu:0')
    assert not caplog.records
    with pytest.raises(ConfigError):
        resolve_device('tpu:0')


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA here')
def test_resolve_device_gpu():
    assert resolve_device('gpu:0') == torch.device('cuda', 0)
    assert resolve_device('cuda') == torch.device('cuda', 0)


def _rss_anon_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon")) / 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status") or network_module._glibc() is None,
                    reason="reads Linux's /proc and calls glibc's malloc_trim")
def test_release_freed_memory_gives_back_what_keep_freed_memory_keeps():
    """With keep_freed_memory's settings (blocks from the heap, never trimmed), freed blocks below a live one stay
    resident; release_freed_memory() gives their pages back, and keeps the live blocks' contents."""
    network_module.keep_freed_memory(Config.MALLOC_ARENAS)
    blocks = [np.full(1 << 20, i % 251, dtype=np.uint8) for i in range(192)]  # 192 MiB in 1 MiB heap blocks
    kept = blocks[::16]  # a live block every 16 MiB: the heap's top cannot shrink past them
    del blocks
    before = _rss_anon_mb()
    assert network_module.release_freed_memory()
    after = _rss_anon_mb()
    assert before - after > 100, (before, after)  # of the 180 MiB freed
    assert all(int(b[0]) == int(b[-1]) == (16 * i) % 251 for i, b in enumerate(kept))


_ARENA_PROBE = """
import ctypes, sys, threading
from ga3c.NetworkVP import _glibc, keep_freed_memory
keep_freed_memory(int(sys.argv[1]))
start = threading.Barrier(8)
def work():
    start.wait()  # all eight threads alive at once, each asking glibc for memory
    blocks = [ctypes.create_string_buffer(4096) for _ in range(64)]
    start.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = _glibc()
libc.fopen.restype = ctypes.c_void_p
fp = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(fp))
libc.fclose(ctypes.c_void_p(fp))
"""


@pytest.mark.skipif(network_module._glibc() is None, reason="counts glibc's arenas with its malloc_info")
@pytest.mark.parametrize("arenas", [1, 2])
def test_keep_freed_memory_caps_the_heaps_threads_spread_over(tmp_path, arenas):
    """MALLOC_ARENAS caps glibc's heaps: eight threads allocating at once share at most that many (glibc's own
    malloc_info report counts them), where uncapped glibc gives a 2-core machine up to 16."""
    for cap, path in ((arenas, tmp_path / "capped.xml"), (8, tmp_path / "eight.xml")):
        subprocess.run([sys.executable, "-c", _ARENA_PROBE, str(cap), str(path)], check=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    capped = len(re.findall(r'<heap nr="\d+">', (tmp_path / "capped.xml").read_text()))
    eight = len(re.findall(r'<heap nr="\d+">', (tmp_path / "eight.xml").read_text()))
    assert capped == arenas, (tmp_path / "capped.xml").read_text()[:2000]
    assert eight > arenas  # the probe does spread over more heaps when allowed to


def test_training_flushes_denormals_in_its_thread():
    """RMSProp's mean squares of zero-gradient weights decay into denormals, which slow every operation ~100x;
    a training step flushes them to zero in the thread that trains (as TensorFlow's op threads do)."""
    from ga3c.settings import parse_settings
    tiny = torch.finfo(torch.float32).tiny
    out = {}

    def work():
        # A new thread inherits its creator's FTZ/DAZ (pthreads copy the floating-point environment), and earlier
        # tests trained in pytest's thread: start this one unflushed, as a trainer thread of a fresh process is.
        torch.set_flush_denormal(False)
        out['unflushed'] = float(torch.tensor([1e-40]) * 0.99)
        net = NetworkVP(parse_settings(["ATARI_GAME=CartPole-v1", "MLP_HIDDEN_SIZE=16", "PRECISION=fp32"]),
                        (4,), 2, torch.device("cpu"))
        states = torch.rand(8, 4)
        states[:, 0] = 0.0  # the first layer's weights from input 0 get exactly zero gradient
        args = (states, torch.tensor([0, 1] * 4), torch.randn(8), 1e-3, 0.01)
        net.train(*args)
        w = next(p for p in net.model.parameters() if tuple(p.shape) == (16, 4))
        ms = net.optimizers[0].state[w]['ms']
        ms.fill_(1e-40)
        net.train(*args)
        out['ms'] = ms.clone()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert 0.0 < out['unflushed'] < tiny  # the control: without flushing, 0.99 x 1e-40 stays a denormal
    ms = out['ms']
    assert torch.all(ms[:, 0] == 0.0)  # zero gradient: 0.99 x denormal flushed to zero
    assert torch.all(ms[:, 1:] >= tiny)  # the others hold their squared gradients


def test_torch_threads_one_on_a_cpu_unless_set():
    """The engine's and bench_model's torch threads: TORCH_THREADS when set, else one on a CPU, torch's own on a GPU."""
    assert network_module.torch_threads(make_cfg(TORCH_THREADS=3), CPU) == 3
    assert network_module.torch_threads(make_cfg(TORCH_THREADS=0), CPU) == 1
    assert network_module.torch_threads(make_cfg(TORCH_THREADS=0), torch.device('cuda')) == torch.get_num_threads()
