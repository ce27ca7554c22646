"""ProcessStats: the episode log, the stats line and the TensorBoard scalars, in a process of its own.

Agents send one record per finished episode; the stats process appends it to RESULTS_FILENAME as one line
written and flushed at once (`YYYY-mm-dd HH:MM:SS, reward, length`), counts it in the shared episode counter
(the server anneals, saves and stops on it), and prints the original's stats line with true counts:
PPS = states predicted per second, TPS = training updates per second, plus agent frames per second, the policy
lag and NT/NP/NA. Episodes beyond EPISODES (finished while the run was ending) are not counted.

Two pipes feed it: the episode pipe, where every agent writes fixed-size records (no lock, so an agent killed at
any moment blocks nobody), and a control connection from the server (training scalars for TensorBoard, and None
to end). It ends on None after reading every episode the agents sent, and also by itself when the server is gone
(end of file on the control connection, or a new parent process), so a killed server leaves no stats process.
A results file that cannot be written (disk full, folder removed) ends it with one error line and status
EXIT_RESULTS_FAILED, which the server sees and stops on; a line that could not be written whole is cut off, so
the file keeps every complete line and no torn one. TensorBoard files that cannot be written (LOG_DIR full) cost
one warning line: the run goes on without TensorBoard.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import select
import signal
import sys
import threading
import time
from collections import deque
from datetime import datetime

from ga3c import SharedBuffers as sb
from ga3c.settings import settings_table

EXIT_RESULTS_FAILED = 3  # the stats process's exit status when the results file cannot be written


def results_line(when: float, reward: float, length: int) -> str:
    """One results.txt line: `YYYY-mm-dd HH:MM:SS, reward, length`. The original wrote the reward with %d (cut to
    an integer); here a whole score is written whole and a fractional one keeps its fraction, with 10 significant
    digits (Python's %g keeps 6: 1234567 became 1.23457e+06)."""
    return f"{datetime.fromtimestamp(when):%Y-%m-%d %H:%M:%S}, {reward:.10g}, {length}\n"


def last_rewards(path: str, count: int) -> list[float]:
    """The rewards of the last `count` complete lines of a results file, read from its end. A resumed run's rolling
    score goes on from them: otherwise it would be the mean of the episodes since the resume alone."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as f:
            pos = f.seek(0, os.SEEK_END)
            block = b""
            while pos > 0 and block.count(b"\n") <= count:
                size = min(1 << 16, pos)
                pos -= size
                f.seek(pos)
                block = f.read(size) + block
    except OSError:
        return []
    lines = block.split(b"\n")
    if pos > 0:
        lines = lines[1:]  # the first may be the tail of a line that began before the block
    rewards = []
    for line in [line for line in lines if line.strip()][-count:]:
        try:
            rewards.append(float(line.split(b",")[1]))
        except (IndexError, ValueError):  # not a results line: the score starts from the lines after it
            rewards.clear()
    return rewards


class ProcessStats:
    def __init__(self, cfg, shared: sb.SharedBuffers, episode_conn, control_conn, parent_pid: int, start_time: float,
                 frames_per_step: int, results_path: str) -> None:
        self.cfg = cfg
        self.shared = shared
        self.episode_conn = episode_conn
        self.control = control_conn
        self.parent_pid = parent_pid
        self.start_time = start_time
        self.frames_per_step = frames_per_step
        self.results_path = results_path

    def total_steps(self) -> int:
        c = self.shared.counters
        return int(self.shared.agent_steps.sum() + c[sb.C_CLUSTER_STEPS] + c[sb.C_STEPS_BASE])

    def run(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server ends us with a sentinel
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cfg, c = self.cfg, self.shared.counters
        self.writer = None
        self.opening = None  # the thread importing TensorBoard's writer; scalars wait in `pending` meanwhile
        self.pending: list[tuple[str, float, int]] = []
        if cfg.TENSORBOARD:
            # TensorBoard's writer thread ends on a write error and hands it to our next call: no traceback here
            threading.excepthook = lambda args: None if issubclass(args.exc_type, OSError) else \
                threading.__excepthook__(args)
            self.opening = threading.Thread(target=self._open_writer, name="tensorboard-open", daemon=True)
            self.opening.start()
        self.scores: deque[float] = deque(maxlen=cfg.STAT_ROLLING_MEAN_WINDOW)  # RScore's episodes
        self.window: deque[tuple[float, int]] = deque(maxlen=cfg.STAT_ROLLING_MEAN_WINDOW)  # RPPS's: this run's
        self.episodes = int(c[sb.C_EPISODES])
        self.scores.extend(last_rewards(self.results_path, min(self.episodes, cfg.STAT_ROLLING_MEAN_WINDOW)))
        self.rolling_sum = sum(self.scores)
        self.base_steps = self.total_steps()
        episode_fd, control_fd = self.episode_conn.fileno(), self.control.fileno()
        fcntl.fcntl(episode_fd, fcntl.F_SETFL, fcntl.fcntl(episode_fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        chunk = sb.EPISODE.size * 256
        self.results_fd = -1
        try:
            self.results_fd = os.open(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.results_size = os.lseek(self.results_fd, 0, os.SEEK_END)
            while True:
                ready = select.select([episode_fd, control_fd], [], [], 1.0)[0]
                if episode_fd in ready:
                    self._read_episodes(episode_fd, chunk)
                if control_fd in ready:
                    try:
                        item = self.control.recv()
                    except (EOFError, OSError):  # the server is gone
                        item = None
                    if item is None:
                        break
                    _, step, scalars = item
                    for key, value in scalars.items():
                        self._scalar(key, value, step)
                elif not ready and os.getppid() != self.parent_pid:  # the server was killed
                    break
            # every agent has exited (or the server is gone): what is left in the pipe is all there is
            while self._read_episodes(episode_fd, chunk):
                pass
        except OSError as exc:
            print(f"ga3c: error: the stats process cannot write {self.results_path!r}: {exc}; stopping the run "
                  f"(its {self.episodes} complete lines are kept)", file=sys.stderr, flush=True)
            sys.exit(EXIT_RESULTS_FAILED)
        finally:
            if self.results_fd >= 0:
                os.close(self.results_fd)
            if self.opening is not None:
                self.opening.join()
                self._adopt_writer()
            if self.writer is not None:
                self._tensorboard(self.writer.close, closing=True)

    def _open_writer(self) -> None:
        """Imports torch's SummaryWriter and opens LOG_DIR, in a thread: the import takes seconds, and the
        episodes that finish meanwhile must reach the results file (a run stopped then would otherwise lose them
        when the server ends a stats process that is still importing)."""
        def make() -> None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=self.cfg.LOG_DIR)
        self._tensorboard(make)

    def _adopt_writer(self) -> None:
        """Once the writer is open (or failed to open), writes the settings and the scalars that waited for it."""
        self.opening = None
        if self.writer is not None:  # the run's settings, at the step it starts from (a resumed run may change them)
            start = int(self.shared.counters[sb.C_STEPS_BASE])  # not base_steps: the agents may have stepped already
            self._tensorboard(lambda: self.writer.add_text("settings", settings_table(self.cfg), start))
        pending, self.pending = self.pending, []
        for key, value, step in pending:
            self._scalar(key, value, step)

    def _tensorboard(self, call, closing: bool = False) -> None:
        """Runs a TensorBoard call; the first that fails (LOG_DIR full or gone) costs one warning line and
        TensorBoard for the rest of the run, not the run."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - OSError, or the writer's own error types
            text = str(exc).strip().splitlines()
            print(f"ga3c: warning: TensorBoard cannot write to {self.cfg.LOG_DIR!r}: "
                  f"{text[0] if text else type(exc).__name__}; training goes on without TensorBoard",
                  file=sys.stderr, flush=True)
            writer, self.writer = self.writer, None
            if writer is not None and not closing:
                with contextlib.suppress(Exception):  # it failed already, and said so
                    writer.close()

    def _scalar(self, key: str, value: float, step: int) -> None:
        if self.opening is not None:
            if self.opening.is_alive():
                self.pending.append((key, value, step))
                return
            self._adopt_writer()
        if self.writer is not None:
            self._tensorboard(lambda: self.writer.add_scalar(key, value, step))

    def _write_result(self, line: str) -> None:
        """Appends one line whole; on a failed write cuts off what part of it went in, and raises."""
        raw = line.encode()
        data = memoryview(raw)
        try:
            while data:
                data = data[os.write(self.results_fd, data):]
        except OSError:
            with contextlib.suppress(OSError):  # not a regular file (e.g. /dev/full)
                os.ftruncate(self.results_fd, self.results_size)
            raise
        self.results_size += len(raw)

    def _read_episodes(self, fd: int, chunk: int) -> bool:
        """Records the episodes waiting in the pipe; False when none was there."""
        try:
            data = os.read(fd, chunk)
        except BlockingIOError:
            return False
        if not data:
            return False
        for when, agent, reward, length in sb.EPISODE.iter_unpack(data):
            self._episode(when, agent, reward, length)
        return True

    def _episode(self, when: float, _agent: int, reward: float, length: int) -> None:
        cfg, c = self.cfg, self.shared.counters
        if self.episodes >= cfg.EPISODES:
            return
        self._write_result(results_line(when, reward, length))
        self.episodes += 1
        c[sb.C_EPISODES] = self.episodes
        scores = self.scores
        if len(scores) == scores.maxlen:
            self.rolling_sum -= scores[0]
        scores.append(reward)
        self.rolling_sum += reward
        self.window.append((time.time(), length))
        steps = self.total_steps()
        self._scalar("episode/score", reward, steps)
        self._scalar("episode/length", length, steps)
        if self.episodes % cfg.PRINT_STATS_FREQUENCY == 0:
            self._print(self.episodes, reward, self.rolling_sum / len(scores), self.window, steps, self.base_steps)

    def _print(self, episodes, reward, rscore, window, steps, base_steps) -> None:
        c = self.shared.counters
        elapsed = max(time.time() - self.start_time, 1e-9)
        span = window[-1][0] - window[0][0]
        rpps = sum(length for _, length in list(window)[1:]) / span if span > 0 else 0.0
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
               int(lag_max) if math.isfinite(lag_max) else 0, nt, np_, na)
            + (" [NG: %2d]" % int(c[sb.C_CLUSTER_GROUPS]) if self.cfg.CLUSTER else ""),
            flush=True,
        )
        for key, value in (("throughput/pps", pps), ("throughput/tps", tps), ("throughput/fps", fps),
                           ("throughput/steps_per_s", fps / self.frames_per_step),
                           ("policy_lag/mean", lag), ("policy_lag/max", lag_max), ("episode/rolling_score", rscore),
                           ("system/trainers", nt), ("system/predictors", np_), ("system/agents", na)):
            self._scalar(key, value, steps)


def run_stats(*args) -> None:
    """Process target."""
    try:
        ProcessStats(*args).run()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(0)
