"""The model alone, before and after states went frames-last (H, W, frames) and uint8 scaling went into conv1,
timed in one process, the two paths alternating (this machine's speed drifts by 30% within minutes, so only a
paired comparison means anything). 'before' feeds the network what the old code built inside it: frames-first
memory, scaled in float32 (x.float() / 128 - 1), so the forward pass takes the old route (autocast casts it to
bf16, the convolution reorders it); 'after' feeds the uint8 frames-last states the engine now hands over.

    python docs/results/frames-last-2026-12-06/paired_model.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ga3c.NetworkVP import NetworkVP, resolve_device  # noqa: E402
from ga3c.settings import parse_settings  # noqa: E402


def paths(net, batch: int, kind: str, gen) -> dict:
    """The two ways of running one call of `kind` on `batch` random Pong states."""
    after = torch.randint(0, 256, (batch, 84, 84, 4), dtype=torch.uint8, generator=gen)
    frames_first = after.permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)  # same values, the old memory order
    actions, returns = torch.randint(0, 6, (batch,), generator=gen), torch.randn(batch, generator=gen)

    def call(states_of):
        if kind == "predict":
            return lambda: net.predict(states_of())
        return lambda: net.train(states_of(), actions, returns, 7e-4, 0.01)

    return {"before": call(lambda: frames_first.float().mul_(1.0 / 128.0).sub_(1.0)), "after": call(lambda: after)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    cfg = parse_settings([f"--config={REPO / 'configs' / 'cpu.toml'}"])
    torch.set_num_threads(1)
    net = NetworkVP(cfg, (84, 84, 4), 6, resolve_device("cpu"))
    print(f"network {net.kind}, {net.precision}, 1 torch thread")
    gen = torch.Generator().manual_seed(0)
    for batch, kind, calls in ((8, "predict", 20), (16, "predict", 20), (32, "predict", 10), (80, "train", 3)):
        fns = paths(net, batch, kind, gen)
        for fn in fns.values():
            for _ in range(3):
                fn()
        times = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[name].append((time.perf_counter() - t0) / calls * 1e3)
        ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
        print(f"{kind:8s}{batch:4d}: before {statistics.median(times['before']):7.3f} ms, after "
              f"{statistics.median(times['after']):7.3f} ms; after / before, paired: median "
              f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
