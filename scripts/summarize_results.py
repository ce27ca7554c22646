"""Learning summary of a results file: when the rolling mean score first reached each threshold.

    python scripts/summarize_results.py results.txt [--window 100] [--frameskip 4] [--thresholds -10 0 10 18]
                                        [--at-frames 4e6 8e6 11e6]

Reads `YYYY-mm-dd HH:MM:SS, reward, length` lines (a torn last line is ignored, so it works on a file that a
training is still writing) and prints, for each threshold, the minutes since the first episode, the episode and
the agent frames at which the rolling mean over the last `--window` episodes first reached it, then the best
rolling mean and a `minutes to +T:` line for the last threshold, as the results docs state it. With `--at-frames`
it also prints the rolling mean at the first episode whose agent frames reach each given count: runs on machines
of different speeds are compared at equal frames, not at equal minutes.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from datetime import datetime


def read_results(path: str) -> list[tuple[datetime, float, int]]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # torn: still being written
    out = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            out.append((datetime.strptime(parts[0], "%Y-%m-%d %H:%M:%S"), float(parts[1]), int(parts[2])))
        except ValueError:
            continue
    return out


def summarize(rows, window: int, frameskip: int, thresholds: list[float],
              at_frames: list[float] | None = None) -> list[str]:
    start = rows[0][0]
    recent: deque[float] = deque(maxlen=window)
    frames = 0
    reached: dict[float, tuple[float, int, int]] = {}
    at: dict[float, tuple[float, float, float, int, int]] = {}  # frames -> mean, best so far, minutes, episode, frames
    best = (float("-inf"), 0.0)
    for episode, (when, reward, length) in enumerate(rows, start=1):
        recent.append(reward)
        frames += length * frameskip
        mean = sum(recent) / len(recent)
        minutes = (when - start).total_seconds() / 60
        if len(recent) == window and mean > best[0]:
            best = (mean, minutes)
        for t in thresholds:
            if t not in reached and len(recent) == window and mean >= t:
                reached[t] = (minutes, episode, frames)
        for f in at_frames or []:
            if f not in at and frames >= f:
                at[f] = (mean, best[0], minutes, episode, frames)
    lines = [f"{len(rows)} episodes, {frames} agent frames, "
             f"{(rows[-1][0] - start).total_seconds() / 60:.1f} minutes; rolling mean over {window} episodes"]
    lines.append(f"{'threshold':>10} {'minutes':>9} {'episode':>8} {'frames':>12}")
    for t in thresholds:
        if t in reached:
            m, e, fr = reached[t]
            lines.append(f"{t:>10g} {m:9.1f} {e:8d} {fr:12d}")
        else:
            lines.append(f"{t:>10g} {'-':>9} {'-':>8} {'-':>12}")
    if at_frames:
        lines.append(f"{'at frames':>10} {'mean':>9} {'best':>9} {'minutes':>9} {'episode':>8} {'frames':>12}")
    for f in at_frames or []:
        if f in at:
            mean, best_so_far, m, e, fr = at[f]
            best_text = f"{best_so_far:9.1f}" if best_so_far > float("-inf") else f"{'-':>9}"
            lines.append(f"{f:>10g} {mean:9.1f} {best_text} {m:9.1f} {e:8d} {fr:12d}")
        else:
            lines.append(f"{f:>10g} not reached: the file ends at {frames} frames")
    last = thresholds[-1]
    if best[0] == float("-inf"):
        lines.append(f"minutes to {last:+g}: not reached, fewer than {window} episodes")
    elif last in reached:
        lines.append(f"minutes to {last:+g}: {reached[last][0]:.0f}")
    else:
        lines.append(f"minutes to {last:+g}: not reached, best {best[0]:.1f} after {best[1]:.0f} min")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--frameskip", type=int, default=4,
                        help="emulator frames per agent step: FRAMESKIP for an ALE game (4), 1 for a vector task")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[-10, 0, 10, 18])
    parser.add_argument("--at-frames", type=float, nargs="+", default=[],
                        help="agent frame counts: the rolling mean (over fewer episodes while the file has fewer "
                             "than --window) and the best full-window mean so far at the first episode reaching each")
    args = parser.parse_args(argv)
    try:
        rows = read_results(args.results)
    except OSError as exc:
        print(f"summarize_results: error: cannot read {args.results}: {exc.strerror}", file=sys.stderr)
        return 2
    if not rows:
        print(f"summarize_results: error: no results line in {args.results}", file=sys.stderr)
        return 2
    print("\n".join(summarize(rows, args.window, args.frameskip, args.thresholds, args.at_frames)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
