"""The engine end to end: real processes, real ALE and gymnasium, on the CPU.

Each run carries a unique marker in its environment; after it ends no process carrying the marker may remain.
The final summary line must account for every transition (produced == trained + dropped, lost == 0).
"""

from __future__ import annotations

import multiprocessing.resource_tracker
import os
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path

import pytest
from conftest import (
    CARTPOLE,
    CPU,
    ORIGINAL,
    REPO,
    RESULT_LINE,
    TAG_KEY,
    assert_accounted,
    latest_checkpoint,
    leftover_processes,
    result_lines,
    result_scores,
    rolling_means,
    run_ga3c,
    start_ga3c,
    stats_lines,
    steps_to_reach,
    stop_bound,
    stop_when_learned,
    summary,
    tagged_env,
    tagged_processes,
    tail,
    wait_until,
)

PONG = ["ATARI_GAME=PongDeterministic-v4", *CPU]


def assert_no_leftovers(tag: str) -> None:
    left = leftover_processes(tag)
    assert not left, "processes left behind by the run:\n" + "\n".join(left)


def assert_ok(rc: int, out: str, err: str) -> None:
    assert rc == 0, f"exit status {rc}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}"


def assert_results_file(path: Path, count: int | None = None, low: float | None = None,
                        high: float | None = None) -> list[str]:
    """Every line of the results file is complete and well formed; returns the lines."""
    text = path.read_text()
    lines = text.splitlines()
    assert not lines or text.endswith("\n"), f"the last line of {path} is incomplete: {lines[-1]!r}"
    bad = [line for line in lines if not RESULT_LINE.match(line)]
    assert not bad, f"malformed results lines: {bad[:5]}"
    if count is not None:
        assert len(lines) == count, f"{len(lines)} results lines, expected {count}:\n{text}"
    for line in lines:
        score = float(line.split(", ")[1])
        assert (low is None or score >= low) and (high is None or score <= high), f"score out of range: {line!r}"
    return lines


# ---------------------------------------------------------------------------------------------------------------
def test_pong_end_to_end(tmp_path, tag):
    rc, out, err = run_ga3c([*PONG, "AGENTS=4", "EPISODES=8", "TENSORBOARD=True"], tmp_path, timeout=240,
                            env=tagged_env(tag))
    assert_ok(rc, out, err)
    assert_no_leftovers(tag)

    assert_results_file(tmp_path / "results.txt", count=8, low=-21, high=21)

    lines = stats_lines(out)
    assert lines, f"no stats line on stdout:\n{tail(out)}"
    assert [int(m["episode"]) for m in lines] == list(range(1, 9))
    assert all(int(m["pps"]) > 0 for m in lines)

    ckpt = latest_checkpoint(tmp_path / "checkpoints")
    assert ckpt["episode"] == 8
    assert ckpt["counters"]["episodes"] == 8
    assert ckpt["counters"]["updates"] > 0
    assert os.path.basename(ckpt["path"]) == "network_00000008.pt"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list((tmp_path / "logs").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file in logs/"
    acc = EventAccumulator(str(tmp_path / "logs"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "episode/score" in tags and "episode/length" in tags, tags
    scores = acc.Scalars("episode/score")
    assert len(scores) == 8
    assert sorted(e.value for e in scores) == sorted(result_scores(tmp_path / "results.txt"))
    assert len(acc.Scalars("episode/length")) == 8
    assert [e.step for e in scores] == sorted(e.step for e in scores)

    s = summary(err)
    assert_accounted(s, err)
    assert s["episodes"] == 8
    assert s["trained"] > 0 and s["updates"] > 0


# ---------------------------------------------------------------------------------------------------------------
def test_experience_accounting_is_exact(tmp_path, tag):
    rc, out, err = run_ga3c([*CARTPOLE, "AGENTS=3", "ENVS_PER_AGENT=2", "TIME_MAX=5", "TRAINING_MIN_BATCH_SIZE=32",
                             "MAX_STEPS=3000", "SAVE_MODELS=False"], tmp_path, timeout=180, env=tagged_env(tag))
    assert_ok(rc, out, err)
    assert_no_leftovers(tag)
    s = summary(err)
    assert_accounted(s, err)
    assert s["steps"] >= 3000, s
    assert s["trained"] > 0 and s["updates"] > 0, s
    # the lag of a transition is the number of updates between acting and training: at most all of them
    assert 0 <= s["policy_lag_mean"] <= s["policy_lag_max"] <= s["updates"], s
    assert "MAX_STEPS=3000 reached" in err


def test_train_models_false_trains_nothing(tmp_path, tag):
    rc, out, err = run_ga3c([*CARTPOLE, "AGENTS=2", "MAX_STEPS=1500", "SAVE_MODELS=False", "TRAIN_MODELS=False"],
                            tmp_path, timeout=180, env=tagged_env(tag))
    assert_ok(rc, out, err)
    s = summary(err)
    assert_accounted(s, err)
    assert s["updates"] == 0 and s["trained"] == 0 and s["dropped"] == s["produced"] >= 1500, s


# ---------------------------------------------------------------------------------------------------------------
# The classic preset, unchanged, on two tasks, bounded in agent steps: a loaded machine slows the test, it does not
# fail it. Budgets hold about twice the steps the preset needed (docs/results/classic-cpu.md: CartPole-v1 475 in
# 251-255K over 3 seeds, Acrobot-v1 -100 in 367-748K over 6); a second seed runs only if the first misses.
WINDOW, SEEDS = 20, (1, 2)
HANG_GUARD = 900  # seconds; about 40 s (CartPole) and 75-90 s (Acrobot) on 2 idle cores of an Ice Lake Xeon
TASKS = {  # task: (target of the rolling mean over WINDOW episodes, MAX_STEPS, lowest and highest episode score)
    "CartPole-v1": (475.0, 500_000, 0, 500),
    "Acrobot-v1": (-100.0, 1_500_000, -500, 0),
}


def learn(folder: Path, tag: str, task: str, seed: int) -> tuple[int | None, list[float]]:
    """One attempt: runs until the rolling mean reaches the task's target (then SIGINT) or MAX_STEPS ends the run;
    returns (agent steps of the finished episodes when the target was reached or None, rolling means)."""
    target, max_steps, low, high = TASKS[task]
    folder.mkdir()
    args = ["--config", str(REPO / "configs" / "classic.toml"), f"ATARI_GAME={task}", f"MAX_STEPS={max_steps}",
            f"SEED={seed}", f"STAT_ROLLING_MEAN_WINDOW={WINDOW}", "SAVE_MODELS=False"]
    proc, out_path, err_path = start_ga3c(args, folder, tagged_env(tag))
    results = folder / "results.txt"
    stop_when_learned(proc, results, WINDOW, target, 120, task, err_path, hang_guard=HANG_GUARD)
    out, err = out_path.read_text(), err_path.read_text()
    assert_ok(proc.returncode, out, err)
    assert_no_leftovers(tag)
    assert_results_file(results, low=low, high=high)
    assert_accounted(summary(err), err)
    return steps_to_reach(results, WINDOW, target), rolling_means(result_scores(results), WINDOW)


@pytest.mark.parametrize("task", list(TASKS))
def test_classic_preset_learns(tmp_path, tag, task):
    target, max_steps = TASKS[task][:2]
    curves = []
    for attempt, seed in enumerate(SEEDS):
        steps, means = learn(tmp_path / f"attempt{attempt}", tag, task, seed)
        if steps is not None:
            print(f"{task}: rolling mean >= {target} after {steps} agent steps (seed {seed})")
            return
        curves.append([round(m, 1) for m in means[::max(1, len(means) // 60)]])
    pytest.fail(f"{task} did not reach a rolling mean of {target} over {WINDOW} episodes within {max_steps} agent "
                f"steps in {len(SEEDS)} attempts; rolling means:\n" + "\n".join(map(str, curves)))


# ---------------------------------------------------------------------------------------------------------------
def test_set_counts_mid_run_in_process(tmp_path, monkeypatch, tag):
    from ga3c import SharedBuffers as sb
    from ga3c.Server import Server
    from ga3c.settings import parse_settings

    # the resource tracker outlives the run (it serves this pytest process): start it before the marker is set
    multiprocessing.resource_tracker.ensure_running()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(TAG_KEY, tag)
    cfg = parse_settings([*CARTPOLE, "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "MAX_SECONDS=150", "EPISODES=1000000",
                          "SAVE_MODELS=False", "PRINT_STATS_FREQUENCY=100000"])
    server = Server(cfg)
    c = server.shared.counters
    trained = lambda: int(c[sb.C_TRAINED])  # noqa: E731
    errors: list[str] = []
    seen: dict[str, object] = {}

    def grows(timeout: float = 30) -> bool:
        before = trained()
        return wait_until(lambda: trained() > before + 100, timeout)

    def drive() -> None:
        try:
            assert wait_until(lambda: trained() > 0, 90), "training never started"
            seen["initial"] = server.counts()
            server.set_counts(3, 3, 5)
            assert server.counts() == (3, 3, 5), server.counts()
            assert (int(c[sb.C_NT]), int(c[sb.C_NP]), int(c[sb.C_NA])) == (3, 3, 5)
            assert all(t.is_alive() for t in server.trainers + server.predictors)
            assert grows(), "training stopped after growing to (3, 3, 5)"
            assert all(proc.is_alive() for proc, _ in server.agents.values()), "an added agent died"
            # the marker reaches the spawned processes: 5 agents and the stats process
            assert len(tagged_processes(tag)) >= 6, tagged_processes(tag)
            removed_threads = server.trainers[1:] + server.predictors[1:]
            removed_agents = [proc for agent_id, (proc, _) in server.agents.items() if agent_id != min(server.agents)]
            assert len(removed_threads) == 4 and len(removed_agents) == 4

            server.set_counts(1, 1, 1)
            assert server.counts() == (1, 1, 1), server.counts()
            assert (int(c[sb.C_NT]), int(c[sb.C_NP]), int(c[sb.C_NA])) == (1, 1, 1)
            for thread in removed_threads:
                thread.join(timeout=15)
            assert not [t.name for t in removed_threads if t.is_alive()], "removed threads still running"
            assert wait_until(lambda: not server.retiring, 15), f"agents not reaped: {list(server.retiring)}"
            assert [proc.exitcode for proc in removed_agents] == [0, 0, 0, 0]
            assert grows(), "training stopped after shrinking to (1, 1, 1)"
            seen["final"] = server.counts()
        except BaseException:  # noqa: BLE001 - reported by the main thread
            errors.append(traceback.format_exc())
        finally:
            server.request_stop("test")

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    rc = server.main()
    driver.join(timeout=30)
    assert not errors, errors[0]
    assert rc == 0
    assert server.stop_reason == "test"
    assert seen == {"initial": (1, 1, 2), "final": (1, 1, 1)}
    produced = int(server.shared.agent_steps.sum())
    trained_n, dropped = int(c[sb.C_TRAINED]), int(c[sb.C_DROPPED])
    assert produced > 0
    assert produced - trained_n - dropped == 0, f"produced={produced} trained={trained_n} dropped={dropped}"
    assert not server.agents and not server.retiring
    assert_no_leftovers(tag)


@pytest.mark.parametrize("network", ["feedforward", "lstm"])
def test_dynamic_adjustment_changes_counts(tmp_path, tag, network):
    """Agents, predictors and trainers come and go; with the LSTM, each new agent's environments start from a zero
    state and predictors that join gather the states the others wrote."""
    rc, out, err = run_ga3c([*ORIGINAL, "ATARI_GAME=CartPole-v1", "DEVICE=cpu", "DYNAMIC_SETTINGS=True",
                             f"NETWORK_TYPE={network}",
                             "DYNAMIC_SETTINGS_INITIAL_WAIT=1", "DYNAMIC_SETTINGS_STEP_WAIT=1", "MAX_SECONDS=11",
                             "PRINT_STATS_FREQUENCY=5", "AGENTS=2", "TRAINERS=1", "PREDICTORS=1", "MAX_AGENTS=5",
                             "MAX_TRAINERS=3", "MAX_PREDICTORS=3", "EPISODES=1000000", "SAVE_MODELS=False"],
                            tmp_path, timeout=150, env=tagged_env(tag))
    assert_ok(rc, out, err)
    assert_no_leftovers(tag)
    lines = stats_lines(out)
    assert len(lines) >= 5, f"too few stats lines:\n{tail(out)}"
    triples = [(int(m["nt"]), int(m["np"]), int(m["na"])) for m in lines]
    assert len(set(triples)) > 1, f"the dynamic adjustment never changed the counts: {sorted(set(triples))}"
    while triples and triples[-1][2] == 0:  # lines of episodes that ended while the run stopped its agents
        triples.pop()
    assert all(1 <= nt <= 3 and 1 <= np_ <= 3 and 1 <= na <= 5 for nt, np_, na in triples), triples
    assert all(int(m["tps"]) > 0 for m in lines[-3:]), [m.group(0) for m in lines[-3:]]
    episodes = [int(m["episode"]) for m in lines]
    assert episodes == sorted(episodes) and episodes[-1] > episodes[0]
    s = summary(err)
    assert_accounted(s, err)
    assert s["updates"] > 0


# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_cleanly(tmp_path, tag, signum):
    bound = stop_bound(agents=4, predictors=2, trainers=2)  # Config's PREDICTORS and TRAINERS
    proc, out_path, err_path = start_ga3c([*PONG, "AGENTS=4", "EPISODES=1000"], tmp_path, tagged_env(tag))
    results = tmp_path / "results.txt"
    try:
        started = wait_until(lambda: "model:" in err_path.read_text() or proc.poll() is not None, 90)
        assert started and proc.poll() is None, f"the run did not start\n{tail(err_path.read_text())}"
        # train until the first episode ends (or 30 s), the main process's signal handlers long installed
        wait_until(lambda: len(result_lines(results)) >= 1 or proc.poll() is not None, 30, interval=0.5)
        assert proc.poll() is None, f"the run ended on its own\n{tail(err_path.read_text())}"
        # the marker scan sees the run: the main process, 4 agents and the stats process
        running = tagged_processes(tag)
        assert len(running) >= 6, running
        sent = time.time()
        os.kill(proc.pid, signum)  # the main process only
        try:
            proc.wait(timeout=bound + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit {bound + 30:.0f} s after {signum.name}\n{tail(err_path.read_text())}")
        took = time.time() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out, err = out_path.read_text(), err_path.read_text()
    assert_ok(proc.returncode, out, err)
    assert took <= bound, f"took {took:.1f} s to stop after {signum.name} (bound {bound:.1f} s)\n{tail(err)}"
    assert f"stopping: {signum.name}" in err
    assert_no_leftovers(tag)
    lines = assert_results_file(results, low=-21, high=21)
    ckpt = latest_checkpoint(tmp_path / "checkpoints")
    assert ckpt["counters"]["episodes"] == len(lines), (ckpt["counters"], len(lines))
    assert ckpt["episode"] == len(lines)
    s = summary(err)
    assert_accounted(s, err)
    assert s["episodes"] == len(lines)
    assert s["trained"] > 0


# ---------------------------------------------------------------------------------------------------------------
FAKE = ["2000-01-01 00:00:00, 999, 9", "2000-01-01 00:00:01, 998, 8", "2000-01-01 00:00:02, 997, 7"]


def test_resume_continues_counters_and_cuts_results(tmp_path, tag):
    """A resume goes on from the checkpoint: counters, results.txt cut to its episodes, and the console's rolling
    score over the last STAT_ROLLING_MEAN_WINDOW lines of results.txt, those before the resume included."""
    window = 20
    base = [*CARTPOLE, "AGENTS=2", "SAVE_MODELS=True", f"STAT_ROLLING_MEAN_WINDOW={window}",
            "PRINT_STATS_FREQUENCY=5"]
    rc, out, err = run_ga3c([*base, "EPISODES=30"], tmp_path, timeout=180, env=tagged_env(tag))
    assert_ok(rc, out, err)
    assert_no_leftovers(tag)
    first = latest_checkpoint(tmp_path / "checkpoints")
    assert first["counters"]["episodes"] == 30
    first_lines = assert_results_file(tmp_path / "results.txt", count=30)
    assert_accounted(summary(err), err)

    # a results file with more lines than the checkpoint knows of is cut back before the run goes on
    with open(tmp_path / "results.txt", "a") as f:
        f.write("".join(line + "\n" for line in FAKE))

    rc, out, err = run_ga3c([*base, "LOAD_CHECKPOINT=True", "EPISODES=60"], tmp_path, timeout=180,
                            env=tagged_env(tag))
    assert_ok(rc, out, err)
    assert_no_leftovers(tag)
    second = latest_checkpoint(tmp_path / "checkpoints")
    assert second["counters"]["episodes"] == 60
    assert second["episode"] == 60
    assert second["counters"]["updates"] > first["counters"]["updates"]
    assert second["counters"]["steps"] > first["counters"]["steps"]
    lines = assert_results_file(tmp_path / "results.txt", count=60)
    assert lines[:30] == first_lines
    assert not set(FAKE) & set(lines)
    stats = stats_lines(out)
    assert stats, f"no stats line in the resumed run:\n{tail(out)}"
    assert int(stats[0]["episode"]) > 30, stats[0].group(0)
    assert int(stats[-1]["episode"]) == 60
    rewards = [float(line.split(",")[1]) for line in lines]
    for line in stats:
        episode = int(line["episode"])
        expected = sum(rewards[episode - window:episode]) / window
        assert float(line["rscore"]) == pytest.approx(expected, abs=1e-4), (line.group(0), expected)
    s = summary(err)
    assert_accounted(s, err)
    assert s["episodes"] == 60


def test_last_rewards_reads_the_tail_of_a_results_file(tmp_path):
    """The resumed rolling score's source: the last lines of a file longer than one read block, a file shorter
    than the window, a file that is gone, and a line that is not a result (the score starts after it)."""
    from ga3c.ProcessStats import last_rewards, results_line

    path = tmp_path / "results.txt"
    rewards = [float((i * 7919) % 43 - 21) + (0.5 if i % 3 == 0 else 0.0) for i in range(5000)]
    path.write_text("".join(results_line(946684800.0 + i, r, 100 + i) for i, r in enumerate(rewards)))
    assert path.stat().st_size > 1 << 16
    assert last_rewards(str(path), 1000) == rewards[-1000:]
    assert last_rewards(str(path), 1) == rewards[-1:]
    assert last_rewards(str(path), 0) == []
    assert last_rewards(str(path), 10_000) == rewards
    assert last_rewards(str(tmp_path / "gone.txt"), 10) == []
    with open(path, "a") as f:
        f.write("not a result\n" + results_line(946690000.0, 3.0, 50) + "\n")
    assert last_rewards(str(path), 100) == [3.0]
