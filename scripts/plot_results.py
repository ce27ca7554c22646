#!/usr/bin/env python3
"""Plots a GA3C results file: the score of each episode and its rolling mean; or several runs side by side.

    python scripts/plot_results.py results.txt -o curve.png [--window N] [--frameskip 4]
    python scripts/plot_results.py seed1.txt seed2.txt seed3.txt -o seeds.png [--labels s1 s2 s3] [--target 18]

The results file has one line per episode, `YYYY-mm-dd HH:MM:SS, score, length` (length in agent steps), as the
training writes it. The top panel plots the scores against episodes, the bottom one against wall-clock minutes since
the first episode; both have agent frames (cumulative length x frameskip) on a secondary x axis at the top. The
rolling mean is the mean of the last N episodes (of all of them while fewer than N are done). Several files (the
seeds of one setting, say) give one figure of their rolling means, against agent frames on top and against minutes
since each run's first episode below, one line per run, with an optional dashed target line; each run's episodes,
frames and best rolling mean are printed.

Safe on a file a running training is still writing: a last line without its newline is torn (still being
written) and ignored, and so are blank lines; other lines that do not parse are skipped with a count on stderr.
Needs matplotlib (`pip install ga3c[plot]`); draws with the Agg backend, so no display is needed.
Exit status: 0, or 2 with one `plot_results.py: error: ...` line (missing file, no valid line, no matplotlib).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime

PROG = "plot_results.py"
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class PlotError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def read_results(path: str) -> tuple[list[datetime], list[float], list[int], int]:
    """(end times, scores, lengths, lines skipped) of the complete, valid lines of a results file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise PlotError(f"results file '{path}' does not exist; train first (./_train.sh writes results.txt) "
                        f"or give the path of RESULTS_FILENAME") from None
    except IsADirectoryError:
        raise PlotError(f"'{path}' is a folder, not a results file") from None
    except OSError as exc:
        raise PlotError(f"results file '{path}' cannot be read: {exc.strerror}") from None
    lines = data.split(b"\n")
    if lines and lines[-1]:
        lines.pop()  # no newline after it yet: a line the training is still writing
    times: list[datetime] = []
    scores: list[float] = []
    lengths: list[int] = []
    skipped = 0
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            if len(parts) != 3:
                raise ValueError(line)
            when = datetime.strptime(parts[0], TIME_FORMAT)
            score = float(parts[1])
            length = int(parts[2])
            if length < 0 or score != score:
                raise ValueError(line)
        except ValueError:
            skipped += 1
            continue
        times.append(when)
        scores.append(score)
        lengths.append(length)
    if not scores:
        what = f"{skipped} line(s) that are not 'YYYY-mm-dd HH:MM:SS, score, length'" if skipped else "no episode yet"
        raise PlotError(f"results file '{path}' has no valid line ({what})")
    return times, scores, lengths, skipped


def rolling_mean(values, window: int):
    """Mean of the last `window` values at each position (of all of them before `window` are there)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(1, len(v) + 1)
    lo = np.maximum(i - window, 0)
    return (c[i] - c[lo]) / (i - lo)


def _frames_text(x: float, _pos=None) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.0f}"


def _interp(v, xp, fp):
    """np.interp inside [xp[0], xp[-1]], extended linearly outside it by the mean slope (so that the ticks that
    matplotlib puts beyond the data do not all pile up at its ends)."""
    import numpy as np

    v = np.asarray(v, dtype=np.float64)
    slope = (fp[-1] - fp[0]) / (xp[-1] - xp[0])
    out = np.interp(v, xp, fp)
    out = np.where(v < xp[0], fp[0] + (v - xp[0]) * slope, out)
    return np.where(v > xp[-1], fp[-1] + (v - xp[-1]) * slope, out)


def _secondary_frames(ax, x, frames, label: str) -> None:
    """A secondary x axis at the top of `ax` mapping x to agent frames (x and frames strictly increasing).

    Its ticks sit above the primary axis' ticks (frames grow faster late in a run, as episodes get longer, so round
    frame counts would crowd together at the right)."""
    import numpy as np
    from matplotlib.ticker import FixedLocator, FuncFormatter

    if len(x) < 2:
        return
    x = np.asarray(x, dtype=np.float64)
    frames = np.asarray(frames, dtype=np.float64)
    sec = ax.secondary_xaxis("top", functions=(lambda v: _interp(v, x, frames), lambda f: _interp(f, frames, x)))
    lo, hi = max(ax.get_xlim()[0], x[0]), min(ax.get_xlim()[1], x[-1])
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    sec.xaxis.set_major_locator(FixedLocator(_interp(ticks, x, frames)))
    sec.set_xlabel(label)
    sec.xaxis.set_major_formatter(FuncFormatter(_frames_text))


def _pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), or a PlotError that says how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install ga3c[plot] (or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str) -> None:
    """Writes the figure to `out` (its folder made if missing) and closes it."""
    import matplotlib.pyplot as plt

    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fig.savefig(out, dpi=90)
    except OSError as exc:
        raise PlotError(f"cannot write '{out}': {exc.strerror}") from None
    finally:
        plt.close(fig)


def plot(times, scores, lengths, out: str, window: int, frameskip: int, title: str) -> None:
    plt = _pyplot()
    import numpy as np

    n = len(scores)
    episodes = np.arange(1, n + 1)
    scores_a = np.asarray(scores, dtype=np.float64)
    mean = rolling_mean(scores_a, window)
    frames = np.cumsum(np.asarray(lengths, dtype=np.float64)) * frameskip
    t0 = times[0]
    minutes = np.array([(t - t0).total_seconds() / 60.0 for t in times])
    frames_label = f"agent frames (steps x {frameskip})" if frameskip != 1 else "agent steps"

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.5), constrained_layout=True)
    raw_style = dict(marker=".", linestyle="none", markersize=2 if n > 2000 else 3, alpha=0.3, color="tab:blue")
    mean_label = f"mean of last {window}" if n > window else f"running mean (window {window})"
    # Wall-clock times have one-second steps: against time, the mean (and the frames axis) take the value of the
    # last episode of each second, instead of zigzagging through the episodes that share it.
    last = np.r_[minutes[1:] != minutes[:-1], True]
    for ax, x, y_mean, x_mean in ((top, episodes, mean, episodes), (bottom, minutes, mean[last], minutes[last])):
        ax.plot(x, scores_a, label="episode score", **raw_style)
        ax.plot(x_mean, y_mean, color="tab:red", linewidth=1.8, label=mean_label)
        ax.set_ylabel("score")
        ax.grid(True, alpha=0.3)
    top.set_xlabel("episode")
    bottom.set_xlabel("wall-clock minutes since the first episode")
    top.legend(loc="lower right", fontsize="small")
    _secondary_frames(top, np.r_[0, episodes], np.r_[0, frames], frames_label)
    if last.sum() >= 2:
        _secondary_frames(bottom, minutes[last], frames[last], frames_label)
    span = minutes[-1]
    fig.suptitle(f"{title}: {n} episodes in {span:.1f} min, {_frames_text(frames[-1])} {frames_label.split(' (')[0]}"
                 f"; last mean {mean[-1]:.1f}, best mean {mean.max():.1f}", fontsize="medium")
    _save(fig, out)


def plot_runs(runs: list[tuple[str, list, list, list]], out: str, window: int, frameskip: int, title: str | None,
              target: float | None) -> list[tuple[str, int, float, float]]:
    """One figure of several runs' rolling means (`runs`: (label, times, scores, lengths) each), against agent
    frames and against minutes, titled `title` as given (None: "results: N runs"); returns (label, episodes,
    frames, best rolling mean) per run."""
    plt = _pyplot()
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    frames_label = f"agent frames (steps x {frameskip})" if frameskip != 1 else "agent steps"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.5), constrained_layout=True)
    summary = []
    for label, times, scores, lengths in runs:
        mean = rolling_mean(scores, window)
        frames = np.cumsum(np.asarray(lengths, dtype=np.float64)) * frameskip
        minutes = np.array([(t - times[0]).total_seconds() / 60.0 for t in times])
        line, = top.plot(frames, mean, linewidth=1.5, label=label)
        bottom.plot(minutes, mean, linewidth=1.5, color=line.get_color(), label=label)
        summary.append((label, len(scores), float(frames[-1]), float(mean.max())))
    for ax in (top, bottom):
        if target is not None:
            ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
        ax.set_ylabel(f"mean of last {window} episodes")
        ax.grid(True, alpha=0.3)
    top.set_xlabel(frames_label)
    top.xaxis.set_major_formatter(FuncFormatter(_frames_text))
    bottom.set_xlabel("wall-clock minutes since the run's first episode")
    top.legend(loc="lower right", fontsize="small")
    fig.suptitle(title or f"results: {len(runs)} runs", fontsize="medium")
    _save(fig, out)
    return summary


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="Plot a GA3C results file (score per episode), or the "
                                                             "rolling means of several side by side.")
    parser.add_argument("results", nargs="+",
                        help="the results file (RESULTS_FILENAME, results.txt by default); several: one figure")
    parser.add_argument("-o", "--output", help="PNG to write (default: the results file's name with .png; "
                                               "needed with several files)")
    parser.add_argument("--window", type=_positive, default=100, help="episodes of the rolling mean (default 100)")
    parser.add_argument("--frameskip", type=_positive, default=4,
                        help="emulator frames per agent step, for the frames axis (default 4; 1 for CartPole)")
    parser.add_argument("--title", help="title of the figure (default: the results file's name)")
    parser.add_argument("--labels", nargs="+", help="with several files: one legend label per file (default: the "
                                                    "files' names)")
    parser.add_argument("--target", type=float, help="with several files: a dashed line at this score")
    args = parser.parse_args(argv)
    several = len(args.results) > 1
    try:
        if not several and (args.labels or args.target is not None):
            raise PlotError("--labels and --target go with several results files; one file plots its episodes")
        if several and not args.output:
            raise PlotError(f"{len(args.results)} results files make one figure: name it with -o FILE.png")
        if args.labels and len(args.labels) != len(args.results):
            raise PlotError(f"--labels gives {len(args.labels)} label(s) for {len(args.results)} results files: "
                            f"give one per file, in the same order")
        out = args.output or os.path.splitext(args.results[0])[0] + ".png"
        runs = []
        for i, path in enumerate(args.results):
            times, scores, lengths, skipped = read_results(path)
            if skipped:
                print(f"{PROG}: skipped {skipped} line(s) of '{path}' that do not parse", file=sys.stderr)
            runs.append((args.labels[i] if args.labels else os.path.basename(path), times, scores, lengths))
        if several:
            summary = plot_runs(runs, out, args.window, args.frameskip, args.title, args.target)
        else:
            _, times, scores, lengths = runs[0]
            plot(times, scores, lengths, out, args.window, args.frameskip,
                 args.title or os.path.basename(args.results[0]))
    except PlotError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if several:
        print(f"wrote {out} ({len(runs)} runs)")
        for label, episodes, frames, best in summary:
            print(f"{label}: {episodes} episodes, {_frames_text(frames)} frames, best mean of {args.window} "
                  f"{best:.2f}")
    else:
        print(f"wrote {out} ({len(runs[0][2])} episode{'s' * (len(runs[0][2]) != 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
