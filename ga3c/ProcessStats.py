"""ProcessStats: the episode log, the stats line and the TensorBoard scalars, in a process of its own.

Agents send one record per finished episode; the stats process appends it to RESULTS_FILENAME as one line
written and flushed at once (`YYYY-mm-dd HH:MM:SS, reward, length`), counts it in the shared episode counter
(the server anneals, saves and stops on it), and prints the original's stats line with true counts:
PPS = states predicted per second, TPS = training updates per second, plus agent frames per second, the policy
lag and NT/NP/NA. Episodes beyond EPISODES (finished while the run was ending) are not counted.
"""

from __future__ import annotations

import math
import queue
import signal
import sys
import time
from collections import deque

from ga3c import SharedBuffers as sb


class ProcessStats:
    def __init__(self, cfg, shared: sb.SharedBuffers, stats_queue, start_time: float, frames_per_step: int,
                 results_path: str) -> None:
        self.cfg = cfg
        self.shared = shared
        self.queue = stats_queue
        self.start_time = start_time
        self.frames_per_step = frames_per_step
        self.results_path = results_path

    def total_steps(self) -> int:
        return int(self.shared.agent_steps.sum() + self.shared.counters[sb.C_STEPS_BASE])

    def run(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server ends us with a sentinel
        cfg, c = self.cfg, self.shared.counters
        writer = None
        if cfg.TENSORBOARD:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=cfg.LOG_DIR)
        window = deque(maxlen=cfg.STAT_ROLLING_MEAN_WINDOW)
        rolling_sum = 0.0
        episodes = int(c[sb.C_EPISODES])
        base_steps = self.total_steps()
        with open(self.results_path, "a", encoding="utf-8") as results:
            while True:
                try:
                    item = self.queue.get(timeout=1.0)
                except queue.Empty:
                    continue
                if item is None:
                    break
                if item[0] == "train":
                    if writer is not None:
                        _, step, scalars = item
                        for key, value in scalars.items():
                            writer.add_scalar(key, value, step)
                    continue
                if episodes >= cfg.EPISODES:
                    continue
                when, _agent, reward, length = item
                results.write(f"{when:%Y-%m-%d %H:%M:%S}, {reward:g}, {length}\n")
                results.flush()
                episodes += 1
                c[sb.C_EPISODES] = episodes
                if len(window) == window.maxlen:
                    rolling_sum -= window[0][1]
                window.append((time.time(), reward, length))
                rolling_sum += reward
                steps = self.total_steps()
                if writer is not None:
                    writer.add_scalar("episode/score", reward, steps)
                    writer.add_scalar("episode/length", length, steps)
                if episodes % cfg.PRINT_STATS_FREQUENCY == 0:
                    self._print(episodes, reward, rolling_sum / len(window), window, steps, base_steps, writer)
        if writer is not None:
            writer.close()

    def _print(self, episodes, reward, rscore, window, steps, base_steps, writer) -> None:
        c = self.shared.counters
        elapsed = max(time.time() - self.start_time, 1e-9)
        span = window[-1][0] - window[0][0]
        rpps = sum(length for _, _, length in list(window)[1:]) / span if span > 0 else 0.0
        pps = c[sb.C_PREDICTIONS] / elapsed
        tps = c[sb.C_UPDATES] / elapsed
        fps = (steps - base_steps) * self.frames_per_step / elapsed
        lag = c[sb.C_LAG_SUM] / c[sb.C_TRAINED] if c[sb.C_TRAINED] else 0.0
        lag_max = c[sb.C_LAG_MAX]
        nt, np_, na = int(c[sb.C_NT]), int(c[sb.C_NP]), int(c[sb.C_NA])
        print(
            "[Time: %8d] [Episode: %8d Score: %10.4f] [RScore: %10.4f RPPS: %5d] [PPS: %5d TPS: %5d] "
            "[FPS: %6d Lag: %5.1f/%3d] [NT: %2d NP: %2d NA: %2d]"
            % (int(elapsed), episodes, reward, rscore, int(rpps), int(pps), int(tps), int(fps), lag,
               int(lag_max) if math.isfinite(lag_max) else 0, nt, np_, na),
            flush=True,
        )
        if writer is not None:
            for key, value in (("throughput/pps", pps), ("throughput/tps", tps), ("throughput/fps", fps),
                               ("throughput/steps_per_s", fps / self.frames_per_step),
                               ("policy_lag/mean", lag), ("policy_lag/max", lag_max), ("episode/rolling_score", rscore),
                               ("system/trainers", nt), ("system/predictors", np_), ("system/agents", na)):
                writer.add_scalar(key, value, steps)


def run_stats(*args) -> None:
    """Process target."""
    try:
        ProcessStats(*args).run()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(0)
