"""scripts/soak.py's verdict on memory and throughput, on samples whose trends are known: a main process whose memory
follows the trainer count without a trend is steady, even when dynamic adjustment keeps more trainers late in the
run, and one that creeps 7% is not; a 10-minute window 12% below the median fails, 8% passes; agents that did not
live through are not judged."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO

spec = importlib.util.spec_from_file_location("soak", REPO / "scripts" / "soak.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

MINUTES = 120
STEP = 10  # seconds between samples, as the soak takes them


def samples(main=lambda t, trainers: 700.0, trainers=lambda t: 4, rate=lambda t: 3000.0,
            agent=lambda t: 72.0) -> list[dict]:
    """A sample every STEP seconds over MINUTES, the steps counter advancing at rate(t); agent "1" lives through,
    agent "2" is killed at minute 60 (its memory doubling on the way must not count)."""
    out, steps = [], 0.0
    for i in range(MINUTES * 60 // STEP + 1):
        t = i * STEP
        nt = trainers(t)
        s = {"t": float(t), "main": main(t, nt), "stats": 30.0, "counts": [nt, 1, 2],
             "agents": {"1": agent(t), "2": 72.0 * (1 + t / 3600) if t < 3600 else None}}
        if i:
            steps += rate(t) * STEP
            s["steps_per_s"] = rate(t)
        s["steps"] = steps
        out.append(s)
    return out


def judge(data: list[dict]) -> bool:
    return soak.steadiness(data, settle=600.0, window=600.0)


def test_flat_run_is_steady():
    assert judge(samples())


def creep(fraction: float):
    """The main process's memory: 600 MiB + 20 per trainer thread, growing by `fraction` from minute 10 to 120."""
    return lambda t, trainers: (600.0 + 20.0 * trainers) * (1 + fraction * max(0.0, t - 600) / 6600)


@pytest.mark.parametrize("trainers", [lambda t: 3 + int(t // STEP) % 3,
                                      lambda t: 3 + int(t // STEP) % 3 + 3 * (t > 3600)],
                         ids=["swinging", "swinging-and-more-later"])
def test_trainer_counts_without_a_trend_are_steady_but_a_creep_is_not(trainers):
    assert judge(samples(main=creep(0.0), trainers=trainers))
    assert judge(samples(main=creep(0.03), trainers=trainers))
    assert not judge(samples(main=creep(0.07), trainers=trainers))


def test_an_agent_that_lived_through_is_judged():
    assert not judge(samples(agent=lambda t: 72.0 * (1 + 0.08 * t / 7200)))


def test_a_slow_window_fails_and_a_slightly_slow_one_passes():
    for drop, steady in ((0.12, False), (0.08, True)):
        # minutes 60-70 (the sixth window from minute 10) run slower by `drop`
        data = samples(rate=lambda t, d=drop: 3000.0 * (1 - d) if 3600 < t <= 4200 else 3000.0)
        assert judge(data) is steady, drop


def test_judge_reads_a_soak_json(tmp_path):
    path = tmp_path / "soak.json"
    path.write_text(json.dumps({"samples": samples(), "kills": []}))
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "soak.py"), "--judge", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "largest growth: +0.0%" in out.stdout
    path.write_text(json.dumps({"samples": samples(rate=lambda t: 2000.0 if t > 6600 else 3000.0), "kills": []}))
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "soak.py"), "--judge", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallinfo2")
def test_heap_counts_follow_what_is_allocated_and_freed():
    """The soak's heap columns: 48 MiB in 64 KiB blocks (below glibc's mmap threshold: from the heap) show as in
    use, and once freed no longer do."""
    base = soak.heap_mb()
    if base is None:
        pytest.skip("no glibc 2.33+ (mallinfo2)")
    blocks = [bytearray(64 << 10) for _ in range(768)]
    used = soak.heap_mb()
    assert used[0] - base[0] == pytest.approx(48, abs=4), (base, used)
    del blocks
    after = soak.heap_mb()
    assert used[0] - after[0] == pytest.approx(48, abs=4), (used, after)


def test_the_counts_held_most_in_each_window_are_printed(capsys):
    """Where dynamic adjustment sat, window by window: 3 trainers for the first hour, 6 after it."""
    assert judge(samples(trainers=lambda t: 3 + 3 * (t > 3600)))
    out = capsys.readouterr().out
    assert "counts held most (trainers/predictors/agents): " + ", ".join(["3/1/2"] * 5 + ["6/1/2"] * 6) in out


def test_cpu_seconds_counts_every_thread_of_a_process():
    """Against Python's own clock for this process; a thread burns CPU beside the main one. Gone: None."""
    def burn():
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass

    worker = threading.Thread(target=burn)
    worker.start()
    burn()
    worker.join()
    ours, python = soak.cpu_seconds(os.getpid()), time.process_time()
    assert python >= 0.3
    assert abs(ours - python) <= 0.05, (ours, python)
    assert soak.cpu_seconds(2**22 + 1) is None  # above the kernel's pid_max limit: no such process


def test_cpu_per_window_tells_a_faster_machine_from_a_busier_one(capsys):
    """Minutes 70-80 run 27% faster: with the same CPU used, that is 27% more agent steps per CPU-second; an agent
    started or killed between two samples (one that had used 1,000 CPU-seconds, none since) leaves that pair's CPU
    out instead of counting a jump of 1,000."""
    data = samples(rate=lambda t: 3000.0 * 1.27 if 4200 <= t < 4800 else 3000.0)
    for i, s in enumerate(data):
        s["cpu"] = {"main": 1.5 * s["t"], "1": 0.2 * s["t"], "idle": 1000.0 if i % 7 else None}
    assert not judge(data)
    out = capsys.readouterr().out
    busy = next(line for line in out.splitlines() if line.startswith("cores busy"))
    per_cpu = next(line for line in out.splitlines() if line.startswith("agent steps per CPU-second"))
    assert busy.split(": ")[1].split(", ") == ["1.70"] * 11
    assert per_cpu.split(": ")[1].split(", ") == ["1765"] * 6 + ["2241"] + ["1765"] * 4  # 3000/1.7, 3810/1.7


def probe_readings(frame_us=lambda t: 80.0) -> list[dict]:
    """The machine probe's lines every 30 s over MINUTES."""
    return [{"t": float(t), "frame_us": frame_us(t)} for t in range(15, MINUTES * 60, 30)]


def test_machine_probe_is_printed_per_window_beside_the_verdict(capsys):
    """Minutes 70-80 run 27% faster while the machine's emulator frames took 1/1.27 of the time: the probe's median
    per window shows the faster machine there; the verdict, on the raw steps/s, is unchanged by it."""
    data = samples(rate=lambda t: 3000.0 * 1.27 if 4200 <= t < 4800 else 3000.0)
    faster = probe_readings(lambda t: 80.0 / 1.27 if 4200 <= t < 4800 else 80.0)
    assert not soak.steadiness(data, 600.0, 600.0, faster)
    frames = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("machine probe"))
    assert frames.split(": ")[1].split(", ") == ["80.0"] * 6 + ["63.0"] + ["80.0"] * 4
    assert soak.steadiness(samples(), 600.0, 600.0, faster)


def test_judge_reads_the_probe_beside_the_soak_json(tmp_path):
    (tmp_path / "soak.json").write_text(json.dumps({"samples": samples(), "kills": []}))
    judge_cmd = [sys.executable, str(REPO / "scripts" / "soak.py"), "--judge", str(tmp_path / "soak.json")]
    out = subprocess.run(judge_cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "machine probe" not in out.stdout, out.stdout + out.stderr  # none: as before
    (tmp_path / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probe_readings()))
    out = subprocess.run(judge_cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "machine probe, CPU us per emulator frame per window (median of its readings): " + ", ".join(
        ["80.0"] * 11) in out.stdout


def test_machine_probe_times_its_own_cpu(tmp_path):
    """Its readings add up to no more CPU than this process used around them (loading the ROM is the rest), and
    to most of it once ale_py is imported: the probe times emulator frames by its own CPU clock, a line each."""
    soak.probe_machine(tmp_path / "warm-up.jsonl", time.time(), every=0.0, count=1)  # ale_py's import, once
    out = tmp_path / "probe.jsonl"
    start = time.time()
    cpu = time.process_time()
    soak.probe_machine(out, start, every=0.0, count=6)
    used = time.process_time() - cpu
    readings = soak.read_probe(out)
    assert len(readings) == 6
    assert all(0 <= r["t"] <= time.time() - start + 0.1 for r in readings)
    total = sum(r["frame_us"] for r in readings) * soak.PROBE_FRAMES / 1e6
    assert 0.4 * used <= total <= used + 0.005, (total, used)


def test_machine_probe_ends_with_the_soak(tmp_path):
    """The probe child of a soak that is SIGKILLed (no clean-up runs) ends by itself within a few seconds, after
    writing its readings."""
    out = tmp_path / "probe.jsonl"
    soak_like = subprocess.Popen([sys.executable, "-c", (
        "import importlib.util, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('soak', {str(REPO / 'scripts' / 'soak.py')!r})\n"
        "soak = importlib.util.module_from_spec(spec); spec.loader.exec_module(soak)\n"
        f"p = soak.start_probe(soak.Path({str(out)!r}), time.time(), 0.2)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    probe_pid = int(soak_like.stdout.readline())
    deadline = time.time() + 60
    while len(soak.read_probe(out)) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert len(soak.read_probe(out)) >= 2
    soak_like.kill()
    soak_like.wait(timeout=10)
    deadline = time.time() + 10
    while time.time() < deadline and soak.rss_mb(probe_pid) is not None:
        time.sleep(0.2)
    assert soak.rss_mb(probe_pid) is None, "the probe outlived its soak"
