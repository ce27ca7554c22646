"""TensorFlow 1's RMSProp (`tf.train.RMSPropOptimizer`), which the original GA3C trained with.

It differs from `torch.optim.RMSprop` in two ways that matter with the original's `RMSPROP_EPSILON=0.1`:

    ms  = decay * ms + (1 - decay) * g^2          # ms starts at ONES (torch: zeros)
    mom = momentum * mom + lr * g / sqrt(ms + eps) # eps INSIDE the square root (torch: outside)
    p  -= mom

With momentum 0 the momentum buffer is not kept (the update is then `p -= lr * g / sqrt(ms + eps)`, the same
number TF computes). Gradients may be passed to `step(grads=...)` instead of living in `.grad`, so threads that
compute them with `torch.autograd.grad` never share `.grad` fields; a `None` gradient skips its parameter, as TF's
`apply_gradients` skips variables without a gradient (their mean square does not decay).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch


class RMSPropTF(torch.optim.Optimizer):
    def __init__(self, params: Iterable, lr: float = 3e-4, decay: float = 0.99, momentum: float = 0.0,
                 eps: float = 0.1):
        if lr < 0.0:
            raise ValueError(f"RMSPropTF: learning rate must be >= 0, got {lr}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"RMSPropTF: decay must be in [0, 1], got {decay}")
        if momentum < 0.0:
            raise ValueError(f"RMSPropTF: momentum must be >= 0, got {momentum}")
        if eps < 0.0:
            raise ValueError(f"RMSPropTF: epsilon must be >= 0, got {eps}")
        super().__init__(params, dict(lr=lr, decay=decay, momentum=momentum, eps=eps))

    @torch.no_grad()
    def step(self, closure=None, grads: Sequence[torch.Tensor | None] | None = None):
        """Applies one update. `grads`: one gradient (or None) per parameter, in the order of the parameters of
        all groups; without it, each parameter's `.grad` is used."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        all_params = [p for group in self.param_groups for p in group['params']]
        if grads is None:
            grads = [p.grad for p in all_params]
        elif len(grads) != len(all_params):
            raise ValueError(f"RMSPropTF.step: {len(grads)} gradients for {len(all_params)} parameters")
        i = 0
        for group in self.param_groups:
            n = len(group['params'])
            self._step_group(group, grads[i:i + n])
            i += n
        return loss

    def _step_group(self, group: dict, grads: Sequence[torch.Tensor | None]) -> None:
        lr, decay, momentum, eps = group['lr'], group['decay'], group['momentum'], group['eps']
        params, gs, mss, moms = [], [], [], []
        for p, g in zip(group['params'], grads, strict=True):
            if g is None:
                continue
            if g.is_sparse:
                raise RuntimeError("RMSPropTF does not support sparse gradients")
            state = self.state[p]
            if 'ms' not in state:
                state['ms'] = torch.ones_like(p, memory_format=torch.preserve_format)
            if momentum != 0.0 and 'mom' not in state:
                state['mom'] = torch.zeros_like(p, memory_format=torch.preserve_format)
            params.append(p)
            gs.append(g)
            mss.append(state['ms'])
            if momentum != 0.0:
                moms.append(state['mom'])
        if not params:
            return
        torch._foreach_mul_(mss, decay)
        torch._foreach_addcmul_(mss, gs, gs, value=1.0 - decay)
        denom = torch._foreach_add(mss, eps)
        torch._foreach_sqrt_(denom)
        if momentum != 0.0:
            torch._foreach_mul_(moms, momentum)
            torch._foreach_addcdiv_(moms, gs, denom, value=lr)
            torch._foreach_sub_(params, moms)
        else:
            torch._foreach_addcdiv_(params, gs, denom, value=-lr)
