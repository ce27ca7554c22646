"""Soak test: a long training run with dynamic adjustment on, an agent killed (SIGKILL) every few minutes, and a
report of memory, throughput and losses at the end.

    .venv/bin/python scripts/soak.py --minutes 30 [--kill-every 180] [--sample-every 10] [--config FILE.toml]
                                     [--dir FOLDER] [--settle 10] [--window 10] [--probe-every 30] [KEY=VALUE ...]
    .venv/bin/python scripts/soak.py --judge FOLDER/soak.json [--settle 10] [--window 10]

The Server runs in this process (as GA3C.py would run it) with `configs/cpu.toml` (Pong) unless --config says
otherwise, DYNAMIC_SETTINGS=True, and the run's outputs (results.txt, checkpoints/) in --dir (a fresh folder). A
monitor thread samples every --sample-every seconds the resident memory of every process of the run, the main
process, the stats process and each agent, as RssAnon + RssFile from /proc/PID/status: the shared-memory arrays
(RssShmem) are left out, as they are counted once for the whole run, not per process; for the main process also
glibc's own count of its heaps, in use and free (free chunks the heaps keep are resident, but no leak). It also
samples the agent steps and trained transitions per second, the trainer/predictor/agent counts, and each process's
user + system CPU seconds (/proc/PID/stat), from which the judgement prints the cores busy and the agent steps per
CPU-second of each window. Beside the run, a machine probe (a child process) times a fixed emulator workload by its
own CPU clock every --probe-every seconds (FOLDER/probe.jsonl): its figure moves with the machine's speed only, so
on a machine whose speed drifts (a VM) the judgement can tell a window that got a faster machine from one that
trained faster. It prints, per window, the probe's CPU microseconds per emulator frame; the verdict stays on the raw
steps/s.

At the end it prints the memory of each process over time, the throughput over time, and the accounting:
    transitions: produced = trained + dropped (too old) + discarded (held by a killed agent) + lost (must be 0)
    episodes: the episode counter vs the lines of results.txt (lost episodes must be 0), and the final checkpoint
    experience slots: every slot free exactly once at the end (none leaked by a killed agent, none given twice)
and, from minute --settle on, the memory growth of every process and the throughput per --window minutes.
Exit status 0 when nothing was lost and the run was steady, 1 otherwise. The samples go to FOLDER/soak.json (every
minute, so a run cut short keeps them); `--judge FOLDER/soak.json` judges them again without running anything (with
FOLDER/probe.jsonl when it is there).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

log = logging.getLogger("ga3c.soak")

MAX_GROWTH = 0.05  # the most a process's memory may grow after the settling time
MAX_SPREAD = 0.10  # the most a window's throughput may differ from the median window
PROBE_FRAMES = 300  # emulator frames per machine-probe reading: about 25 ms of one core


def rss_mb(pid: int) -> float | None:
    """RssAnon + RssFile of a process, in MiB (shared memory left out); None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("RssAnon", "RssFile")))
    except OSError:
        return None
    if not fields:  # a zombie: killed, not yet reaped
        return None
    return sum(int(v.split()[0]) for v in fields.values()) / 1024


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime: fields 14 and 15


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_mb() -> tuple[float, float] | None:
    """(in use, free) MiB of this process's glibc heaps, all arenas (mallinfo2): free chunks that the heaps keep
    count in the RSS but are no leak. None without glibc 2.33+."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    info = fn()
    return round(info.uordblks / 2**20, 1), round(info.fordblks / 2**20, 1)


def probe_machine(out: Path, start: float, every: float, count: int | None = None) -> None:
    """The machine probe: PROBE_FRAMES frames of Pong (ALE, random actions of a fixed seed) timed by this process's
    CPU clock, a JSON line {"t": seconds since `start`, "frame_us": CPU microseconds per frame} every `every`
    seconds, `count` lines or until its parent ends. The workload never changes and its clock counts only its own
    CPU time, so the figure follows the machine's speed, not the run's load or counts; it costs about 0.1% of a
    core at one reading every 30 s."""
    import ale_py
    from ale_py import roms

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.loadROM(roms.get_rom_path("pong"))
    actions = ale.getMinimalActionSet()
    rng = random.Random(0)
    parent, n = os.getppid(), 0
    with open(out, "a") as f:
        while count is None or n < count:
            t0 = time.process_time()
            for _ in range(PROBE_FRAMES):
                ale.act(rng.choice(actions))
                if ale.game_over():
                    ale.reset_game()
            frame_us = (time.process_time() - t0) / PROBE_FRAMES * 1e6
            f.write(json.dumps({"t": round(time.time() - start, 1), "frame_us": round(frame_us, 2)}) + "\n")
            f.flush()
            n += 1
            deadline = time.time() + every
            while (count is None or n < count) and time.time() < deadline:
                if os.getppid() != parent:  # the soak is gone (killed too): no orphan left probing
                    return
                time.sleep(min(1.0, max(0.0, deadline - time.time())))


def start_probe(out: Path, start: float, every: float) -> subprocess.Popen:
    """The machine probe in a child process of its own (an interpreter without torch), writing to `out`."""
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--probe", str(out),
                             "--probe-start", repr(start), "--probe-every", str(every)])


class Monitor(threading.Thread):
    def __init__(self, server, minutes: float, kill_every: float, sample_every: float, seed: int) -> None:
        super().__init__(name="soak-monitor", daemon=True)
        self.server = server
        self.duration = minutes * 60
        self.kill_every = kill_every
        self.sample_every = sample_every
        self.rng = random.Random(seed)
        self.samples: list[dict] = []
        self.kills: list[dict] = []
        self.stop_event = threading.Event()
        self.progress_every = max(1, round(60 / sample_every))  # a progress line and soak.json about every minute
        self.json_path: Path | None = None
        self.probe_path: Path | None = None  # where the machine probe writes; None: no probe
        self.probe_every = 30.0

    def progress(self, s: dict) -> None:
        """One log line, and the samples so far written to soak.json, so that a long run that is cut off keeps them."""
        agents = [v for v in s["agents"].values() if v is not None]
        log.info("soak: t=%.0f s, %s steps/s, main %.1f MiB (heap: %s MiB in use, %s free), stats %.1f MiB, %d agents "
                 "%.1f-%.1f MiB, counts %s", s["t"], s.get("steps_per_s"), s["main"] or 0, s.get("main_heap_used"),
                 s.get("main_heap_free"), s["stats"] or 0, len(agents), min(agents, default=0),
                 max(agents, default=0), s["counts"])
        if self.json_path is not None:
            tmp = self.json_path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"samples": self.samples, "kills": self.kills}))
            os.replace(tmp, self.json_path)

    def sample(self, start: float, last: dict | None) -> dict:
        from ga3c import SharedBuffers as sb

        srv = self.server
        c = srv.shared.counters
        with srv.components_lock:
            agents = {agent_id: proc.pid for agent_id, (proc, _) in srv.agents.items()}
        now = time.time()
        steps, trained = int(srv.shared.agent_steps.sum()), int(c[sb.C_TRAINED])
        heap = heap_mb()
        s = {"t": round(now - start, 1), "main": rss_mb(os.getpid()),
             "main_heap_used": heap and heap[0], "main_heap_free": heap and heap[1],
             "stats": rss_mb(srv.stats.pid) if srv.stats.pid else None,
             "agents": {str(pid): rss_mb(pid) for pid in agents.values()},
             "steps": steps, "trained": trained, "episodes": srv.episodes(),
             "counts": [int(c[sb.C_NT]), int(c[sb.C_NP]), int(c[sb.C_NA])],
             "cpu": {str(pid): cpu_seconds(pid) for pid in (os.getpid(), srv.stats.pid, *agents.values()) if pid}}
        if last is not None:
            dt = max(now - start - last["t"], 1e-9)
            s["steps_per_s"] = round((steps - last["steps"]) / dt, 1)
            s["trained_per_s"] = round((trained - last["trained"]) / dt, 1)
        return s

    def kill_one(self, start: float) -> None:
        srv = self.server
        with srv.components_lock:
            choices = sorted((agent_id, proc.pid) for agent_id, (proc, _) in srv.agents.items())
        if not choices:
            return
        agent_id, pid = self.rng.choice(choices)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.kills.append({"t": round(time.time() - start, 1), "agent": agent_id, "pid": pid})
        log.warning("soak: killed agent %d (pid %d)", agent_id, pid)

    def run(self) -> None:
        start = self.server.start_time
        probe = start_probe(self.probe_path, start, self.probe_every) if self.probe_path else None
        try:
            self.watch(start)
        finally:
            if probe is not None:
                probe.terminate()
                probe.wait(timeout=10)

    def watch(self, start: float) -> None:
        """Samples, kills and the stop at the end of the soak's time, until the run ends."""
        next_sample = time.time()
        next_kill = start + self.kill_every
        last = None
        try:
            end = start + self.duration
            while not self.stop_event.wait(max(0.0, min(next_sample, next_kill, end) - time.time())):
                now = time.time()
                if now >= next_sample:
                    last = self.sample(start, last)
                    self.samples.append(last)
                    next_sample += self.sample_every
                    if len(self.samples) % self.progress_every == 0:
                        self.progress(last)
                if now - start >= self.duration:
                    self.samples.append(self.sample(start, last))
                    self.server.request_stop(f"soak of {self.duration / 60:g} minutes over")
                    return
                if now >= next_kill:
                    self.kill_one(start)
                    next_kill += self.kill_every
                if self.server.stop_reason is not None:
                    return
        except BaseException as exc:  # noqa: BLE001 - the run must end anyway
            log.exception("soak monitor failed: %s", exc)
            self.server.request_stop("soak monitor failed")


def watch_free_slots(server) -> list[int]:
    """Reads the free experience slots out of the free pipe just before the server closes it."""
    free: list[int] = []
    close = server.close

    def close_after_reading() -> None:
        fd = server.free_reader.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        try:
            while data := os.read(fd, 4096):
                free.extend(int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4))
        except BlockingIOError:
            pass
        close()

    server.close = close_after_reading
    return free


def by_window(later: list[dict], settle: float, window: float):
    """(window index, previous sample, sample) for each pair of consecutive samples, by the later one's time; the
    closing sample, which repeats the last time, is skipped."""
    for prev, s in zip(later, later[1:], strict=False):
        if s["t"] > prev["t"]:
            yield int((s["t"] - settle) // window), prev, s


def steadiness(samples: list[dict], settle: float, window: float, probe: list[dict] | None = None) -> bool:
    """From `settle` seconds on: the memory growth of every process alive at both ends (the main process, the stats
    process and each agent that lived through; dynamic adjustment changes the number of agents, so their sum says
    nothing), and the throughput averaged over each `window` seconds against the median window. True when every
    growth is at most MAX_GROWTH and every window is within MAX_SPREAD of the median. The machine probe's readings,
    when given, are printed beside the throughput; they do not change the verdict."""
    later = [s for s in samples if s["t"] >= settle]
    print(f"\n=== from minute {settle / 60:g} on ===")
    if len(later) < 2:
        print("the run was too short to judge")
        return False
    # The main process's memory follows the number of trainer and predictor threads that dynamic adjustment keeps
    # at the moment (each holds its own buffers), so its ends are compared at the same counts: a least-squares fit
    # main = a + b*trainers + c*predictors + d*t gives the growth d*(duration) net of the counts. The other processes
    # run no threads that come and go: the medians of the first and the last window are compared.
    head = [s for s in later if s["t"] < settle + window]
    tail = [s for s in later if s["t"] >= later[-1]["t"] - window]

    def median(values: list[float]) -> float:
        values = sorted(values)
        return values[len(values) // 2] if values else 0.0

    def series(get) -> tuple[float, float, float, float]:
        a = [v for v in map(get, head) if v is not None]
        b = [v for v in map(get, tail) if v is not None]
        return a[0] if a else 0.0, b[-1] if b else 0.0, median(a), median(b)

    def agent_median(s: dict) -> float | None:
        alive = [v for v in s["agents"].values() if v is not None]
        return median(alive) if alive else None

    growths = {"main process": series(lambda s: s["main"]), "stats process": series(lambda s: s["stats"]),
               "median agent": series(agent_median)}
    for pid, v in later[0]["agents"].items():
        if v is not None and later[-1]["agents"].get(pid) is not None:
            growths[f"agent pid {pid}"] = series(lambda s, pid=pid: s["agents"].get(pid))
    print(f"memory (MiB): first and last sample; medians of the first and the last {window / 60:g} minutes")
    judged = {}
    for name, (a, b, ma, mb) in growths.items():
        judged[name] = (mb - ma) / ma if ma else float("inf")
        print(f"{name:<18} {a:7.1f} -> {b:7.1f} ({100 * (b - a) / a if a else 0:+5.1f}%); medians {ma:7.1f} -> "
              f"{mb:7.1f}: growth {100 * judged[name]:+.1f}%")
    fit = [s for s in later if s["main"] is not None]
    span = fit[-1]["t"] - fit[0]["t"]
    x = np.array([[1.0, s["counts"][0], s["counts"][1], (s["t"] - settle) / span] for s in fit])
    (a, per_trainer, per_predictor, trend), *_ = np.linalg.lstsq(x, np.array([s["main"] for s in fit]), rcond=None)
    judged["main process"] = trend / growths["main process"][2]
    print(f"main process at equal counts: {per_trainer:+.1f} MiB per trainer thread, {per_predictor:+.1f} MiB per "
          f"predictor thread, {trend:+.1f} MiB over {span / 60:.0f} minutes: growth "
          f"{100 * judged['main process']:+.1f}%")
    worst = max(judged.values())
    print(f"largest growth: {100 * worst:+.1f}% (limit {100 * MAX_GROWTH:g}%)")
    windows: dict[int, list[float]] = {}
    held: dict[int, Counter] = {}
    for k, _prev, s in by_window(later, settle, window):
        if "steps_per_s" in s:
            windows.setdefault(k, []).append(s["steps_per_s"])
            held.setdefault(k, Counter())["/".join(str(n) for n in s.get("counts") or ())] += 1
    full = {k: v for k, v in windows.items() if len(v) * 2 >= max(len(x) for x in windows.values())}  # no stub
    rates = [sum(v) / len(v) for _, v in sorted(full.items())]
    if not rates:
        return False
    mid = median(rates)
    spread = max(abs(r - mid) for r in rates) / mid if mid else float("inf")
    print(f"steps/s per {window / 60:g} minutes: " + ", ".join(f"{r:.0f}" for r in rates))
    # the counts sampled most often in each window: where dynamic adjustment sat (trials of other counts included)
    print("counts held most (trainers/predictors/agents): "
          + ", ".join(held[k].most_common(1)[0][0] for k in sorted(full)))
    print(f"median {mid:.0f}: largest deviation {100 * spread:.1f}% (limit {100 * MAX_SPREAD:g}%)")
    cpu_per_window(later, settle, window, sorted(full))
    if probe:
        probe_per_window(probe, settle, window, sorted(full))
    return worst <= MAX_GROWTH and spread <= MAX_SPREAD


def cpu_per_window(later: list[dict], settle: float, window: float, keys: list[int]) -> None:
    """Prints, per window, the CPU the run's processes used (cores busy) and the agent steps per CPU-second: on a
    shared machine whose speed drifts, a window that is fast at the same cores busy and the same counts got faster
    CPU, not a different trainer. Processes that started or ended between two samples are left out of that pair."""
    steps: Counter = Counter()
    cpu: Counter = Counter()
    span: Counter = Counter()
    for k, prev, s in by_window(later, settle, window):
        if "cpu" not in s or "cpu" not in prev:
            continue
        both = [pid for pid, v in s["cpu"].items() if v is not None and prev["cpu"].get(pid) is not None]
        cpu[k] += sum(s["cpu"][pid] - prev["cpu"][pid] for pid in both)
        steps[k] += s["steps"] - prev["steps"]
        span[k] += s["t"] - prev["t"]
    if not any(cpu[k] for k in keys):
        return
    print("cores busy per window: " + ", ".join(f"{cpu[k] / span[k]:.2f}" if span[k] else "-" for k in keys))
    print("agent steps per CPU-second per window: "
          + ", ".join(f"{steps[k] / cpu[k]:.0f}" if cpu[k] else "-" for k in keys))


def probe_per_window(probe: list[dict], settle: float, window: float, keys: list[int]) -> None:
    """Prints, per window, the machine probe's median CPU microseconds per emulator frame: a window whose steps/s
    moved with it got a faster or slower machine. Not scaled into the steps/s: the emulator is only part of a
    step's cost, and a 2-hour soak on a VM (docs/results/soak-cpu.md section 10) showed proportional scaling
    overcorrecting."""
    per: dict[int, list[float]] = {}
    for r in probe:
        if r["t"] >= settle:
            per.setdefault(int((r["t"] - settle) // window), []).append(r["frame_us"])
    if not any(per.get(k) for k in keys):
        return
    print("machine probe, CPU us per emulator frame per window (median of its readings): "
          + ", ".join(f"{sorted(per[k])[len(per[k]) // 2]:.1f}" if per.get(k) else "-" for k in keys))


def read_probe(path: Path) -> list[dict]:
    """The machine probe's readings; none when the file is absent (runs from before the probe)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(mon: Monitor, server, free: list[int], results: Path, seconds: float, settle: float,
           window: float) -> bool:
    from ga3c import SharedBuffers as sb
    from ga3c.Checkpoint import find_checkpoint, load_checkpoint

    samples = mon.samples
    print("\n=== memory (MiB, RssAnon + RssFile; shared memory excluded) ===")
    print(f"{'t (s)':>8} {'main':>8} {'heap use':>8} {'free':>8} {'stats':>8} {'agents':>6} {'agent min':>10} "
          f"{'agent max':>10} {'agent sum':>10}")
    for s in samples:
        a = [v for v in s["agents"].values() if v is not None]
        print(f"{s['t']:8.0f} {s['main'] or 0:8.1f} {s.get('main_heap_used') or 0:8.1f} "
              f"{s.get('main_heap_free') or 0:8.1f} {s['stats'] or 0:8.1f} {len(a):6d} {min(a, default=0):10.1f} "
              f"{max(a, default=0):10.1f} {sum(a):10.1f}")
    per_pid: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        for pid, v in s["agents"].items():
            if v is not None:
                per_pid.setdefault(pid, []).append((s["t"], v))
    print("each agent process (pid: first -> last MiB over its life):")
    for pid, series in per_pid.items():
        print(f"  {pid}: {series[0][1]:.1f} -> {series[-1][1]:.1f} MiB ({series[0][0]:.0f}-{series[-1][0]:.0f} s, "
              f"max {max(v for _, v in series):.1f})")
    if samples:
        first, last = samples[0], samples[-1]
        print(f"main: {first['main']:.1f} -> {last['main']:.1f} MiB; stats: {first['stats'] or 0:.1f} -> "
              f"{last['stats'] or 0:.1f} MiB")

    print("\n=== throughput ===")
    print(f"{'t (s)':>8} {'steps/s':>9} {'trained/s':>10} {'episodes':>9} {'NT NP NA':>10}")
    for s in samples[1:]:
        nt, np_, na = s["counts"]
        print(f"{s['t']:8.0f} {s.get('steps_per_s', 0):9.0f} {s.get('trained_per_s', 0):10.0f} {s['episodes']:9d} "
              f"{nt:3d}{np_:3d}{na:4d}")

    steady = steadiness(samples, settle, window, read_probe(mon.probe_path) if mon.probe_path else None)

    c = server.shared.counters
    produced = int(server.shared.agent_steps.sum())
    trained, dropped, discarded = int(c[sb.C_TRAINED]), int(c[sb.C_DROPPED]), int(c[sb.C_DISCARDED])
    lost = produced - trained - dropped - discarded
    lines = results.read_text().splitlines() if results.exists() else []
    episodes = server.episodes()
    ckpt_episodes = None
    if server.cfg.SAVE_MODELS:
        ckpt = load_checkpoint(find_checkpoint(server.cfg.CHECKPOINT_DIR, server.cfg.NETWORK_NAME))
        ckpt_episodes = int(ckpt["counters"]["episodes"])
    slots_ok = sorted(free) == list(range(server.shared.layout.slots))
    print("\n=== accounting ===")
    print(f"duration {seconds / 60:.1f} min, {len(mon.kills)} agents killed by the soak, {server.deaths} agent deaths "
          f"seen by the server, {int(c[sb.C_RECOVERED])} experience slots given back")
    print(f"transitions: produced={produced} trained={trained} dropped={dropped} discarded={discarded} (held by "
          f"killed agents) lost={lost}")
    print(f"episodes: counted={episodes} results lines={len(lines)} lost={episodes - len(lines)} final checkpoint="
          f"{ckpt_episodes}")
    print(f"experience slots free at the end: {len(free)} of {server.shared.layout.slots}, each once: {slots_ok}")
    ok = lost == 0 and episodes == len(lines) and slots_ok and ckpt_episodes in (None, episodes)
    ok = ok and server.deaths == len(mon.kills)
    print("RESULT:", "nothing lost" if ok else "LOSSES OR ERRORS (see above)")
    print("STEADY:", "yes" if steady else "NO (see above)")
    return ok and steady


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill-every", type=float, default=180.0, help="seconds between agent kills")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--config", default=str(REPO / "configs" / "cpu.toml"))
    parser.add_argument("--dir", default=None, help="output folder (default: a new temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=10.0, help="minutes before memory and throughput are judged")
    parser.add_argument("--window", type=float, default=10.0, help="minutes per throughput window")
    parser.add_argument("--judge", metavar="SOAK_JSON", help="only judge the samples of an earlier run's soak.json")
    parser.add_argument("--probe-every", type=float, default=30.0,
                        help="seconds between machine-probe readings (0: no probe)")
    parser.add_argument("--probe", metavar="PROBE_JSONL", help=argparse.SUPPRESS)  # run as the probe child
    parser.add_argument("--probe-start", type=float, help=argparse.SUPPRESS)
    parser.add_argument("settings", nargs="*", help="KEY=VALUE overrides")
    args = parser.parse_args(argv)
    if args.probe:
        probe_machine(Path(args.probe), args.probe_start, args.probe_every)
        return 0
    if args.judge:
        samples = json.loads(Path(args.judge).read_text())["samples"]
        probe = read_probe(Path(args.judge).with_name("probe.jsonl"))
        return 0 if steadiness(samples, args.settle * 60, args.window * 60, probe) else 1
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")

    from ga3c.errors import ConfigError
    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ga3c-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    config = str(Path(args.config).resolve())
    os.chdir(folder)
    try:
        cfg = parse_settings(["--config", config, "DYNAMIC_SETTINGS=True", "EPISODES=100000000",
                              "PRINT_STATS_FREQUENCY=50", *args.settings])
        server = Server(cfg)
    except ConfigError as exc:
        print(f"ga3c: error: {exc}", file=sys.stderr)
        return 2
    log.info("soak: %g minutes in %s, an agent killed every %g s", args.minutes, folder, args.kill_every)
    free = watch_free_slots(server)
    mon = Monitor(server, args.minutes, args.kill_every, args.sample_every, args.seed)
    mon.json_path = folder / "soak.json"
    if args.probe_every > 0:
        mon.probe_path, mon.probe_every = folder / "probe.jsonl", args.probe_every
    mon.start()
    status = server.main()
    mon.stop_event.set()
    mon.join(timeout=10)
    seconds = time.time() - server.start_time
    (folder / "soak.json").write_text(json.dumps({"samples": mon.samples, "kills": mon.kills}, indent=1))
    ok = report(mon, server, free, folder / cfg.RESULTS_FILENAME, seconds, args.settle * 60, args.window * 60)
    print(f"outputs in {folder}")
    return 0 if ok and status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
