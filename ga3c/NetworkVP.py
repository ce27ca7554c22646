"""The value + policy network of GA3C, its losses and its training step, in PyTorch.

Image states (uint8, C x H x W): the original's network, conv 16 8x8/4 -> conv 32 4x4/2 -> dense 256 -> policy
logits and value, with TensorFlow's 'SAME' padding (which is what makes it ~1.0M parameters for Pong) and its
initialisation (every weight and bias uniform in +-1/sqrt(fan_in); WEIGHT_INIT='orthogonal' for the later
baselines'). Vector states (float32, D): an MLP with two tanh layers of MLP_HIDDEN_SIZE (tanh, as the classic
on-policy baselines use for CartPole-like tasks: bounded, smooth features that do not die on unnormalised inputs)
-> the same heads. With NETWORK_TYPE='lstm' (A3C-LSTM) an LSTM of LSTM_SIZE sits between the features and the
heads; predict() runs one step from the given state (h, c) and returns the next one, forward() unrolls a time-major
block from a state with not-done masks, and train() unrolls the blocks it is given (truncated back-propagation
through each).

Losses are the original's, SUMS over the batch:
    value   0.5 * sum((R - V)^2)
    policy  -sum(log_pi(a) * adv + beta * H(pi)),  H(pi) = -sum_a pi * log_pi
adv = R - V (V of the network being trained, without gradient) unless the trainer hands advantages (V-trace's,
GAE's). Opt-in, off by default: NORMALIZE_ADVANTAGES ((adv - mean) / (std + 1e-8) over the batch, std with
Bessel's correction, as torch's .std() in CleanRL's and Stable-Baselines3's PPO and A2C), VALUE_LOSS_COEF (the
value loss's weight, 1.0 = the original's), LOSS_REDUCTION='mean' (both losses divided by the batch size, as most
implementations since do), OPTIMIZER='adam' (torch.optim.Adam with ADAM_EPSILON, instead of TF's RMSProp),
PPO_CLIP (PPO's clipped surrogate in place of log_pi(a) * adv, its ratio r = pi(a) / mu(a) against the policy mu
that acted, whose log-probabilities the trainer hands: -sum(min(r * adv, clip(r, 1 - c, 1 + c) * adv) + beta * H))
and PPO_EPOCHS (that many optimizer steps on the batch, each from the weights the last one left, the advantages
fixed at the first step's).
    log_pi = log(pi + LOG_EPSILON) (the paper's form; the original's code clamped, log(max(pi, LOG_EPSILON)), which
    zeroes the gradient below LOG_EPSILON), with
    pi = (softmax + MIN_POLICY) / (1 + MIN_POLICY * A); or, with USE_LOG_SOFTMAX, log_pi = log_softmax(logits) and
    pi = softmax(logits): the original ignores MIN_POLICY in that branch, and so does this one (in predict too).

Thread safety: predictors call predict() and trainers call train() concurrently. train() takes a private copy of
the parameters under the lock (so its gradients are those of one consistent set of weights, and no optimizer step
of another thread can invalidate its autograd graph), computes the gradients with torch.autograd.grad (no shared
.grad fields), clips them, and applies the optimizer step and `version += 1` under the lock. predict() reads the
live parameters without the lock, as the original's predictors did.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import platform
import re
import threading

import torch
import torch.nn.functional as F
from torch import nn

from ga3c.errors import CheckpointError, ConfigError
from ga3c.RMSPropTF import RMSPropTF

log = logging.getLogger(__name__)

_DEVICE_RE = re.compile(r'^(cpu|gpu|cuda)(?::(\d+))?$')


def _glibc():
    """glibc, or None where there is none (its malloc tuning is then skipped)."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory(arenas: int) -> None:
    """Asks glibc to keep freed blocks instead of returning them to the system, so that the large tensors of
    every training step reuse pages instead of faulting fresh ones in (measured: up to 9,000 page faults and
    20% more CPU time per step on a batch of 160). Best effort: a no-op where there is no glibc. The heaps then
    only grow, with fragmentation: a long run calls release_freed_memory() now and then."""
    libc = _glibc()
    try:
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: serve blocks below 1 GiB from the heap, not from mmap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never trim the heap
        # M_ARENA_MAX: at most `arenas` heaps (cfg.MALLOC_ARENAS) for all threads; with one per thread, every trainer
        # thread that dynamic adjustment creates keeps its own heap (the main process grew 19% over a 30-minute soak)
        libc.mallopt(-8, int(arenas))
    except AttributeError:  # no glibc (None), or a libc without mallopt
        pass


def release_freed_memory() -> bool:
    """Gives the free pages inside every glibc heap back to the system (malloc_trim(0)), which keep_freed_memory
    otherwise keeps for good: in a 2-hour soak the main process held 765 MB of heap of which 545 MB were free
    chunks, its resident memory 16% above minute 10's; one call took it from 864 to 436 MB. Pages in use stay;
    the next steps fault back in only what they touch. False where there is no glibc."""
    libc = _glibc()
    try:
        libc.malloc_trim(0)
    except AttributeError:
        return False
    return True


def flush_denormals() -> None:
    """Flushes denormal floats to zero in the calling thread (x86 FTZ/DAZ), as TensorFlow's op threads do.

    RMSProp's mean squares of weights whose gradient stays zero (dead units) decay into the denormal range
    within minutes; each operation on a denormal then costs ~100x. Measured on a Pong checkpoint after 13K
    updates: 58% of the fully connected layer's mean squares denormal, a training step of 80 states 37.9 ms
    against 25.3 ms flushed (docs/results/denormals-2026-12-05). Values below 1.2e-38 change no update."""
    torch.set_flush_denormal(True)


def torch_threads(cfg, device: torch.device) -> int:
    """The torch threads of the engine's model: TORCH_THREADS, or with 0 one on a CPU (several predictor and trainer
    threads share the cores with the agents; OpenMP pools spinning against each other measured 8-9x fewer steps/s)
    and torch's default on a GPU."""
    if cfg.TORCH_THREADS > 0:
        return int(cfg.TORCH_THREADS)
    return 1 if device.type == "cpu" else torch.get_num_threads()


def resolve_device(name: str) -> torch.device:
    """'gpu', 'gpu:N', 'cuda', 'cuda:N', 'cpu', 'cpu:N' -> a torch.device; a GPU on a machine without CUDA -> CPU,
    with one warning line."""
    m = _DEVICE_RE.match(str(name).strip().lower())
    if m is None:
        raise ConfigError(f"DEVICE={name!r} is not a device: use 'gpu:0', 'cuda:0' or 'cpu'")
    kind, index = m.group(1), int(m.group(2) or 0)
    if kind == 'cpu':
        return torch.device('cpu')
    if not torch.cuda.is_available():
        log.warning("DEVICE=%r asks for a GPU, but CUDA is not available here: using the CPU", name)
        return torch.device('cpu')
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"DEVICE={name!r}: this machine has {count} GPU(s) (cuda:0..cuda:{count - 1}); "
                          f"pick one of them or 'cpu'")
    return torch.device('cuda', index)


def _cpu_flags() -> set[str]:
    """The feature flags of the first CPU in /proc/cpuinfo ('flags' on x86, 'Features' on ARM); empty elsewhere."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                key, _, value = line.partition(':')
                if key.strip() in ('flags', 'Features'):
                    return set(value.split())
    except OSError:
        pass
    return set()


def native_bf16(device: torch.device) -> bool:
    """Whether the device computes bfloat16 in hardware. Where it does not, autocast emulates it: on an AVX2-only
    CPU (AMD EPYC, Zen 1) a training step on 80 Pong states took 618 ms in bf16 against 94 ms in fp32."""
    if device.type == 'cuda':
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type != 'cpu':
        return False
    machine = platform.machine().lower()
    if machine in ('x86_64', 'amd64'):
        avx512_bf16 = getattr(torch.cpu, '_is_avx512_bf16_supported', None)
        amx = getattr(torch.cpu, '_is_amx_tile_supported', None)
        if avx512_bf16 is not None and amx is not None:  # torch's own check (it asks the OS too, for AMX)
            return bool(avx512_bf16() or amx())
        return bool(_cpu_flags() & {'avx512_bf16', 'amx_bf16'})
    if machine in ('aarch64', 'arm64'):
        return 'bf16' in _cpu_flags()  # Armv8.6's BF16 instructions
    return False


def action_logp(pi: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a) of each row's action in the agents' form, log(pi(a) + 1e-20) (Rollout.py's log mu), so that a
    ratio pi / mu is exactly 1 where the policy has not moved (V-trace's weights, PPO's ratio)."""
    return torch.log(pi.gather(1, actions.reshape(-1, 1)).squeeze(1) + 1e-20)


_warned_precision: set[str] = set()


def resolve_precision(precision: str, device: torch.device) -> str:
    """PRECISION -> the arithmetic the model runs in, 'fp32' or 'bf16'. 'auto' is bf16 where the device computes
    it natively, fp32 elsewhere; an explicit 'bf16' where it would be emulated runs as asked, with one warning."""
    precision = str(precision).lower()
    if precision == 'auto':
        return 'bf16' if native_bf16(device) else 'fp32'
    if precision == 'bf16' and not native_bf16(device) and device.type not in _warned_precision:
        _warned_precision.add(device.type)
        log.warning("PRECISION='bf16' on a %s without native bfloat16 (%s): emulated, several times slower than "
                    "fp32 here; PRECISION='auto' picks the faster one", device.type,
                    "no AVX512-BF16 or AMX" if device.type == 'cpu' else "before Ampere")
    return precision


def network_kind(cfg, state_shape) -> str:
    """The network NetworkVP builds for these settings and states, as checkpoints record it: 'cnn' or 'mlp',
    with '-lstm' appended for NETWORK_TYPE='lstm'."""
    kind = 'cnn' if len(state_shape) == 3 else 'mlp'
    return kind + '-lstm' if cfg.NETWORK_TYPE == 'lstm' else kind


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """TensorFlow's 'SAME' padding: (output size, padding before, padding after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def clip_by_global_norm_(grads: list[torch.Tensor], max_norm: float, norm: torch.Tensor | None = None) -> torch.Tensor:
    """Scales `grads` in place by max_norm / max(global_norm, max_norm) (TF's clip_by_global_norm); returns the
    global norm before clipping (a 0-d tensor)."""
    if norm is None:
        norm = global_norm(grads)
    scale = max_norm / torch.clamp(norm, min=max_norm)
    torch._foreach_mul_(grads, scale)
    return norm


def global_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


class _Body(nn.Module):
    """Parameter holder of a network: features (the subclass's), an optional LSTM, the policy and value heads.

    The forward pass is functional (`forward_with` on a list of parameters in registration order), so that a
    trainer can run it on its private copy of the parameters."""

    kind = ''
    body_params = 0

    def forward_with(self, ps: list[torch.Tensor], x: torch.Tensor, state=None, notdone=None):
        """(logits, values) of x; with a recurrent network, (logits, values, next state) of x [T * B, ...] unrolled
        from `state` (h, c) [B, H] (see `lstm_unroll`)."""
        n = self.body_params
        x = self.features(ps[:n], x)
        if self.recurrent:
            x, state = lstm_unroll(x, state, notdone, *ps[n:n + 3])
        pw, pb, vw, vb = ps[-4:]
        logits, values = F.linear(x, pw, pb), F.linear(x, vw, vb).squeeze(1)
        return (logits, values, state) if self.recurrent else (logits, values)


def _heads(model: _Body, features: int, num_actions: int, recurrent: int) -> None:
    """Adds the optional LSTM (features -> recurrent) and the policy and value heads to `model`."""
    model.recurrent = recurrent
    if recurrent:
        model.lstm = _LSTM(features, recurrent)
        model.kind = model.kind + '-lstm'
        features = recurrent
    model.policy = nn.Linear(features, num_actions)
    model.value = nn.Linear(features, 1)


class _CNN(_Body):
    """Parameter holder of the original's network; the forward pass is functional (`forward_with`), so that a
    trainer can run it on its private copy of the parameters."""

    kind = 'cnn'
    body_params = 6  # conv1, conv2, fc (weights and biases)

    def __init__(self, state_shape: tuple, num_actions: int, recurrent: int = 0):
        super().__init__()
        h, w, c = state_shape
        self.conv1 = nn.Conv2d(c, 16, 8, stride=4)
        self.conv2 = nn.Conv2d(16, 32, 4, stride=2)
        h1, *pad1h = _same_padding(h, 8, 4)
        w1, *pad1w = _same_padding(w, 8, 4)
        h2, *pad2h = _same_padding(h1, 4, 2)
        w2, *pad2w = _same_padding(w1, 4, 2)
        self.pads = [(pad1h, pad1w), (pad2h, pad2w)]
        self.fc = nn.Linear(32 * h2 * w2, 256)
        _heads(self, 256, num_actions, recurrent)

    @staticmethod
    def _conv(x, w, b, stride, pad):
        (top, bottom), (left, right) = pad
        if top == bottom and left == right:
            return F.conv2d(x, w, b, stride=stride, padding=(top, left))
        return F.conv2d(F.pad(x, (left, right, top, bottom)), w, b, stride=stride)

    def features(self, ps: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        c1w, c1b, c2w, c2b, fw, fb = ps
        # States come as (B, H, W, C), the original's layout: read as NCHW they are channels_last without a copy,
        # the layout the CPU's convolutions run fastest on (conv1's forward and backward on 80 Pong states took
        # half the time of NCHW's). conv1's output is made channels_last too, before the ReLU, so that the ReLU's
        # backward sees one layout (mixed layouts cost 4 ms a batch of 160).
        x = x.permute(0, 3, 1, 2)
        if x.dtype == torch.uint8:
            # x / 128 - 1 as (x - 128) / 128: x - 128 is x with its top bit flipped, read as int8, exact in bf16,
            # and the 1/128 (a power of 2) goes into conv1's weights: the same products bit for bit, in one pass
            # over the input instead of four (0.15 ms instead of 0.4 for 16 Pong states)
            kind = x.device.type
            dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else torch.float32
            x = (x ^ 128).view(torch.int8).to(dtype)
            c1w = c1w * (1.0 / 128.0)
        x = F.relu(self._conv(x, c1w, c1b, 4, self.pads[0]).contiguous(memory_format=torch.channels_last))
        x = F.relu(self._conv(x, c2w, c2b, 2, self.pads[1]))
        # NHWC order (TensorFlow's): a free view of a channels_last tensor
        x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
        return F.relu(F.linear(x, fw, fb))


class _MLP(_Body):
    kind = 'mlp'
    body_params = 4  # fc1, fc2 (weights and biases)

    def __init__(self, state_shape: tuple, num_actions: int, hidden: int, recurrent: int = 0):
        super().__init__()
        self.fc1 = nn.Linear(state_shape[0], hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        _heads(self, hidden, num_actions, recurrent)

    def features(self, ps: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        w1, b1, w2, b2 = ps
        x = torch.tanh(F.linear(x.float(), w1, b1))
        return torch.tanh(F.linear(x, w2, b2))


class _LSTM(nn.Module):
    """The parameters of an LSTM layer (A3C-LSTM's: the features -> LSTM_SIZE), gates in the order i, f, g, o.

    Initialised as the rest, uniform in +-1/sqrt(fan_in) with fan_in = features + LSTM_SIZE (the [x, h] input of
    TensorFlow's LSTM cell), biases zero but the forget gate's, which starts at 1 (TensorFlow's forget_bias)."""

    def __init__(self, features: int, size: int):
        super().__init__()
        self.size = size
        self.w_ih = nn.Parameter(torch.empty(4 * size, features))
        self.w_hh = nn.Parameter(torch.empty(4 * size, size))
        self.bias = nn.Parameter(torch.empty(4 * size))

    def init_(self, gen: torch.Generator) -> None:
        bound = 1.0 / math.sqrt(self.w_ih.shape[1] + self.size)
        self.w_ih.uniform_(-bound, bound, generator=gen)
        self.w_hh.uniform_(-bound, bound, generator=gen)
        self.bias.zero_()
        self.bias[self.size:2 * self.size] = 1.0


def _initialise(model: nn.Module, scheme: str, seed: int) -> None:
    """Initialises the weights in place, seeded from `seed` without touching torch's global generator.

    'original': every weight and bias uniform in +-1/sqrt(fan_in) (the LSTM: `_LSTM.init_`). 'orthogonal': the
    initialisation of OpenAI baselines (`ortho_init`), Stable-Baselines3 and CleanRL (`layer_init`): orthogonal
    weights (a layer's weight read as out x fan_in), zero biases, gain sqrt(2) in the body, 0.01 on the policy
    head (the first policy is uniform to within 1%: every action is tried), 1 on the value head and on the
    LSTM's two weight matrices (CleanRL's `ppo_atari_lstm`)."""
    gen = torch.Generator().manual_seed(seed)
    heads = {model.policy: 0.01, model.value: 1.0}
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.Conv2d, nn.Linear)):
                if scheme == 'orthogonal':
                    nn.init.orthogonal_(mod.weight, heads.get(mod, math.sqrt(2.0)), generator=gen)
                    mod.bias.zero_()
                else:
                    bound = 1.0 / math.sqrt(mod.weight[0].numel())
                    mod.weight.uniform_(-bound, bound, generator=gen)
                    mod.bias.uniform_(-bound, bound, generator=gen)
            elif isinstance(mod, _LSTM):
                if scheme == 'orthogonal':
                    nn.init.orthogonal_(mod.w_ih, 1.0, generator=gen)
                    nn.init.orthogonal_(mod.w_hh, 1.0, generator=gen)
                    mod.bias.zero_()
                else:
                    mod.init_(gen)


def lstm_unroll(x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], notdone: torch.Tensor | None,
                w_ih: torch.Tensor, w_hh: torch.Tensor, bias: torch.Tensor):
    """Runs the LSTM over T steps of B sequences, time-major: x [T * B, F], state (h, c) [B, H] (float32).

    notdone [T, B] (optional): 0 after a step that ended an episode (terminal or cut by a time limit): the state
    is zeroed after that step, so the next step starts an episode from zero, as the predictor's does. Returns
    (the outputs h_t [T * B, H], the state after the last step, masked). The cell's arithmetic is float32 (the
    matrix products follow autocast), so that the state written to shared memory loses nothing between steps."""
    h, c = state
    batch = h.shape[0]
    steps = x.shape[0] // batch
    gates_x = F.linear(x, w_ih, bias).view(steps, batch, -1)  # every step's input product at once
    outs = []
    for t in range(steps):
        gates = (gates_x[t] + F.linear(h.to(gates_x.dtype), w_hh)).float()
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
        if notdone is not None:
            mask = notdone[t].unsqueeze(1)
            h, c = h * mask, c * mask
    return torch.cat(outs), (h, c)


def _clone_tree(obj, device=None):
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        return t.to(device, copy=True) if device is not None else t.clone()
    if isinstance(obj, dict):
        return {k: _clone_tree(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone_tree(v, device) for v in obj)
    return obj


class NetworkVP:
    def __init__(self, cfg, state_shape: tuple, num_actions: int, device: torch.device):
        self.cfg = cfg
        keep_freed_memory(cfg.MALLOC_ARENAS)
        self.state_shape = tuple(int(s) for s in state_shape)
        self.num_actions = int(num_actions)
        self.device = torch.device(device)
        self.recurrent_size = int(cfg.LSTM_SIZE) if cfg.NETWORK_TYPE == 'lstm' else 0
        if len(self.state_shape) == 3:
            model = _CNN(self.state_shape, self.num_actions, self.recurrent_size)
        elif len(self.state_shape) == 1:
            model = _MLP(self.state_shape, self.num_actions, int(cfg.MLP_HIDDEN_SIZE), self.recurrent_size)
        else:
            raise ConfigError(f"state shape {self.state_shape}: the network takes images (H, W, C) or vectors (D,)")
        self.kind = model.kind
        _initialise(model, cfg.WEIGHT_INIT, int(cfg.SEED))
        model.to(self.device)
        if isinstance(model, _CNN):
            model.conv2.to(memory_format=torch.channels_last)
        self.model = model
        self._params = list(model.parameters())

        self.precision = resolve_precision(cfg.PRECISION, self.device)  # 'fp32' or 'bf16'
        self.bf16 = self.precision == 'bf16'
        self.min_policy = float(cfg.MIN_POLICY)
        self.use_log_softmax = bool(cfg.USE_LOG_SOFTMAX)
        self.log_epsilon = float(cfg.LOG_EPSILON)
        self.dual = bool(cfg.DUAL_RMSPROP)
        self.use_grad_clip = bool(cfg.USE_GRAD_CLIP)
        self.grad_clip_norm = float(cfg.GRAD_CLIP_NORM)
        self.normalize_advantages = bool(cfg.NORMALIZE_ADVANTAGES)
        self.value_loss_coef = float(cfg.VALUE_LOSS_COEF)
        self.mean_loss = cfg.LOSS_REDUCTION == 'mean'
        self.optimizer_kind = cfg.OPTIMIZER
        self.ppo_clip = float(cfg.PPO_CLIP)
        self.ppo_epochs = int(cfg.PPO_EPOCHS)
        if self.dual and self.optimizer_kind != 'rmsprop_tf':
            raise ConfigError("DUAL_RMSPROP=True needs OPTIMIZER='rmsprop_tf'")
        self.optimizers = [self._make_optimizer() for _ in range(2 if self.dual else 1)]
        self._lock = threading.Lock()
        self.version = 0
        self._cast = (None, None)  # (the parameters' in-place versions, their bf16 copies) for predict

    # ------------------------------------------------------------------ helpers
    def _make_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer_kind == 'adam':
            return torch.optim.Adam(self._params, lr=float(self.cfg.LEARNING_RATE_START),
                                    eps=float(self.cfg.ADAM_EPSILON))
        return RMSPropTF(self._params, lr=float(self.cfg.LEARNING_RATE_START), decay=float(self.cfg.RMSPROP_DECAY),
                         momentum=float(self.cfg.RMSPROP_MOMENTUM), eps=float(self.cfg.RMSPROP_EPSILON))

    def _settings(self) -> dict:
        """The optimizer's settings other than the learning rate, as this run's configuration gives them."""
        if self.optimizer_kind == 'adam':
            return dict(eps=float(self.cfg.ADAM_EPSILON))
        return dict(decay=float(self.cfg.RMSPROP_DECAY), momentum=float(self.cfg.RMSPROP_MOMENTUM),
                    eps=float(self.cfg.RMSPROP_EPSILON))

    @staticmethod
    def _step(opt: torch.optim.Optimizer, grads: list[torch.Tensor | None]) -> None:
        """One optimizer step on `grads` (called under the lock): RMSPropTF takes them as they are; Adam reads
        .grad, which is set for the step and cleared after it."""
        if isinstance(opt, RMSPropTF):
            opt.step(grads=grads)
            return
        params = opt.param_groups[0]['params']
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        opt.step()
        for p in params:
            p.grad = None

    def _autocast(self):
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _policy(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(pi, log_pi) from fp32 logits; log_pi is None when only pi is needed and it is not log_softmax."""
        if self.use_log_softmax:
            return torch.softmax(logits, dim=1), torch.log_softmax(logits, dim=1)
        pi = torch.softmax(logits, dim=1)
        if self.min_policy != 0.0:
            pi = (pi + self.min_policy) / (1.0 + self.min_policy * self.num_actions)
        return pi, None

    def _log_pi(self, pi: torch.Tensor, log_pi: torch.Tensor | None) -> torch.Tensor:
        return log_pi if log_pi is not None else torch.log(pi + self.log_epsilon)

    def forward(self, states: torch.Tensor, params: list[torch.Tensor] | None = None, state=None, notdone=None):
        """(logits, values) as computed (bf16 under autocast when PRECISION='bf16'); grad mode as the caller's.
        With the LSTM network, (logits, values, next state): states [T * B, ...] time-major, unrolled from
        `state` (h, c) [B, LSTM_SIZE] (zeros when None) with the optional not-done masks [T, B]."""
        x = states.to(self.device, non_blocking=True)
        if self.recurrent_size:
            state = self._state(state, x.shape[0] if notdone is None else x.shape[0] // notdone.shape[0])
            if notdone is not None:
                notdone = notdone.to(self.device, torch.float32, non_blocking=True)
        params = self._params if params is None else params
        with self._autocast():
            if self.recurrent_size:
                return self.model.forward_with(params, x, state, notdone)
            return self.model.forward_with(params, x)

    def _inference_params(self) -> list[torch.Tensor]:
        """The parameters as the forward pass computes with them: in bf16, copies cast once per change of the
        weights (every parameter feeds a convolution or a linear layer, which autocast would cast to bf16 on each
        call: 110 us of the 0.89 ms a batch of 8 Pong states took). Keyed by the tensors' in-place version counters, so
        that any write (an optimizer step, a loaded checkpoint, Ray's weight sync) makes the next call recast."""
        if not self.bf16:
            return self._params
        key = tuple(p._version for p in self._params)
        cached_key, cached = self._cast
        if cached_key != key:
            cached = [p.detach().to(torch.bfloat16) for p in self._params]
            self._cast = (key, cached)
        return cached

    def _state(self, state, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        if state is None:
            zeros = torch.zeros(batch, self.recurrent_size, device=self.device)
            return zeros, zeros
        return tuple(s.to(self.device, torch.float32, non_blocking=True) for s in state)

    def losses(self, logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
               beta: float, advantages: torch.Tensor | None = None,
               behaviour_logp: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The original's losses (sums over the batch), in fp32, as tensors, with the opt-in options above;
        'advantages' holds the advantages used (before normalisation), for the further PPO_EPOCHS steps."""
        logits, values = logits.float(), values.float()
        pi, log_pi = self._policy(logits)
        log_pi = self._log_pi(pi, log_pi)
        if advantages is None:
            advantages = returns - values.detach()
        else:
            advantages = advantages.to(self.device, torch.float32).detach()
        used = advantages
        if self.normalize_advantages:  # one sample has no standard deviation: it is only centred (to 0)
            advantages = advantages - advantages.mean()
            if advantages.numel() > 1:
                advantages = advantages / (advantages.std() + 1e-8)
        entropy = -(pi * log_pi).sum(dim=1)
        extra = {}
        if self.ppo_clip > 0:
            if behaviour_logp is None:
                raise ValueError("NetworkVP.losses: PPO_CLIP needs the acting policy's log-probabilities")
            log_ratio = action_logp(pi, actions) - behaviour_logp.to(self.device, torch.float32)
            ratio = torch.exp(log_ratio)
            clipped = torch.clamp(ratio, 1.0 - self.ppo_clip, 1.0 + self.ppo_clip)
            surrogate = torch.minimum(ratio * advantages, clipped * advantages)
            loss_p = -(surrogate + beta * entropy).sum()
            with torch.no_grad():
                extra = dict(clip_fraction=((ratio - 1.0).abs() > self.ppo_clip).float().mean(),
                             approx_kl=((ratio - 1.0) - log_ratio).mean())  # k3 of Schulman's KL estimators
        else:
            log_pi_a = log_pi.gather(1, actions.view(-1, 1)).squeeze(1)
            loss_p = -(log_pi_a * advantages + beta * entropy).sum()
        loss_v = 0.5 * (returns - values).square().sum()
        if self.value_loss_coef != 1.0:
            loss_v = self.value_loss_coef * loss_v
        if self.mean_loss:
            loss_p, loss_v = loss_p / values.shape[0], loss_v / values.shape[0]
        return dict(loss_policy=loss_p, loss_value=loss_v, entropy=entropy.mean(), value_mean=values.mean(),
                    advantages=used, **extra)

    # ------------------------------------------------------------------ public API
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self._params)

    def predict(self, states: torch.Tensor, state=None):
        """(policy probabilities [B, A], values [B]), float32 on the CPU. With the LSTM network, one step from
        `state` (h, c) [B, LSTM_SIZE] (zeros when None), and the next state too: (policy, values, (h, c))."""
        with torch.inference_mode():
            if states.dim() == len(self.state_shape):
                states = states.unsqueeze(0)
            out = self.forward(states, self._inference_params(), state=state)
            pi, _ = self._policy(out[0].float())
            if self.recurrent_size:
                h, c = out[2]
                return pi.cpu(), out[1].float().cpu(), (h.cpu(), c.cpu())
            return pi.cpu(), out[1].float().cpu()

    def train(self, states: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, lr: float, beta: float,
              advantages: torch.Tensor | None = None, sequences: list | None = None,
              behaviour_logp: torch.Tensor | None = None) -> dict[str, float]:
        """PPO_EPOCHS training steps (1: the original's one) on the batch; returns the first step's loss_policy,
        loss_value, loss_total, entropy (mean per sample), grad_norm (before clipping) and value_mean, and
        batch_size, version (after the last step); with PPO_CLIP, clip_fraction (the share of ratios outside the
        clip range) and approx_kl (KL(mu || pi) estimated) averaged over the steps.

        With the LSTM network, `sequences` lists the blocks the batch is made of, in order: (h0, c0, notdone),
        a block of T steps of B sequences being T * B time-major states unrolled from (h0, c0) [B, LSTM_SIZE]
        with the not-done masks [T, B] (truncated back-propagation through the block). With PPO_CLIP,
        `behaviour_logp` holds log mu(a) of each transition, as the agent computed it."""
        batch = int(states.shape[0])
        if batch == 0:
            raise ValueError("NetworkVP.train: empty batch")
        actions = actions.to(self.device, torch.int64, non_blocking=True)
        returns = returns.to(self.device, torch.float32, non_blocking=True)
        if behaviour_logp is not None:
            behaviour_logp = behaviour_logp.to(self.device, torch.float32, non_blocking=True)
        first, ppo = None, []
        for _ in range(self.ppo_epochs):
            stats, advantages = self._train_step(states, actions, returns, lr, beta, advantages, sequences,
                                                 behaviour_logp)
            first = first or stats
            if self.ppo_clip > 0:
                ppo.append((stats['clip_fraction'], stats['approx_kl']))
        out = dict(first, batch_size=float(batch), version=stats['version'])
        if ppo:
            out['clip_fraction'], out['approx_kl'] = (sum(v) / len(ppo) for v in zip(*ppo, strict=True))
        return out

    def _train_step(self, states, actions, returns, lr, beta, advantages, sequences, behaviour_logp):
        """One optimizer step; returns its statistics and the advantages it used (fixed for further epochs)."""
        flush_denormals()  # per thread: the trainer's thread is the one that must not slow down
        with self._lock:
            params = [p.detach().clone() for p in self._params]
        for p in params:
            p.requires_grad_(True)
        logits, values = self._forward_train(states, params, sequences)
        out = self.losses(logits, values, actions, returns, beta, advantages, behaviour_logp)
        loss_p, loss_v = out['loss_policy'], out['loss_value']
        if self.dual:
            gp = torch.autograd.grad(loss_p, params, retain_graph=True, allow_unused=True)
            gv = torch.autograd.grad(loss_v, params, allow_unused=True)
            grad_sets = [list(gp), list(gv)]
        else:
            grad_sets = [list(torch.autograd.grad(loss_p + loss_v, params))]
        norms = []
        for grads in grad_sets:
            present = [g for g in grads if g is not None]
            norm = global_norm(present)
            if self.use_grad_clip:
                clip_by_global_norm_(present, self.grad_clip_norm, norm)
            norms.append(norm)
        grad_norm = torch.linalg.vector_norm(torch.stack(norms))
        with self._lock:
            for opt, grads in zip(self.optimizers, grad_sets, strict=True):
                for group in opt.param_groups:
                    group['lr'] = lr
                self._step(opt, grads)
            self.version += 1
            version = self.version
        names = ['loss_policy', 'loss_value', 'entropy', 'grad_norm', 'value_mean'] + \
            (['clip_fraction', 'approx_kl'] if self.ppo_clip > 0 else [])
        values = torch.stack([(grad_norm if name == 'grad_norm' else out[name]).detach() for name in names]).tolist()
        stats = dict(zip(names, values, strict=True))
        stats.update(loss_total=stats['loss_policy'] + stats['loss_value'], version=float(version))
        return stats, out['advantages']

    def _forward_train(self, states, params, sequences):
        if not self.recurrent_size:
            return self.forward(states, params)
        if not sequences:
            raise ValueError("NetworkVP.train: the LSTM network trains on sequences (h0, c0, notdone)")
        parts, first = [], 0
        for h0, c0, notdone in sequences:
            size = notdone.shape[0] * notdone.shape[1]
            logits, values, _ = self.forward(states[first:first + size], params, (h0, c0), notdone)
            parts.append((logits, values))
            first += size
        if first != states.shape[0]:
            raise ValueError(f"NetworkVP.train: the sequences hold {first} states, the batch {states.shape[0]}")
        if len(parts) == 1:
            return parts[0]
        return tuple(torch.cat(p) for p in zip(*parts, strict=True))

    def get_state(self) -> dict:
        """Model, optimizer(s) and version, copied to the CPU (plain dicts, lists, tensors, numbers, strings)."""
        with self._lock:
            return dict(kind=self.kind,
                        model=_clone_tree(dict(self.model.state_dict()), 'cpu'),
                        optimizer=self.optimizer_kind,
                        optimizers=[_clone_tree(opt.state_dict(), 'cpu') for opt in self.optimizers],
                        version=int(self.version))

    def set_state(self, d: dict) -> None:
        if d.get('kind') != self.kind:
            raise CheckpointError(f"the checkpoint holds a '{d.get('kind')}' network, this run builds a "
                                  f"'{self.kind}' one")
        with self._lock:
            try:
                self.model.load_state_dict(d['model'])
            except (RuntimeError, KeyError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise CheckpointError(f"the checkpoint's network does not fit this one: {first}") from None
            opts = d.get('optimizers') or []
            kind = d.get('optimizer', 'rmsprop_tf')  # checkpoints from before OPTIMIZER hold TF's RMSProp
            if kind != self.optimizer_kind:
                log.warning("the checkpoint's optimizer is %r, this run uses %r (OPTIMIZER changed): the optimizer "
                            "starts afresh", kind, self.optimizer_kind)
                self.optimizers = [self._make_optimizer() for _ in self.optimizers]
            elif len(opts) == len(self.optimizers):
                for opt, s in zip(self.optimizers, opts, strict=True):
                    opt.load_state_dict(s)
                    for group in opt.param_groups:  # this run's settings win over the checkpoint's
                        group.update(self._settings())
            else:
                log.warning("the checkpoint has %d optimizer state(s), this run uses %d (DUAL_RMSPROP changed): "
                            "the optimizer starts afresh", len(opts), len(self.optimizers))
                self.optimizers = [self._make_optimizer() for _ in self.optimizers]
            self.version = int(d.get('version', 0))
