"""What V-trace changes: the same training run with POLICY_LAG_CORRECTION=none and =vtrace, seed by seed.

    python scripts/compare_vtrace.py --config configs/cartpole.toml --seeds 1 2 3 --target 195 --window 20 \\
        --budget 120 [KEY=VALUE ...]

Each run is a real `python -m ga3c` process in a folder of its own under --out; it ends when the rolling mean over
--window episodes reaches --target (SIGINT, as a user's Ctrl-C) or after --budget seconds (MAX_SECONDS). The runs
go one after another, so each has the whole machine; the modes alternate within a seed, so a drift of the machine
hits both. Extra KEY=VALUE arguments go to every run (for example MAX_QUEUE_SIZE=... to make the policy lag
larger). Prints a markdown table: per run the seconds and agent steps (of finished episodes) to the target, the best
rolling mean, the policy lag (mean and max over the run) and the steps per second, then the medians per mode.
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
MODES = ("none", "vtrace")


def run_once(args: argparse.Namespace, mode: str, seed: int, folder: Path) -> dict:
    """One training run; returns its measures (None where the target was not reached)."""
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / "results.txt"
    cmd = [sys.executable, "-m", "ga3c", *(["--config", args.config] if args.config else []), *args.overrides,
           f"POLICY_LAG_CORRECTION={mode}", f"SEED={seed}", f"MAX_SECONDS={args.budget}",
           f"STAT_ROLLING_MEAN_WINDOW={args.window}", f"RESULTS_FILENAME={results}",
           f"CHECKPOINT_DIR={folder / 'checkpoints'}", f"LOG_DIR={folder / 'logs'}", "SAVE_MODELS=False"]
    with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=Path(__file__).resolve().parent.parent)
        stopping = False
        while proc.poll() is None:
            time.sleep(1.0)
            if not stopping and results.exists() and args.target is not None:
                if first_reach(read_results(str(results)), args.window, args.target) is not None:
                    stopping = True
                    proc.send_signal(signal.SIGINT)
        proc.wait()
    stderr = (folder / "stderr.txt").read_text()
    found = SUMMARY.findall(stderr)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"run {mode} seed {seed} failed (exit {proc.returncode}); see {folder / 'stderr.txt'}")
    s = {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)", found[-1])}
    rows = read_results(str(results)) if results.exists() else []
    reach = first_reach(rows, args.window, args.target) if args.target is not None else None
    return dict(mode=mode, seed=seed, seconds=reach[0] if reach else None, steps=reach[1] if reach else None,
                best=best_mean(rows, args.window), lag_mean=s.get("policy_lag_mean"), lag_max=s.get("policy_lag_max"),
                steps_per_s=s.get("steps_per_s"), episodes=len(rows))


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
    lines = [f"| mode | seed | seconds to {fmt(target, 'g')} | steps to {fmt(target, 'g')} | best rolling mean "
             "| policy lag mean / max | steps/s |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['mode']} | {r['seed']} | {fmt(r['seconds'], '.0f')} | {fmt(r['steps'], 'd')} | "
                     f"{fmt(r['best'], '.1f')} | {fmt(r['lag_mean'], '.1f')} / {fmt(r['lag_max'], '.0f')} | "
                     f"{fmt(r['steps_per_s'], '.0f')} |")
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        reached = [r for r in mine if r["seconds"] is not None]
        lines.append(f"| **{mode}: median** | {len(reached)}/{len(mine)} reached | "
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
    p.add_argument("--target", type=float, help="rolling mean at which a run stops (none: run the whole budget)")
    p.add_argument("--window", type=int, default=100, help="episodes in the rolling mean")
    p.add_argument("--budget", type=int, default=120, help="seconds per run at most")
    p.add_argument("--out", default="vtrace_runs", help="folder for the runs' files")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE settings for every run")
    args = p.parse_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        p.error(f"expected KEY=VALUE settings, got {bad}")
    runs = []
    for seed in args.seeds:
        for mode in (MODES if seed % 2 else MODES[::-1]):
            r = run_once(args, mode, seed, Path(args.out) / f"{mode}-seed{seed}")
            print(f"{mode} seed {seed}: {r}", flush=True)
            runs.append(r)
    print()
    print("\n".join(table(runs, args.target)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
