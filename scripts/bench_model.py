"""The model alone: what one prediction batch and one training step cost, per batch size, on this machine.

    python scripts/bench_model.py --config configs/cpu.toml [--predict 8 16 32 64 128] [--train 40 80 160]
                                  [--repeats 5] [--ceiling ENV_ONLY_STEPS_PER_S PREDICT_BATCH TRAIN_BATCH]
                                  [KEY=VALUE ...]

Builds the network the settings give (the game's state shape and actions, PRECISION, TORCH_THREADS) in one
thread, with nothing else of the engine, and times NetworkVP.predict and NetworkVP.train on random states: the
median over --repeats rounds of the milliseconds per call and the microseconds per state. The prediction's
weights stay fixed (in a run they change with every update, about once in six prediction batches with
configs/cpu.toml, and the bf16 copies are then cast again). This is the floor under the trainer's and the
predictors' CPU time per agent step that scripts/benchmark.py --profile reports.

--ceiling E P T: with env-only E agent steps/s on this machine's cores (scripts/benchmark.py's reading), a
prediction batch of P states and training batches of T (both among those measured), the highest ratio of
training to env-only steps/s the model allows: the emulators' CPU per step over that plus one prediction and
one training of a state each, as if nothing else cost anything. Prints a table, then one JSON object as its
last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import code_version, cpu_model  # noqa: E402 - the scripts' folder goes on the path first


def _time_calls(fn, calls: int, repeats: int) -> float:
    """Median over `repeats` rounds of the seconds per call of fn, after a warm-up round."""
    for _ in range(max(2, calls // 4)):
        fn()
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls)
    return statistics.median(rounds)


def measure(cfg, predict_batches: list[int], train_batches: list[int], repeats: int) -> dict:
    import torch

    from ga3c.Environment import Environment
    from ga3c.NetworkVP import NetworkVP, resolve_device, torch_threads

    device = resolve_device(cfg.DEVICE)
    torch.set_num_threads(torch_threads(cfg, device))  # as the engine's predictors and trainers run
    env = Environment(cfg, seed=0)
    shape, actions = tuple(env.state_shape), env.num_actions
    env.close()
    net = NetworkVP(cfg, shape, actions, device)
    gen = torch.Generator().manual_seed(0)

    def states(n: int) -> torch.Tensor:
        if len(shape) == 3:
            return torch.randint(0, 256, (n,) + shape, dtype=torch.uint8, generator=gen)
        return torch.randn((n,) + shape, generator=gen)

    def row(seconds: float, n: int) -> dict:
        return {"ms_per_call": round(seconds * 1e3, 3), "us_per_state": round(seconds / n * 1e6, 1)}

    result = {"state_shape": list(shape), "actions": actions, "network": net.kind, "precision": net.precision,
              "torch_threads": torch.get_num_threads(), "predict": {}, "train": {}}
    for n in predict_batches:
        x = states(n)
        result["predict"][str(n)] = row(_time_calls(lambda x=x: net.predict(x), max(10, 2000 // n), repeats), n)
    lr, beta = float(cfg.LEARNING_RATE_START), float(cfg.BETA_START)
    for n in train_batches:
        x, a = states(n), torch.randint(0, actions, (n,), generator=gen)
        r = torch.randn(n, generator=gen)
        seqs = [(torch.zeros(n, net.recurrent_size), torch.zeros(n, net.recurrent_size), torch.ones(1, n))] \
            if net.recurrent_size else None
        seconds = _time_calls(lambda x=x, a=a, r=r, s=seqs: net.train(x, a, r, lr, beta, sequences=s),
                              max(5, 800 // n), repeats)
        result["train"][str(n)] = row(seconds, n)
    return result


def ceiling(result: dict, env_steps_per_s: float, predict_batch: int, train_batch: int, cores: int) -> dict:
    """The model-bound ceiling of training / env-only steps/s (see the module docstring)."""
    env_us = cores * 1e6 / env_steps_per_s
    model_us = result["predict"][str(predict_batch)]["us_per_state"] + result["train"][str(train_batch)]["us_per_state"]
    return {"env_only_steps_per_s": env_steps_per_s, "cores": cores, "predict_batch": predict_batch,
            "train_batch": train_batch, "env_us_per_step": round(env_us, 1), "model_us_per_step": round(model_us, 1),
            "ratio": round(env_us / (env_us + model_us), 3)}


def main(argv: list[str] | None = None) -> int:
    from ga3c.errors import ConfigError
    from ga3c.settings import parse_settings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], help="a preset (configs/*.toml); repeatable")
    parser.add_argument("--predict", type=int, nargs="+", default=[8, 16, 32, 64, 128], help="prediction batches")
    parser.add_argument("--train", type=int, nargs="+", default=[40, 80, 160], help="training batches")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per figure (the median is reported)")
    parser.add_argument("--ceiling", nargs=3, type=float, metavar=("ENV_ONLY_STEPS_PER_S", "PREDICT", "TRAIN"),
                        help="print the model-bound ceiling of the training / env-only ratio")
    parser.add_argument("settings", nargs="*", help="KEY=VALUE settings, as for training")
    args = parser.parse_args(argv)
    try:
        cfg = parse_settings([f"--config={path}" for path in args.config] + list(args.settings))
    except ConfigError as exc:
        print(f"bench_model: error: {exc}", file=sys.stderr)
        return 2
    if args.ceiling:
        env_sps, p, t = args.ceiling
        if env_sps <= 0 or int(p) not in args.predict or int(t) not in args.train:
            print("bench_model: error: --ceiling E P T needs E > 0, P among --predict and T among --train "
                  f"(got {args.ceiling}, --predict {args.predict}, --train {args.train})", file=sys.stderr)
            return 2
    if min(args.predict + args.train) < 1 or args.repeats < 1:
        print("bench_model: error: batch sizes and --repeats must be at least 1", file=sys.stderr)
        return 2
    result = measure(cfg, args.predict, args.train, args.repeats)
    result["cpu_model"] = cpu_model()
    result["code"] = code_version()
    print(f"{cfg.ATARI_GAME}: {result['network']} network, {result['precision']}, "
          f"{result['torch_threads']} torch thread(s), {result['cpu_model']}")
    print(f"code: {result['code']}")
    print(f"{'call':<8}{'batch':>7}{'ms/call':>10}{'us/state':>10}")
    for kind in ("predict", "train"):
        for n, row in result[kind].items():
            print(f"{kind:<8}{n:>7}{row['ms_per_call']:>10.3f}{row['us_per_state']:>10.1f}")
    if args.ceiling:
        c = ceiling(result, args.ceiling[0], int(args.ceiling[1]), int(args.ceiling[2]), os.cpu_count() or 1)
        result["ceiling"] = c
        print(f"ceiling: {c['cores']} cores at {c['env_only_steps_per_s']:.0f} env-only steps/s = "
              f"{c['env_us_per_step']:.0f} us of CPU per step; the model adds {c['model_us_per_step']:.0f} "
              f"(prediction in batches of {c['predict_batch']}, training in batches of {c['train_batch']}): "
              f"training / env-only at most {c['ratio']:.3f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
