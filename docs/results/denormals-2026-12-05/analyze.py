"""Denormals in a checkpoint, and what they cost a training step and a prediction."""
import glob, sys, time, torch
from ga3c.settings import parse_settings
from ga3c.NetworkVP import NetworkVP
from ga3c.Checkpoint import load_checkpoint

TINY = torch.finfo(torch.float32).tiny
def denorm(t):
    t = t.float()
    return int(((t != 0) & (t.abs() < TINY)).sum()), t.numel()

path = sys.argv[1]
ck = load_checkpoint(path)
net_state = ck['network'] if 'network' in ck else ck
print("keys", list(ck.keys())[:10])
ns = ck.get('network', ck)
tot = [0, 0]
for k, v in ns['model'].items():
    d, n = denorm(v); tot[0] += d; tot[1] += n
    if d: print(f"param {k}: {d}/{n}")
print("params denormal", tot)
tot = [0, 0]
for opt in ns['optimizers']:
    for i, st in opt['state'].items():
        for name, v in st.items():
            if torch.is_tensor(v) and v.numel() > 1:
                d, n = denorm(v); tot[0] += d; tot[1] += n
                if d: print(f"opt state {i} {name}: {d}/{n}  min nonzero {v[v!=0].abs().min().item():.3g}")
print("optimizer state denormal", tot)

cfg = parse_settings(["--config", "configs/cpu.toml"])
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
states = torch.rand(80, 4, 84, 84, generator=g)
actions = torch.randint(0, 6, (80,), generator=g)
returns = torch.randn(80, generator=g)
pstates = torch.rand(16, 4, 84, 84, generator=g)

def bench(net, label):
    for flush in (False, True):
        torch.set_flush_denormal(flush)
        for _ in range(3): net.train(states, actions, returns, 7e-4, 0.01)
        t = time.perf_counter(); n = 30
        for _ in range(n): net.train(states, actions, returns, 0.0, 0.01)  # lr 0: the state stays put
        tt = (time.perf_counter() - t) / n
        t = time.perf_counter()
        for _ in range(100): net.predict(pstates)
        tp = (time.perf_counter() - t) / 100
        print(f"{label} flush={flush}: train step(80) {tt*1e3:.1f} ms, predict(16) {tp*1e3:.2f} ms")
    torch.set_flush_denormal(False)

fresh = NetworkVP(cfg, (4, 84, 84), 6, torch.device("cpu"))
print("precision", fresh.precision)
bench(fresh, "fresh")
net = NetworkVP(cfg, (4, 84, 84), 6, torch.device("cpu"))
net.set_state(ns)
bench(net, "ckpt ")
