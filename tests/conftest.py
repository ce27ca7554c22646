"""Shared helpers for the process-based tests: run `python -m ga3c` in a folder, read what it left behind
(summary line, results file, stats lines, checkpoints) and find processes a run left behind.

Every run gets a unique marker in its environment (GA3C_TEST_TAG=<uuid>); the agents and the stats process are
spawned from the main process and inherit it, so after a run /proc/*/environ shows any process left behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TAG_KEY = "GA3C_TEST_TAG"

RESULT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d, -?\d+(\.\d+)?, \d+$")
STATS_LINE = re.compile(
    r"^\[Time: +\d+\] \[Episode: +(?P<episode>\d+) Score: +-?[\d.]+\] \[RScore: +(?P<rscore>-?[\d.]+) RPPS: +\d+\] "
    r"\[PPS: +(?P<pps>\d+) TPS: +(?P<tps>\d+)\].*\[NT: +(?P<nt>\d+) NP: +(?P<np>\d+) NA: +(?P<na>\d+)\]$")
SUMMARY = re.compile(r"summary: (?P<body>.*)$", re.MULTILINE)

# What no constant of the code bounds in a stop: one checkpoint save (a few MB written and fsynced on a loaded
# machine) and the interpreter's exit after the server returns.
SAVE_ALLOWANCE = 10.0
EXIT_ALLOWANCE = 5.0

# The original's settings: a --config, so that no automatic CPU preset applies (tests/test_auto_preset.py tests it).
ORIGINAL = ["--config", str(REPO / "configs" / "pong.toml")]
# Common settings of the short CPU runs.
CPU = [*ORIGINAL, "DEVICE=cpu", "DYNAMIC_SETTINGS=False"]
CARTPOLE = ["ATARI_GAME=CartPole-v1", *CPU]


def new_tag() -> str:
    return uuid.uuid4().hex


def tagged_env(tag: str, extra: dict | None = None) -> dict:
    """The environment of a ga3c subprocess: this one, the checkout first on the path, and the marker."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env[TAG_KEY] = tag
    if extra:
        env.update(extra)
    return env


def start_ga3c(args: list[str], cwd: Path, env: dict) -> tuple[subprocess.Popen, Path, Path]:
    """Starts `python -m ga3c ARGS` in its own session, stdout/stderr to files in cwd (readable while it runs)."""
    out_path, err_path = Path(cwd) / "stdout.txt", Path(cwd) / "stderr.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([PYTHON, "-m", "ga3c", *args], cwd=cwd, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, out_path, err_path


def kill_group(proc: subprocess.Popen) -> None:
    """Kills the session a test started (the run and every process it spawned), if anything of it is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def tail(text: str, n: int = 3000) -> str:
    return text[-n:]


def run_ga3c(args: list[str], cwd: Path, timeout: float = 240, env: dict | None = None,
             tag: str | None = None) -> tuple[int, str, str]:
    """Runs `python -m ga3c ARGS` in `cwd`; returns (returncode, stdout, stderr). On timeout the run and its
    children are killed and the test fails with the end of its output."""
    if env is None:
        env = tagged_env(tag or new_tag())
    proc, out_path, err_path = start_ga3c(args, cwd, env)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"ga3c {' '.join(args)} did not finish within {timeout} s\nstdout:\n"
                    f"{tail(out_path.read_text())}\nstderr:\n{tail(err_path.read_text())}")
    # No clean-up here on a normal exit: the test's leftover scan must see what the run left behind.
    return proc.returncode, out_path.read_text(), err_path.read_text()


def tagged_processes(tag: str) -> list[str]:
    """'pid cmdline' of every process (other than this one) whose environment holds the marker."""
    needle = f"{TAG_KEY}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            found.append(f"{entry} {cmd}")
    return found


def leftover_processes(tag: str, grace: float = 5.0) -> list[str]:
    """The marked processes still there after `grace` seconds (children may take a moment to notice)."""
    deadline = time.time() + grace
    while True:
        found = tagged_processes(tag)
        if not found or time.time() >= deadline:
            return found
        time.sleep(0.2)


def summary(stderr: str) -> dict[str, float]:
    """The key=value counts of the final summary line."""
    found = SUMMARY.findall(stderr)
    assert found, f"no summary line on stderr:\n{tail(stderr)}"
    values = dict(re.findall(r"(\w+)=(-?[\d.]+)", found[-1]))
    for key in ("episodes", "steps", "updates", "produced", "trained", "dropped", "lost"):
        assert key in values, f"summary line lacks {key}=: {found[-1]!r}"
    return {k: float(v) for k, v in values.items()}


def assert_accounted(s: dict[str, float], stderr: str = "") -> None:
    """Every transition produced was trained on or dropped, none lost."""
    assert s["lost"] == 0, f"summary reports lost transitions: {s}\n{tail(stderr)}"
    assert s["produced"] == s["trained"] + s["dropped"], f"produced != trained + dropped: {s}"


def result_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return path.read_text().splitlines()


def result_scores(path: Path) -> list[float]:
    return [float(line.split(", ")[1]) for line in result_lines(path)]


def stats_lines(stdout: str) -> list[re.Match]:
    return [m for m in (STATS_LINE.match(line) for line in stdout.splitlines()) if m]


def steps_to_reach(path: Path, window: int, target: float) -> int | None:
    """Agent steps of the finished episodes when the rolling mean over `window` episodes first reached `target`."""
    scores, steps = [], 0
    for line in result_lines(path):
        _, score, length = line.split(", ")
        scores.append(float(score))
        steps += int(length)
        if len(scores) >= window and sum(scores[-window:]) / window >= target:
            return steps
    return None


def rolling_means(scores: list[float], window: int) -> list[float]:
    """Mean of the last `window` scores after each episode, from the window-th episode on."""
    return [sum(scores[i - window:i]) / window for i in range(window, len(scores) + 1)]


def latest_checkpoint(folder: Path) -> dict:
    from ga3c.Checkpoint import find_checkpoint, load_checkpoint

    return load_checkpoint(find_checkpoint(str(folder), "network"))


def kill_tagged(tag: str) -> None:
    """Kills, by pid, the marked processes a test's run left behind."""
    for line in tagged_processes(tag):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture
def tag():
    """A fresh marker for a test's runs; whatever carries it is killed when the test ends."""
    value = new_tag()
    yield value
    kill_tagged(value)


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    """Polls `predicate` until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.time() + timeout
    while True:
        if predicate():
            return True
        if time.time() >= deadline:
            return False
        time.sleep(interval)


def stop_when_learned(proc: subprocess.Popen, results: Path, window: int, target: float, wait: float,
                      what: str, err_path: Path, hang_guard: float = 0) -> bool:
    """Polls the results file every second and sends SIGINT once the rolling mean over `window` episodes reaches
    `target`; then waits up to `wait` s for the run to end (its process group is killed if it does not).
    True when the target was seen while the run was going. With `hang_guard` > 0, a run still going after that
    many seconds fails the test as a hang (a run bounded by MAX_STEPS ends by itself, however loaded the machine)."""
    reached = False
    started = time.time()
    try:
        while proc.poll() is None:
            if hang_guard and time.time() - started > hang_guard:
                pytest.fail(f"the {what} run was still going after {hang_guard:.0f} s: a hang, since its MAX_STEPS "
                            f"should have ended it\n{tail(err_path.read_text())}")
            time.sleep(1.0)
            means = rolling_means(result_scores(results), window)
            if means and max(means) >= target:
                reached = True
                proc.send_signal(signal.SIGINT)
                break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the {what} run did not end\n{tail(err_path.read_text())}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return reached


def stop_bound(agents: int, predictors: int, trainers: int, saves: int = 1) -> float:
    """Worst case, in seconds, from a stop request (a signal, a failed component, a stop condition) to the end of
    the run, from the constants Server uses: the tick that notices it, the dynamic adjustment's join, the agents'
    time to send their last rollouts, one recovery record per agent, each predictor's and trainer's join, the stats
    process's join and kill; plus `saves` checkpoint saves (a periodic one under way, the final one) and the
    interpreter's exit, which no constant bounds (SAVE_ALLOWANCE, EXIT_ALLOWANCE)."""
    from ga3c import Server as s

    return (s.TICK_SECONDS + s.DYNAMIC_JOIN_SECONDS + s.AGENT_STOP_SECONDS + agents * s.RECOVERY_WRITE_SECONDS
            + predictors * s.PREDICTOR_JOIN_SECONDS + trainers * s.TRAINER_JOIN_SECONDS + s.STATS_JOIN_SECONDS
            + s.STATS_KILL_SECONDS + saves * SAVE_ALLOWANCE + EXIT_ALLOWANCE)


class FakeServer:
    """What a ThreadTrainer uses of the server: settings, shared buffers, the network, the experience records."""

    def __init__(self, cfg, shared, network, records):
        self.cfg, self.shared, self.network = cfg, shared, network
        self.device = network.device
        self.counter_lock = threading.Lock()
        self.learning_rate, self.beta = 1e-3, 0.01
        self.records = deque(records)
        self.released = []

    def next_experience(self, wait):
        return self.records.popleft() if self.records else None

    def release_slot(self, slot):
        self.released.append(slot)

    def training_scalars(self, scalars, lag_mean, lag_max):
        self.lag_seen = (lag_mean, lag_max)
