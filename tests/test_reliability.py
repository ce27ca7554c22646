"""Faults a long run must survive, with real processes on the CPU: agents that die (SIGKILL while filling an
experience slot or at the very read that takes one, an environment that raises), a predictor or trainer that
raises, SIGINT/SIGTERM at awkward moments (start-up, a checkpoint save, a dynamic adjustment), SIGKILL of the main
process mid-run or during a save followed by a resume, a checkpoint folder or results file that stops being
writable mid-run, and a full disk (a small tmpfs) under CHECKPOINT_DIR, LOG_DIR or the results file.

Each run carries a marker in its environment (see conftest); no process carrying it may remain afterwards, and
no entry it created may remain in /dev/shm.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import multiprocessing.resource_tracker
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path

import pytest
from conftest import (
    CARTPOLE,
    ORIGINAL,
    RESULT_LINE,
    TAG_KEY,
    latest_checkpoint,
    leftover_processes,
    result_lines,
    start_ga3c,
    stop_bound,
    summary,
    tagged_env,
    tagged_processes,
    tail,
    wait_until,
)

PONG = ["ATARI_GAME=PongDeterministic-v4", "DEVICE=cpu", "DYNAMIC_SETTINGS=False"]
# a CartPole network large enough that a checkpoint save takes a while (~9 MB with the optimizer state)
BIG_CARTPOLE = [*CARTPOLE, "MLP_HIDDEN_SIZE=1024", "AGENTS=2", "SAVE_FREQUENCY=1", "EPISODES=1000000"]
# the longest a stop may take in each test, from the server's constants (Config's PREDICTORS=2 and TRAINERS=2
# where a test does not set them); two saves where a periodic one may be under way when the stop comes
ORPHANS_GONE_SECONDS = 10  # a killed main process: its agents and stats process exit by themselves within this
PONG_STOP = stop_bound(agents=3, predictors=2, trainers=2)
CARTPOLE_STOP = stop_bound(agents=2, predictors=2, trainers=2, saves=1)
BIG_CARTPOLE_STOP = stop_bound(agents=2, predictors=2, trainers=2, saves=2)


# ----------------------------------------------------------------------------------------------- helpers
def assert_no_leftovers(tag: str, grace: float = 10.0) -> None:
    left = leftover_processes(tag, grace)
    assert not left, "processes left behind:\n" + "\n".join(left)


def shm_in_use() -> set[str]:
    """Names in /dev/shm that a live process has mapped or open (its creator, or a user of it, is alive)."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                used.update(m.group(1) for m in re.finditer(r"/dev/shm/(\S+)", f.read()))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    used.add(target[len("/dev/shm/"):].split(" ")[0])
        except OSError:
            continue
    return used


def shm_leaks(before: set[str]) -> list[str]:
    """Entries of /dev/shm created since `before` whose users are all gone: left behind (other engineers' live
    processes on this machine may create entries meanwhile; those are in use and not counted)."""
    new = set(os.listdir("/dev/shm")) - before
    return sorted(new - shm_in_use()) if new else []


def assert_results_complete(path: Path) -> list[str]:
    text = path.read_text() if path.exists() else ""
    lines = text.splitlines()
    assert not lines or text.endswith("\n"), f"torn last line in {path}: {lines[-1]!r}"
    bad = [line for line in lines if not RESULT_LINE.match(line)]
    assert not bad, f"malformed results lines: {bad[:3]}"
    return lines


def assert_all_accounted(s: dict, stderr: str = "") -> None:
    """Every transition produced was trained on, dropped as too old, or died with a killed agent."""
    assert s["lost"] == 0, f"lost transitions: {s}\n{tail(stderr)}"
    assert s["produced"] == s["trained"] + s["dropped"] + s["discarded"], s


def checkpoint_files(folder: Path) -> list[str]:
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def temporaries(folder: Path) -> list[str]:
    return [f for f in checkpoint_files(folder) if f.endswith(".tmp")]


def wait_exit(proc: subprocess.Popen, err_path: Path, what: str, timeout: float) -> float:
    """Seconds the process took to exit (fails the test past `timeout`: give a bound checked afterwards room)."""
    sent = time.time()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no exit {timeout} s after {what}\n{tail(err_path.read_text())}")
    return time.time() - sent


def kill_session(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def in_process_server(args: list[str], tmp_path: Path, monkeypatch, tag: str):
    """A Server built in this process (the tests reach into it), its processes carrying the marker; the free
    experience slots are read out of the free pipe just before the server closes it."""
    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    # the resource tracker outlives the run (it serves this pytest process): start it before the marker is set
    multiprocessing.resource_tracker.ensure_running()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(TAG_KEY, tag)
    server = Server(parse_settings(args))
    free: list[int] = []
    close = server.close

    def close_after_reading_free_slots() -> None:
        fd = server.free_reader.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        try:
            while data := os.read(fd, 4096):
                free.extend(int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4))
        except BlockingIOError:
            pass
        close()

    monkeypatch.setattr(server, "close", close_after_reading_free_slots)
    return server, free


def run_with_driver(server, drive) -> tuple[int, list[str]]:
    """Runs server.main() here (signals need the main thread) while `drive(server)` runs in a thread."""
    errors: list[str] = []

    def body() -> None:
        try:
            drive(server)
        except BaseException:  # noqa: BLE001 - reported by the test
            errors.append(traceback.format_exc())
            server.request_stop("test driver failed")

    driver = threading.Thread(target=body, daemon=True)
    driver.start()
    rc = server.main()
    driver.join(timeout=60)
    return rc, errors


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "tT"
    except OSError:
        return True


FAULTY_ENV = '''
import os
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
import gymnasium

TRIGGER = os.environ.get("GA3C_TEST_FAULT_FILE", "")


class FaultyCartPole(CartPoleEnv):
    """CartPole whose step raises once, in the one process that claims the trigger file."""

    def step(self, action):
        if TRIGGER and os.path.exists(TRIGGER):
            try:
                os.rename(TRIGGER, TRIGGER + ".taken")
            except OSError:
                pass
            else:
                raise RuntimeError("injected environment fault")
        return super().step(action)


if "FaultyCartPole-v1" not in gymnasium.envs.registry:
    gymnasium.register(id="FaultyCartPole-v1", entry_point="ga3c_test_faulty:FaultyCartPole", max_episode_steps=500)
'''


# ----------------------------------------------------------------------------------------------- agents die
def test_dead_agents_are_replaced_and_their_slots_recovered(tmp_path, monkeypatch, tag, caplog):
    """SIGKILL an agent while it fills the only experience slot, then make another's environment raise: each
    death is logged in one line and replaced, the slot comes back (with one slot, a leak stops all training),
    every transition is accounted for, and at the end every slot is free exactly once."""
    from ga3c import SharedBuffers as sb

    faulty = tmp_path / "faulty"
    faulty.mkdir()
    (faulty / "ga3c_test_faulty.py").write_text(FAULTY_ENV)
    (faulty / "sitecustomize.py").write_text("import ga3c_test_faulty  # noqa: F401\n")
    trigger = tmp_path / "fault-now"
    monkeypatch.setenv("GA3C_TEST_FAULT_FILE", str(trigger))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(faulty), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(faulty))
    monkeypatch.delitem(__import__("sys").modules, "ga3c_test_faulty", raising=False)
    import ga3c_test_faulty  # noqa: F401 - registers FaultyCartPole-v1 in this process too

    caplog.set_level(logging.INFO, logger="ga3c")
    server, free = in_process_server(
        ["ATARI_GAME=FaultyCartPole-v1", "DEVICE=cpu", "DYNAMIC_SETTINGS=False", "AGENTS=3", "PREDICTORS=1",
         "TRAINERS=1", "MAX_QUEUE_SIZE=1", "TIME_MAX=20", "MAX_SECONDS=200", "EPISODES=1000000",
         "SAVE_MODELS=False", "PRINT_STATS_FREQUENCY=100000"], tmp_path, monkeypatch, tag)
    c = server.shared.counters
    seen: dict[str, object] = {}

    def trained() -> int:
        return int(c[sb.C_TRAINED])

    def grows(amount: int = 2000, timeout: float = 40) -> bool:
        before = trained()
        return wait_until(lambda: trained() > before + amount, timeout)

    def replaced(dead: int, count: int) -> bool:
        return server.deaths >= count and len(server.agents) == 3 and dead not in server.agents

    def drive(srv) -> None:
        try:
            assert wait_until(lambda: trained() > 0, 90), "training never started"
            rng = random.Random(0)
            kills = probes = unread = 0
            deadline = time.time() + 60
            # kill agents caught filling the slot (the rollout not yet announced), and at most one caught between
            # announcing it and clearing its note (the slot must then not be given back twice)
            while (c[sb.C_RECOVERED] < 1 or not unread) and kills < 8 and time.time() < deadline:
                with srv.components_lock:
                    agent_id, (proc, _) = rng.choice(sorted(srv.agents.items()))
                pid = proc.pid
                os.kill(pid, signal.SIGSTOP)
                probes += 1
                wait_until(lambda pid=pid: stopped(pid), 2, interval=0.001)
                holding = srv.shared.agent_slot[agent_id] >= 0
                if holding:
                    time.sleep(0.05)  # a rollout it announced is read by the waiting trainer meanwhile
                    announced = srv.announced[agent_id] >= srv.shared.agent_taken[agent_id]
                if holding and (not announced or not unread):
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
                    unread += announced
                    assert wait_until(lambda a=agent_id, k=kills: replaced(a, k), 30), "the dead agent was not replaced"
                    assert wait_until(lambda: not srv.recoveries, 10), "the dead agent's record was not read"
                else:
                    os.kill(pid, signal.SIGCONT)
                    time.sleep(rng.random() * 0.003)
            seen["kills"], seen["probes"], seen["announced_kills"] = kills, probes, unread
            assert c[sb.C_RECOVERED] >= 1, f"no agent was caught holding a slot ({kills} kills, {probes} probes)"
            assert grows(), "training did not go on after the kill (the only experience slot leaked?)"

            trigger.write_text("raise")
            assert wait_until(lambda: server.deaths > kills and len(server.agents) == 3, 30), \
                "the agent whose environment raised was not replaced"
            assert (tmp_path / "fault-now.taken").exists()
            assert grows(), "training did not go on after the environment raised"
            seen["deaths"] = server.deaths
        finally:
            srv.request_stop("test")

    rc, errors = run_with_driver(server, drive)
    assert not errors, errors[0]
    assert rc == 0
    deaths = [r.getMessage() for r in caplog.records if "starting a replacement" in r.getMessage()]
    assert len(deaths) == seen["deaths"] == seen["kills"] + 1, (deaths, seen)
    assert sum("exited with code -9" in d for d in deaths) == seen["kills"], deaths
    assert sum("exited with code 1" in d for d in deaths) == 1, deaths
    produced = int(server.shared.agent_steps.sum())
    trained_n, dropped, discarded = int(c[sb.C_TRAINED]), int(c[sb.C_DROPPED]), int(c[sb.C_DISCARDED])
    assert produced == trained_n + dropped + discarded, (produced, trained_n, dropped, discarded)
    assert discarded > 0  # the killed agent's unsent steps, at least
    assert free == list(range(server.shared.layout.slots)), f"free slots at the end: {free}"
    assert_no_leftovers(tag)


SLOT_FAULT = """
import os
import signal

TRIGGER = os.environ.get("GA3C_TEST_SLOT_FAULT_FILE", "")
_readv = os.readv


def _claim() -> bool:
    try:
        os.rename(TRIGGER, TRIGGER + ".taken")
    except OSError:
        return False
    return True


def readv(fd, buffers):
    \"\"\"os.readv, which only an agent taking an experience slot calls: once, in the one agent that claims the
    trigger file, SIGKILL right before the read ('before') or right after it returns ('after').\"\"\"
    if TRIGGER and os.path.exists(TRIGGER) and open(TRIGGER).read() == "before" and _claim():
        os.kill(os.getpid(), signal.SIGKILL)
    got = _readv(fd, buffers)
    if got and TRIGGER and os.path.exists(TRIGGER) and open(TRIGGER).read() == "after" and _claim():
        os.kill(os.getpid(), signal.SIGKILL)
    return got


if TRIGGER:
    os.readv = readv
"""


@pytest.mark.parametrize("moment", ["after", "before"])
def test_agent_killed_at_the_read_that_takes_a_slot(tmp_path, monkeypatch, tag, caplog, moment):
    """The slot-leak window: an agent SIGKILLed by a fault injected in its own process right after the system
    call that takes the only experience slot returns (before any line of the agent runs), or right before it: the
    slot comes back exactly when it was taken (training goes on: with one slot, a leak stops it), never twice
    (the free pipe holds it once at the end), and the summary counts it in slots_recovered."""
    from ga3c import SharedBuffers as sb

    faulty = tmp_path / "faulty"
    faulty.mkdir()
    (faulty / "sitecustomize.py").write_text(SLOT_FAULT)
    trigger = tmp_path / "slot-fault"
    monkeypatch.setenv("GA3C_TEST_SLOT_FAULT_FILE", str(trigger))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(faulty), os.environ.get("PYTHONPATH", "")]))
    caplog.set_level(logging.INFO, logger="ga3c")
    server, free = in_process_server(
        [*CARTPOLE, "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "MAX_QUEUE_SIZE=1", "TIME_MAX=20",
         "MAX_SECONDS=200", "EPISODES=1000000", "SAVE_MODELS=False", "PRINT_STATS_FREQUENCY=100000"],
        tmp_path, monkeypatch, tag)
    c = server.shared.counters
    seen: dict[str, object] = {}

    def drive(srv) -> None:
        try:
            assert wait_until(lambda: c[sb.C_TRAINED] > 0, 90), "training never started"
            trigger.write_text(moment)
            assert wait_until(lambda: srv.deaths == 1 and len(srv.agents) == 2, 60), "no agent died of the fault"
            assert (tmp_path / "slot-fault.taken").exists()
            assert wait_until(lambda: not srv.recoveries, 10), "the dead agent's record was not read"
            seen["recovered"] = int(c[sb.C_RECOVERED])
            before = int(c[sb.C_TRAINED])
            assert wait_until(lambda: c[sb.C_TRAINED] > before + 2000, 60), \
                "training did not go on after the kill (the only experience slot leaked)"
        finally:
            srv.request_stop("test")

    rc, errors = run_with_driver(server, drive)
    assert not errors, errors[0]
    assert rc == 0
    assert seen["recovered"] == (1 if moment == "after" else 0), seen
    deaths = [r.getMessage() for r in caplog.records if "starting a replacement" in r.getMessage()]
    assert len(deaths) == 1 and "exited with code -9" in deaths[0], deaths
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("summary:")]
    assert len(lines) == 1, lines
    assert f"slots_recovered={seen['recovered']} " in lines[0], lines[0]
    produced = int(server.shared.agent_steps.sum())
    assert produced == int(c[sb.C_TRAINED] + c[sb.C_DROPPED] + c[sb.C_DISCARDED]), lines[0]
    assert free == [0], f"free slots at the end: {free}"
    assert_no_leftovers(tag)


# ----------------------------------------------------------------------------------------------- threads fail
@pytest.mark.parametrize("component", ["trainer", "predictor"])
def test_failing_thread_stops_the_run_with_a_final_checkpoint(tmp_path, monkeypatch, tag, caplog, component):
    from ga3c import SharedBuffers as sb

    caplog.set_level(logging.INFO, logger="ga3c")
    bound = stop_bound(agents=2, predictors=1, trainers=1)
    server, free = in_process_server(
        [*CARTPOLE, "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "MAX_SECONDS=120", "EPISODES=1000000",
         "SAVE_MODELS=True", "SAVE_FREQUENCY=1000000", "PRINT_STATS_FREQUENCY=100000"], tmp_path, monkeypatch, tag)
    c = server.shared.counters
    times: dict[str, float] = {}

    def boom(*_args, **_kwargs):
        raise RuntimeError(f"injected {component} failure")

    def drive(srv) -> None:
        assert wait_until(lambda: c[sb.C_TRAINED] > 500 and srv.episodes() > 5, 90), "training never started"
        times["injected"] = time.time()
        monkeypatch.setattr(srv.network, "train" if component == "trainer" else "predict", boom)

    rc, errors = run_with_driver(server, drive)
    took = time.time() - times.get("injected", time.time())
    assert not errors, errors[0]
    assert rc == 1
    assert took <= bound, f"the run took {took:.1f} s to stop after the failure (bound {bound:.1f} s)"
    text = caplog.text
    assert re.search(rf"{component}-0 failed, stopping the run:\nTraceback \(most recent call last\)", text), text
    assert f"RuntimeError: injected {component} failure" in text
    assert f"stopping: {component}-0 failed" in text
    ckpt = latest_checkpoint(tmp_path / "checkpoints")
    assert ckpt["counters"]["updates"] == server.network.version + server.updates_base > 0
    assert ckpt["counters"]["episodes"] == len(assert_results_complete(tmp_path / "results.txt")) > 5
    assert not temporaries(tmp_path / "checkpoints")
    produced = int(server.shared.agent_steps.sum())
    assert produced >= int(c[sb.C_TRAINED] + c[sb.C_DROPPED] + c[sb.C_DISCARDED])
    assert sorted(free) == list(range(server.shared.layout.slots))
    assert_no_leftovers(tag)


# ----------------------------------------------------------------------------------------------- signals
def check_clean_stop(proc, out_path: Path, err_path: Path, tmp_path: Path, signame: str, took: float,
                     bound: float) -> str:
    out, err = out_path.read_text(), err_path.read_text()
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{tail(out)}\n{tail(err)}"
    assert took <= bound, f"took {took:.1f} s to stop after {signame} (bound {bound:.1f} s)\n{tail(err)}"
    assert "Traceback" not in err, tail(err)
    assert f"stopping: {signame}" in err, tail(err)
    lines = assert_results_complete(tmp_path / "results.txt")
    if checkpoint_files(tmp_path / "checkpoints"):
        ckpt = latest_checkpoint(tmp_path / "checkpoints")
        assert ckpt["counters"]["episodes"] == len(lines), (ckpt["counters"], len(lines))
    assert not temporaries(tmp_path / "checkpoints")
    return err


@pytest.mark.parametrize("moment", ["building", "spawning", "agents-starting"])
def test_signal_during_start_up(tmp_path, tag, moment):
    """SIGINT while the server is being built (before any process exists), just after, and SIGTERM while the
    agents are starting: a clean stop (status 0, no traceback) within the stop bound, nothing left behind."""
    shm_before = set(os.listdir("/dev/shm"))
    proc, out_path, err_path = start_ga3c([*PONG, "AGENTS=3", "EPISODES=1000"], tmp_path, tagged_env(tag))
    signum = signal.SIGTERM if moment == "agents-starting" else signal.SIGINT
    try:
        if moment == "building":  # the game id's note comes from the constructor, before the environment probe
            assert wait_until(lambda: " is ALE/Pong-v5" in err_path.read_text() or proc.poll() is not None, 90)
        elif moment == "spawning":
            assert wait_until(lambda: "model:" in err_path.read_text() or proc.poll() is not None, 90)
        else:
            assert wait_until(lambda: len(tagged_processes(tag)) >= 4 or proc.poll() is not None, 90)
        assert proc.poll() is None, tail(err_path.read_text())
        os.kill(proc.pid, signum)
        took = wait_exit(proc, err_path, signum.name, PONG_STOP + 30)
    finally:
        kill_session(proc)
    check_clean_stop(proc, out_path, err_path, tmp_path, signum.name, took, PONG_STOP)
    assert_no_leftovers(tag)
    assert not shm_leaks(shm_before), shm_leaks(shm_before)


def test_sigterm_during_a_checkpoint_save(tmp_path, tag):
    proc, out_path, err_path = start_ga3c(BIG_CARTPOLE, tmp_path, tagged_env(tag))
    folder = tmp_path / "checkpoints"
    try:
        assert wait_until(lambda: len(checkpoint_files(folder)) >= 2 or proc.poll() is not None, 120), \
            tail(err_path.read_text())
        assert wait_until(lambda: temporaries(folder) or proc.poll() is not None, 60, interval=0.001)
        assert proc.poll() is None, tail(err_path.read_text())
        os.kill(proc.pid, signal.SIGTERM)
        took = wait_exit(proc, err_path, "SIGTERM", BIG_CARTPOLE_STOP + 30)
    finally:
        kill_session(proc)
    err = check_clean_stop(proc, out_path, err_path, tmp_path, "SIGTERM", took, BIG_CARTPOLE_STOP)
    assert_no_leftovers(tag)
    s = summary(err)
    assert_all_accounted(s, err)


def test_sigint_during_dynamic_adjustment(tmp_path, tag):
    args = [*ORIGINAL, *CARTPOLE[:1], "DEVICE=cpu", "DYNAMIC_SETTINGS=True", "DYNAMIC_SETTINGS_INITIAL_WAIT=1",
            "DYNAMIC_SETTINGS_STEP_WAIT=1", "AGENTS=2", "TRAINERS=1", "PREDICTORS=1", "MAX_AGENTS=6",
            "MAX_TRAINERS=3", "MAX_PREDICTORS=3", "EPISODES=1000000", "SAVE_FREQUENCY=200", "PRINT_STATS_FREQUENCY=1"]
    bound = stop_bound(agents=6, predictors=3, trainers=3, saves=2)  # the largest counts it may have reached
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    counts = re.compile(r"\[NT: +(\d+) NP: +(\d+) NA: +(\d+)\]$")

    def changed_twice() -> bool:
        """Two changes seen from the initial counts on (on a busy machine the first stats line may come after the
        first change)."""
        lines = out_path.read_text().splitlines()
        triples = [(1, 1, 2)] + [tuple(map(int, m.groups())) for m in (counts.search(line) for line in lines) if m]
        return sum(a != b for a, b in zip(triples, triples[1:], strict=False)) >= 2

    try:
        assert wait_until(lambda: changed_twice() or proc.poll() is not None, 120), tail(out_path.read_text())
        assert proc.poll() is None, tail(err_path.read_text())
        os.kill(proc.pid, signal.SIGINT)  # just after a change: the next one is a second away
        took = wait_exit(proc, err_path, "SIGINT", bound + 30)
    finally:
        kill_session(proc)
    err = check_clean_stop(proc, out_path, err_path, tmp_path, "SIGINT", took, bound)
    assert_no_leftovers(tag)
    assert_all_accounted(summary(err), err)


# ----------------------------------------------------------------------------------------------- main killed
def kill_server(args: list[str], tmp_path: Path, tag: str, moment: str) -> float:
    """Starts a run and SIGKILLs its main process mid-run (between saves) or while it writes a checkpoint (the
    moment its temporary file appears, polled every millisecond); returns the seconds its agents and stats
    process took to exit by themselves (no group kill)."""
    folder = tmp_path / "checkpoints"
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    try:
        assert wait_until(lambda: len(checkpoint_files(folder)) - len(temporaries(folder)) >= 2
                          or proc.poll() is not None, 120), tail(err_path.read_text())
        if moment == "saving":
            assert wait_until(lambda: temporaries(folder) or proc.poll() is not None, 60, interval=0.001)
        else:  # some episodes past the last checkpoint, which the resume must cut off
            def between_saves() -> bool:
                saved = max(int(f[len("network_"):-len(".pt")]) for f in checkpoint_files(folder) if f.endswith(".pt"))
                return len(result_lines(tmp_path / "results.txt")) > saved + 3 and not temporaries(folder)

            assert wait_until(lambda: between_saves() or proc.poll() is not None, 60, interval=0.01)
        assert proc.poll() is None, tail(err_path.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.time()
        proc.wait(timeout=10)
        left = leftover_processes(tag, grace=ORPHANS_GONE_SECONDS)
        took = time.time() - killed
        assert not left, "processes left behind:\n" + "\n".join(left)
    finally:
        kill_session(proc)
    assert took < ORPHANS_GONE_SECONDS
    return took


@pytest.mark.parametrize("moment", ["mid-run", "saving"])
def test_sigkill_then_resume(tmp_path, tag, moment):
    """SIGKILL of the main process mid-run or while it writes a checkpoint: the agents and the stats process
    exit by themselves within 10 s, nothing stays in /dev/shm, the previous checkpoint loads, and
    LOAD_CHECKPOINT=True resumes from it: counters, network and optimizer, schedule, and results.txt cut back to
    exactly its episode count (no episode twice) and continued."""
    import torch

    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    shm_before = set(os.listdir("/dev/shm"))
    folder = tmp_path / "checkpoints"
    schedule = ["ANNEALING_EPISODE_COUNT=100000", "LEARNING_RATE_START=0.001", "LEARNING_RATE_END=0.0001"]
    for attempt in range(3):  # a kill can land just after the rename, missing the save: start again (bounded)
        if attempt:
            shutil.rmtree(folder)
            (tmp_path / "results.txt").unlink()
        took = kill_server([*BIG_CARTPOLE, *schedule, f"SAVE_FREQUENCY={20 if moment == 'mid-run' else 1}"],
                           tmp_path, tag, moment)
        if moment == "mid-run" or temporaries(folder):  # the temporary file stayed: the kill hit the save
            break
    else:
        pytest.fail(f"three kills missed the save: {checkpoint_files(folder)}")
    print(f"the agents and the stats process exited {took:.2f} s after the SIGKILL ({moment}, attempt {attempt + 1})")
    assert not shm_leaks(shm_before), f"left in /dev/shm: {shm_leaks(shm_before)}"
    ckpt = latest_checkpoint(folder)
    episodes = ckpt["counters"]["episodes"]
    lines_before = assert_results_complete(tmp_path / "results.txt")
    assert len(lines_before) >= episodes > 0
    if moment == "mid-run":
        assert len(lines_before) > episodes

    # what the next start resumes: checked in this process without starting anything
    cfg = parse_settings([*BIG_CARTPOLE, *schedule, "LOAD_CHECKPOINT=True",
                          f"CHECKPOINT_DIR={folder}", f"RESULTS_FILENAME={tmp_path / 'results.txt'}"])
    server = Server(cfg)
    try:
        assert server.episodes() == episodes
        assert server.total_steps() == ckpt["counters"]["steps"]
        # the weights' own update count came back, and (a first run) it is the checkpoint's update counter
        assert server.network.version == ckpt["network"]["version"] == ckpt["counters"]["updates"] > 0
        state = server.network.get_state()
        for name, tensor in ckpt["network"]["model"].items():
            assert torch.equal(state["model"][name], tensor), name
        stored, loaded = ckpt["network"]["optimizers"][0]["state"], state["optimizers"][0]["state"]
        assert stored
        for key, values in stored.items():
            for name, value in values.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(loaded[key][name], value), (key, name)
        progress = episodes / 100000
        assert server.learning_rate == pytest.approx(0.001 + (0.0001 - 0.001) * progress)
    finally:
        server.close()
    assert not temporaries(folder), "the unfinished save of the killed run was not removed"
    assert result_lines(tmp_path / "results.txt") == lines_before[:episodes]

    target = episodes + 10
    proc, out_path, err_path = start_ga3c([*BIG_CARTPOLE, *schedule, "LOAD_CHECKPOINT=True", f"EPISODES={target}",
                                           "SAVE_FREQUENCY=1000000"], tmp_path, tagged_env(tag))
    try:
        wait_exit(proc, err_path, "the resumed run", timeout=180)
    finally:
        kill_session(proc)
    err = err_path.read_text()
    assert proc.returncode == 0, tail(err)
    assert f"(episode {episodes})" in err
    assert_no_leftovers(tag)
    lines = assert_results_complete(tmp_path / "results.txt")
    assert len(lines) == target
    assert lines[:episodes] == lines_before[:episodes]
    final = latest_checkpoint(folder)
    assert final["counters"]["episodes"] == target
    assert final["counters"]["updates"] > ckpt["counters"]["updates"]
    assert final["counters"]["steps"] > ckpt["counters"]["steps"]
    assert_all_accounted(summary(err), err)
    assert not shm_leaks(shm_before)


# ----------------------------------------------------------------------------------------------- disk trouble
def test_checkpoint_folder_gone_mid_run_stops_with_an_error(tmp_path, tag):
    """The checkpoint folder is replaced by a file mid-run (as if removed, or on a full or read-only disk: every
    save fails): one error line, a clean stop, status 1, no traceback."""
    args = [*CARTPOLE, "AGENTS=2", "SAVE_FREQUENCY=10", "EPISODES=1000000", "MAX_SECONDS=120"]
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    folder = tmp_path / "checkpoints"
    try:
        assert wait_until(lambda: checkpoint_files(folder) or proc.poll() is not None, 120), \
            tail(err_path.read_text())
        assert proc.poll() is None, tail(err_path.read_text())
        shutil.rmtree(folder)
        folder.write_text("not a folder any more")
        # the next periodic save fails (10 episodes later: no bound on when), then the run stops
        wait_exit(proc, err_path, "the folder was replaced", 120 + stop_bound(agents=2, predictors=2, trainers=2))
    finally:
        kill_session(proc)
    err = err_path.read_text()
    assert proc.returncode == 1, tail(err)
    assert "Traceback" not in err, tail(err)
    errors = [line for line in err.splitlines() if "checkpoint could not be written" in line]
    assert errors and "periodic checkpoint could not be written to 'checkpoints'" in errors[0], tail(err)
    assert "stopping: a checkpoint could not be written" in err
    assert_results_complete(tmp_path / "results.txt")
    assert_no_leftovers(tag)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_results_file_on_a_full_disk_stops_with_an_error(tmp_path, tag):
    """A results file that cannot be written (here /dev/full: every write fails with ENOSPC): the stats process
    says so in one line and ends, the server logs it and stops cleanly, status 1."""
    args = [*CARTPOLE, "AGENTS=2", "EPISODES=1000000", "MAX_SECONDS=120", "RESULTS_FILENAME=/dev/full"]
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    try:
        wait_exit(proc, err_path, "start", timeout=120)
    finally:
        kill_session(proc)
    err = err_path.read_text()
    assert proc.returncode == 1, tail(err)
    assert re.search(r"^ga3c: error: the stats process cannot write '/dev/full': .*No space left", err, re.M), err
    assert len(re.findall(r"error", err, re.I)) == 1, tail(err)
    assert "stopping: the results file could not be written" in err
    assert "the stats process died" not in err  # its own line says it all
    assert "Traceback" not in err, tail(err)
    assert latest_checkpoint(tmp_path / "checkpoints")  # the final checkpoint is still written
    assert_no_leftovers(tag)


# ----------------------------------------------------------------------------------------------- a full disk
DISK_MB = 32


@pytest.fixture
def small_disk(tmp_path):
    """A DISK_MB tmpfs mounted in the test's folder (needs root and a kernel that lets us mount: CI has both),
    unmounted at the end whatever happened (lazily if a process still holds a file there)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk is simulated with a small tmpfs, which only root may mount")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
        assert not os.path.ismount(where)


def fill(disk: Path) -> int:
    """Fills the file system of `disk` to the last byte (a file of zeros, written until ENOSPC at every block
    size down to one byte); returns the bytes written."""
    written, size = 0, 1 << 20
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while size:
            try:
                written += os.write(fd, bytes(size))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2
    finally:
        os.close(fd)
    return written


def error_lines(err: str) -> list[str]:
    """The lines of a run's stderr that report a problem (the log has no level names), but for the line that
    gives the reason of the stop."""
    return [line for line in err.splitlines() if "] stopping: " not in line
            and re.search(r"error|warning|traceback|exception|could not|cannot|failed|died", line, re.I)]


def test_full_disk_under_checkpoint_dir(tmp_path, tag, small_disk):
    """CHECKPOINT_DIR on a disk that fills up mid-run: the next save fails with one error line naming the cause,
    the run stops cleanly (status 1) without trying a final save that would fail the same way, no temporary file
    is left, and the last good checkpoint is intact and loads."""
    from ga3c.Checkpoint import load_checkpoint

    folder = small_disk / "checkpoints"
    args = [*CARTPOLE, "AGENTS=2", "SAVE_FREQUENCY=10", "EPISODES=1000000", "MAX_SECONDS=300",
            f"CHECKPOINT_DIR={folder}"]
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    try:
        assert wait_until(lambda: len(checkpoint_files(folder)) - len(temporaries(folder)) >= 2
                          or proc.poll() is not None, 120), tail(err_path.read_text())
        assert proc.poll() is None, tail(err_path.read_text())
        good = [f for f in checkpoint_files(folder) if f.endswith(".pt")]
        fill(small_disk)
        took = wait_exit(proc, err_path, "the disk filled up", timeout=120)
    finally:
        kill_session(proc)
    err = err_path.read_text()
    assert proc.returncode == 1, tail(err)
    errors = error_lines(err)
    assert len(errors) == 1, errors
    assert re.search(rf"the periodic checkpoint could not be written to '{folder}': .*No space left on device",
                     errors[0]), errors
    assert "stopping: a checkpoint could not be written" in err
    assert not temporaries(folder)
    kept = [f for f in checkpoint_files(folder) if f.endswith(".pt")]
    assert set(good) <= set(kept), (good, kept)  # a save may have finished between the listing and the filling
    for name in kept:
        assert load_checkpoint(str(folder / name))["episode"] == int(name[len("network_"):-len(".pt")])
    latest = latest_checkpoint(folder)
    assert latest["counters"]["episodes"] <= len(assert_results_complete(tmp_path / "results.txt"))
    print(f"CHECKPOINT_DIR full: stopped {took:.1f} s after the disk filled; last good checkpoint: episode "
          f"{latest['counters']['episodes']}")
    assert_all_accounted(summary(err), err)
    assert_no_leftovers(tag)


def test_full_disk_under_log_dir(tmp_path, tag, small_disk):
    """LOG_DIR (TensorBoard) on a disk that fills up mid-run: one warning line, then the run goes on without
    TensorBoard (episodes keep coming, training keeps up), and a SIGINT stops it cleanly with status 0."""
    logs = small_disk / "logs"
    args = [*CARTPOLE, "AGENTS=2", "TENSORBOARD=True", f"LOG_DIR={logs}", "SAVE_FREQUENCY=1000000",
            "EPISODES=1000000", "MAX_SECONDS=300"]
    results = tmp_path / "results.txt"
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    warning = "ga3c: warning: TensorBoard cannot write to"
    try:
        def events() -> list[str]:  # the stats process opens the event file once it has imported TensorBoard
            return [f for f in os.listdir(logs) if f.startswith("events.out.tfevents")] if logs.is_dir() else []

        assert wait_until(lambda: len(result_lines(results)) >= 20 and events() and os.path.getsize(
            logs / events()[0]) > 0 or proc.poll() is not None, 120), tail(err_path.read_text())
        assert proc.poll() is None, tail(err_path.read_text())
        fill(small_disk)
        assert wait_until(lambda: warning in err_path.read_text() or proc.poll() is not None, 60), \
            tail(err_path.read_text())
        after = len(result_lines(results))
        assert wait_until(lambda: len(result_lines(results)) >= after + 30 or proc.poll() is not None, 120)
        assert proc.poll() is None, tail(err_path.read_text())
        os.kill(proc.pid, signal.SIGINT)
        took = wait_exit(proc, err_path, "SIGINT", CARTPOLE_STOP + 30)
    finally:
        kill_session(proc)
    err = check_clean_stop(proc, out_path, err_path, tmp_path, "SIGINT", took, CARTPOLE_STOP)
    warnings = error_lines(err)
    assert len(warnings) == 1 and warnings[0].startswith(warning), warnings
    assert re.fullmatch(rf"{warning} '{logs}': \[Errno 28\] No space left on device; training goes on without "
                        rf"TensorBoard", warnings[0]), warnings
    s = summary(err)
    assert_all_accounted(s, err)
    assert s["episodes"] >= after + 30
    print(f"LOG_DIR full: one warning, {int(s['episodes']) - after} episodes after it, stopped {took:.1f} s after "
          f"SIGINT")
    assert_no_leftovers(tag)


def test_full_disk_under_the_results_file(tmp_path, tag, small_disk):
    """The results file on a disk that fills up mid-run: one error line, a clean stop (status 1), every line
    written before is kept and none is torn, and the final checkpoint (on another disk) counts exactly the
    lines kept, so that a resume continues from there."""
    results = small_disk / "results.txt"
    args = [*CARTPOLE, "AGENTS=2", f"RESULTS_FILENAME={results}", "SAVE_FREQUENCY=1000000", "EPISODES=1000000",
            "MAX_SECONDS=300"]
    proc, out_path, err_path = start_ga3c(args, tmp_path, tagged_env(tag))
    try:
        assert wait_until(lambda: len(result_lines(results)) >= 20 or proc.poll() is not None, 120), \
            tail(err_path.read_text())
        assert proc.poll() is None, tail(err_path.read_text())
        fill(small_disk)
        took = wait_exit(proc, err_path, "the disk filled up", timeout=120)
    finally:
        kill_session(proc)
    err = err_path.read_text()
    assert proc.returncode == 1, tail(err)
    errors = error_lines(err)
    assert len(errors) == 1, errors
    assert re.fullmatch(rf"ga3c: error: the stats process cannot write '{results}': \[Errno 28\] No space left on "
                        rf"device; stopping the run \(its \d+ complete lines are kept\)", errors[0]), errors
    assert "stopping: the results file could not be written" in err
    lines = assert_results_complete(results)
    assert len(lines) >= 20
    assert f"(its {len(lines)} complete lines are kept)" in errors[0]
    final = latest_checkpoint(tmp_path / "checkpoints")
    assert final["counters"]["episodes"] == len(lines)
    print(f"results file full: stopped {took:.1f} s after the disk filled, {len(lines)} lines kept = the final "
          f"checkpoint's episodes")
    assert_all_accounted(summary(err), err)
    assert_no_leftovers(tag)
