"""The same training run under several settings, seed by seed: what a setting changes in steps and seconds.

    python scripts/compare_settings.py --config configs/classic.toml --seeds 1 2 3 --target 475 --window 20 \\
        --budget 180 [--max-steps N] --variant 'base' --variant 'ppo: PPO_CLIP=0.2 PPO_EPOCHS=4' [KEY=VALUE ...]

A variant is 'NAME' or 'NAME: KEY=VALUE ...' (its settings win over --config and the common KEY=VALUE arguments);
without --variant the two are 'none: POLICY_LAG_CORRECTION=none' and 'vtrace: POLICY_LAG_CORRECTION=vtrace'.
Each run is a real `python -m ga3c` process in a folder of its own under --out; it ends when the rolling mean over
--window episodes reaches --target (SIGINT, as a user's Ctrl-C), after --budget seconds (MAX_SECONDS) or after
--max-steps agent steps (MAX_STEPS). The runs go one after another, so each has the whole machine; the order of
the variants turns round from seed to seed, so a drift of the machine hits them all. Prints a markdown table:
per run the seconds and agent steps (of finished episodes) to the target, the best rolling mean, the policy lag
(mean and max over the run) and the steps per second, then the medians per variant.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from summarize_results import read_results  # noqa: E402

SUMMARY = re.compile(r"summary: (.*)")
DEFAULT_VARIANTS = ("none: POLICY_LAG_CORRECTION=none", "vtrace: POLICY_LAG_CORRECTION=vtrace")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """'NAME' or 'NAME: KEY=VALUE ...' -> (NAME, [KEY=VALUE, ...])."""
    name, _, rest = text.partition(":")
    name, settings = name.strip(), rest.split()
    if not name or any(c in name for c in "/ =") or any("=" not in s for s in settings):
        raise ValueError(f"a variant is 'NAME' or 'NAME: KEY=VALUE ...' (a name without '/', ' ' or '='), "
                         f"got {text!r}")
    return name, settings


def run_once(args: argparse.Namespace, variant: tuple[str, list[str]], seed: int, folder: Path) -> dict:
    """One training run; returns its measures (None where the target was not reached)."""
    name, settings = variant
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / "results.txt"
    cmd = [sys.executable, "-m", "ga3c", *(["--config", args.config] if args.config else []), *args.overrides,
           *settings, f"SEED={seed}", f"MAX_SECONDS={args.budget}", f"MAX_STEPS={args.max_steps}",
           f"STAT_ROLLING_MEAN_WINDOW={args.window}", f"RESULTS_FILENAME={results}",
           f"CHECKPOINT_DIR={folder / 'checkpoints'}", f"LOG_DIR={folder / 'logs'}", "SAVE_MODELS=False"]
    with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=Path(__file__).resolve().parent.parent)
        try:
            stopping = False
            while proc.poll() is None:
                time.sleep(1.0)
                if not stopping and results.exists() and args.target is not None:
                    if first_reach(read_results(str(results)), args.window, args.target) is not None:
                        stopping = True
                        proc.send_signal(signal.SIGINT)
            proc.wait()
        finally:
            stop_run(proc)
    stderr = (folder / "stderr.txt").read_text()
    found = SUMMARY.findall(stderr)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"run {name} seed {seed} failed (exit {proc.returncode}); see {folder / 'stderr.txt'}")
    s = summary_values(found[-1])
    rows = read_results(str(results)) if results.exists() else []
    reach = first_reach(rows, args.window, args.target) if args.target is not None else None
    return dict(variant=name, seed=seed, seconds=reach[0] if reach else None, steps=reach[1] if reach else None,
                best=best_mean(rows, args.window), lag_mean=s.get("policy_lag_mean"), lag_max=s.get("policy_lag_max"),
                steps_per_s=s.get("steps_per_s"), episodes=len(rows))


def stop_run(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """Stops a run still going when the driver itself is stopped (Ctrl-C, SIGTERM, an error): SIGINT, as a user's
    Ctrl-C, so that it saves what it has; SIGKILL after `grace` seconds. A signal sent to the driver alone would
    otherwise leave the run training on its own."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def summary_values(line: str) -> dict[str, float]:
    """The numbers of a run's summary line, by name."""
    return {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)", line)}


def first_reach(rows: list, window: int, target: float) -> tuple[float, int] | None:
    """(seconds since the first episode, agent steps of the finished episodes) when the rolling mean first
    reached target, or None."""
    scores, steps = [], 0
    for when, reward, length in rows:
        scores.append(reward)
        steps += length
        if len(scores) >= window and sum(scores[-window:]) / window >= target:
            return (when - rows[0][0]).total_seconds(), steps
    return None


def best_mean(rows: list, window: int) -> float | None:
    scores = [r for _, r, _ in rows]
    means = [sum(scores[i - window:i]) / window for i in range(window, len(scores) + 1)]
    return max(means) if means else None


def median(values) -> float | None:
    """The median of the values that are not None, or None."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(runs: list[dict], target: float | None) -> list[str]:
    lines = [f"| variant | seed | seconds to {fmt(target, 'g')} | steps to {fmt(target, 'g')} | best rolling mean "
             "| policy lag mean / max | steps/s |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['variant']} | {r['seed']} | {fmt(r['seconds'], '.0f')} | {fmt(r['steps'], 'd')} | "
                     f"{fmt(r['best'], '.1f')} | {fmt(r['lag_mean'], '.1f')} / {fmt(r['lag_max'], '.0f')} | "
                     f"{fmt(r['steps_per_s'], '.0f')} |")
    for name in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == name]
        reached = [r for r in mine if r["seconds"] is not None]
        lines.append(f"| **{name}: median** | {len(reached)}/{len(mine)} reached | "
                     f"{fmt(median(r['seconds'] for r in reached), '.0f')} | "
                     f"{fmt(median(r['steps'] for r in reached), '.0f')} | "
                     f"{fmt(median(r['best'] for r in mine), '.1f')} | "
                     f"{fmt(median(r['lag_mean'] for r in mine), '.1f')} | "
                     f"{fmt(median(r['steps_per_s'] for r in mine), '.0f')} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="preset TOML file passed to every run")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--variant", action="append", metavar="'NAME[: KEY=VALUE ...]'",
                   help="a setting to compare (repeat it); default: POLICY_LAG_CORRECTION none and vtrace")
    p.add_argument("--target", type=float, help="rolling mean at which a run stops (none: run the whole budget)")
    p.add_argument("--window", type=int, default=100, help="episodes in the rolling mean")
    p.add_argument("--budget", type=int, default=120, help="seconds per run at most")
    p.add_argument("--max-steps", type=int, default=0, help="agent steps per run at most (0: no limit)")
    p.add_argument("--out", default="compare_runs", help="folder for the runs' files")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE settings for every run")
    args = p.parse_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        p.error(f"expected KEY=VALUE settings, got {bad}")
    try:
        variants = [parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    except ValueError as e:
        p.error(str(e))
    names = [name for name, _ in variants]
    if len(set(names)) != len(names):
        p.error(f"variant names must differ, got {names}")
    runs = []
    for i, seed in enumerate(args.seeds):
        shift = i % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            r = run_once(args, variant, seed, Path(args.out) / f"{variant[0]}-seed{seed}")
            print(f"{variant[0]} seed {seed}: {r}", flush=True)
            runs.append(r)
    print()
    print("\n".join(table(runs, args.target)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # SIGINT and SIGTERM stop the run in flight as Ctrl-C does, also where the driver was started with SIGINT
    # ignored (a background job of a script, nohup): Python then leaves it ignored, and so would the run
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
