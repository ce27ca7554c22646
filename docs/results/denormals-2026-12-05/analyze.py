"""Denormals in a checkpoint, and what they cost a training step and a prediction.

    python docs/results/denormals-2026-12-05/analyze.py CHECKPOINT.pt    (from the repository root)
"""
import sys
import time

import torch

from ga3c.Checkpoint import load_checkpoint
from ga3c.NetworkVP import NetworkVP
from ga3c.settings import parse_settings

TINY = torch.finfo(torch.float32).tiny


def denorm(t: torch.Tensor) -> tuple[int, int]:
    """(denormal values, all values) of t."""
    t = t.float()
    return int(((t != 0) & (t.abs() < TINY)).sum()), t.numel()


def report(ns: dict) -> None:
    params = [(f"param {k}", v) for k, v in ns['model'].items()]
    state = [(f"opt state {i} {name}", v) for opt in ns['optimizers'] for i, st in opt['state'].items()
             for name, v in st.items() if torch.is_tensor(v) and v.numel() > 1]
    for title, tensors in (("params denormal", params), ("optimizer state denormal", state)):
        total = [0, 0]
        for label, v in tensors:
            d, n = denorm(v)
            total[0] += d
            total[1] += n
            if d:
                print(f"{label}: {d}/{n}  min nonzero {v[v != 0].abs().min().item():.3g}")
        print(title, total)


def bench(net: NetworkVP, label: str, states, actions, returns, pstates) -> None:
    for flush in (False, True):
        torch.set_flush_denormal(flush)
        for _ in range(3):
            net.train(states, actions, returns, 7e-4, 0.01)
        n = 30
        t = time.perf_counter()
        for _ in range(n):
            net.train(states, actions, returns, 0.0, 0.01)  # lr 0: the state stays put
        tt = (time.perf_counter() - t) / n
        t = time.perf_counter()
        for _ in range(100):
            net.predict(pstates)
        tp = (time.perf_counter() - t) / 100
        print(f"{label} flush={flush}: train step(80) {tt * 1e3:.1f} ms, predict(16) {tp * 1e3:.2f} ms")
    torch.set_flush_denormal(False)


def main() -> None:
    ck = load_checkpoint(sys.argv[1])
    ns = ck.get('network', ck)
    print("keys", list(ck.keys())[:10])
    report(ns)
    cfg = parse_settings(["--config", "configs/cpu.toml"])
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = (torch.rand(80, 4, 84, 84, generator=g), torch.randint(0, 6, (80,), generator=g),
            torch.randn(80, generator=g), torch.rand(16, 4, 84, 84, generator=g))
    fresh = NetworkVP(cfg, (4, 84, 84), 6, torch.device("cpu"))
    print("precision", fresh.precision)
    bench(fresh, "fresh", *data)
    net = NetworkVP(cfg, (4, 84, 84), 6, torch.device("cpu"))
    net.set_state(ns)
    bench(net, "ckpt ", *data)


if __name__ == "__main__":
    main()
