"""V-trace targets (IMPALA, Espeholt et al. 2018, section 4), time-major, in torch.

For a rollout of T steps and B independent sequences, with pi the policy being trained (the target) and mu the
policy that acted (the behaviour):
    rho_t   = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))
    c_t     = min(c_bar,   pi(a_t|x_t) / mu(a_t|x_t))
    delta_t = rho_t * (r_t + gamma_t * V(x_{t+1}) - V(x_t))
    vs_t    = V(x_t) + delta_t + gamma_t * c_t * (vs_{t+1} - V(x_{t+1})),    vs_T = V(x_T) (the bootstrap)
    A_t     = rho_t * (r_t + gamma_t * vs_{t+1} - V(x_t))                    (the policy-gradient advantage)
with gamma_t = DISCOUNT * (1 - done_t): a terminal step neither bootstraps nor carries the trace across the
episode boundary. vs is the value target, A the advantage of the policy loss. Nothing here is differentiated.

On-policy (pi == mu) with rho_bar = c_bar = 1, vs_t is the n-step return bootstrapped from V(x_T), which is
what the faithful GA3C trains on.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def vtrace_targets(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, rewards: torch.Tensor,
                   values: torch.Tensor, bootstrap_value: torch.Tensor, discounts: torch.Tensor,
                   rho_bar: float = 1.0, c_bar: float = 1.0,
                   truncated: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(vs, pg_advantages), both [T, B], from time-major [T, B] inputs and the bootstrap value V(x_T) [B].

    behaviour_logp / target_logp: log mu(a_t|x_t) and log pi(a_t|x_t) of the actions taken; rewards: r_t;
    values: V(x_t) under the current network; discounts: gamma_t = DISCOUNT * (1 - done_t). rho_bar and c_bar
    are the clipping thresholds (float('inf') disables one).

    truncated (optional, bool [T, B]): steps cut by a time limit, whose next state (x_{t+1} in the rollout) is
    the first state of the next episode. As the agent's n-step returns do, such a step bootstraps from V(x_t),
    the closest value known for the lost next state, and the trace is cut there.
    """
    values = values.detach()
    bootstrap_value = bootstrap_value.detach()
    dtype = values.dtype
    ratios = torch.exp(target_logp.detach().to(dtype) - behaviour_logp.detach().to(dtype))
    rhos = torch.clamp(ratios, max=rho_bar) if rho_bar != float("inf") else ratios
    cs = torch.clamp(ratios, max=c_bar) if c_bar != float("inf") else ratios
    rewards = rewards.to(dtype)
    discounts = discounts.to(dtype)

    next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    trace = discounts * cs
    if truncated is not None:
        truncated = truncated.to(torch.bool)
        next_values = torch.where(truncated, values, next_values)
        trace = torch.where(truncated, torch.zeros_like(trace), trace)
    deltas = rhos * (rewards + discounts * next_values - values)

    # vs_t - V(x_t) = delta_t + gamma_t c_t (vs_{t+1} - V(x_{t+1})), backwards from 0 after the last step
    steps = values.shape[0]
    vs_minus_v = torch.empty_like(values)
    acc = torch.zeros_like(bootstrap_value)
    for t in range(steps - 1, -1, -1):
        acc = deltas[t] + trace[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v

    next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    if truncated is not None:
        next_vs = torch.where(truncated, values, next_vs)
    pg_advantages = rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages
