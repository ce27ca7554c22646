"""Is the CNN cheaper in fp32 as space-to-depth convolutions? (A dead end, kept so nobody repeats it.)

conv1 (8x8, stride 4, on 4 frames) equals a 2x2 stride-1 convolution on the padded input folded 4x4 into 64
channels, and conv2 (4x4, stride 2) a 2x2 stride-1 one on conv1's padded output folded 2x2: the same products,
with channel counts that suit the CPU's vector units. This times both forms of `_CNN.features` (Pong, 84x84x4,
the TF-SAME paddings) in one process, one torch thread: a prediction on 16 states and a training step (forward
and backward) on 80, three rounds, then a profile of the current form. Usage: python space_to_depth.py [bfloat16]
"""

import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import profile

torch.set_num_threads(1)
torch.manual_seed(0)
dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
c1w = torch.randn(16, 4, 8, 8, requires_grad=True)
c1b = torch.randn(16, requires_grad=True)
c2w = torch.randn(32, 16, 4, 4, requires_grad=True)
c2b = torch.randn(32, requires_grad=True)
fw = (torch.randn(256, 32 * 11 * 11) * 0.01).requires_grad_()
fb = torch.zeros(256, requires_grad=True)
params = (c1w, c1b, c2w, c2b, fw, fb)


def current(x: torch.Tensor) -> torch.Tensor:
    """`_CNN.features` as of commit 9625523: channels-last NCHW, SAME paddings 2/2 and 1/2."""
    x = (x.permute(0, 3, 1, 2) ^ 128).view(torch.int8).to(dtype)
    x = F.conv2d(x, (c1w * (1 / 128)).to(dtype), c1b.to(dtype), stride=4, padding=2)
    x = F.relu(x.contiguous(memory_format=torch.channels_last))
    x = F.relu(F.conv2d(F.pad(x, (1, 2, 1, 2)), c2w.to(dtype), c2b.to(dtype), stride=2))
    x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
    return F.relu(F.linear(x, fw.to(dtype), fb.to(dtype)))


def fold(x: torch.Tensor, k: int) -> torch.Tensor:
    """(B, H, W, C) -> NCHW (channels last) of (B, k*k*C, H/k, W/k), channel index (i, j, c)."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // k, k, w // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h // k, w // k, k * k * c)
    return x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)


def fold_weights(w: torch.Tensor, k: int) -> torch.Tensor:
    """(O, C, K, K) -> (O, k*k*C, K/k, K/k), the channel order of `fold`."""
    o, c, n, _ = w.shape
    w = w.reshape(o, c, n // k, k, n // k, k).permute(0, 3, 5, 1, 2, 4)
    return w.reshape(o, k * k * c, n // k, n // k)


def space_to_depth(x: torch.Tensor) -> torch.Tensor:
    x = fold(F.pad(x, (0, 0, 2, 2, 2, 2), value=128), 4)  # uint8 128 is 0 once scaled
    x = (x ^ 128).view(torch.int8).to(dtype)
    x = F.relu(F.conv2d(x, fold_weights(c1w * (1 / 128), 4).to(dtype), c1b.to(dtype)))
    x = fold(F.pad(x.permute(0, 2, 3, 1), (0, 0, 1, 2, 1, 2)), 2)
    x = F.relu(F.conv2d(x, fold_weights(c2w, 2).to(dtype), c2b.to(dtype)))
    x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
    return F.relu(F.linear(x, fw.to(dtype), fb.to(dtype)))


def median_ms(f, n: int) -> float:
    f()
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e3


def predict(fn, x):
    def run():
        with torch.no_grad():
            fn(x)
    return run


def train(fn, x):
    def run():
        fn(x).sum().backward()
        for p in params:
            p.grad = None
    return run


x80 = torch.randint(0, 256, (80, 84, 84, 4), dtype=torch.uint8)
x16 = x80[:16].clone()
with torch.no_grad():
    a, b = current(x80).float(), space_to_depth(x80).float()
print(f'{dtype}: largest difference {(a - b).abs().max().item():.2e} on outputs up to {a.abs().max().item():.1f}')
for r in range(3):
    p16 = [median_ms(predict(fn, x16), 20) for fn in (current, space_to_depth)]
    t80 = [median_ms(train(fn, x80), 10) for fn in (current, space_to_depth)]
    print(f'round {r}: predict 16: current {p16[0]:.2f} ms, space-to-depth {p16[1]:.2f} ms | '
          f'train 80: current {t80[0]:.2f} ms, space-to-depth {t80[1]:.2f} ms')
for name, run, n in (('train 80', train(current, x80), 10), ('predict 16', predict(current, x16), 20)):
    with profile() as p:
        for _ in range(n):
            run()
    print(f'profile of the current form, {name}, {n} calls')
    print(p.key_averages().table(sort_by='self_cpu_time_total', row_limit=10))
