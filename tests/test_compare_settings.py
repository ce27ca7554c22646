"""scripts/compare_settings.py: its arithmetic on hand-built results, its variants, and real CartPole runs."""

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import leftover_processes, tagged_env, tagged_processes, wait_until

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import compare_settings as cs  # noqa: E402


def rows(scores, lengths):
    t0 = datetime(2026, 1, 1)
    return [(t0 + timedelta(seconds=10 * i), float(s), n) for i, (s, n) in enumerate(zip(scores, lengths, strict=True))]


def test_first_reach_and_best_mean():
    r = rows([10, 30, 50, 20], [10, 30, 50, 20])
    # window 2: means 20 (ep 2), 40 (ep 3), 35 (ep 4); 40 first at episode 3, 20 s in, 10+30+50 steps
    assert cs.first_reach(r, 2, 40) == (20.0, 90)
    assert cs.first_reach(r, 2, 41) is None
    assert cs.best_mean(r, 2) == 40.0
    assert cs.best_mean(r[:1], 2) is None


def test_table_medians_over_reached_runs_per_variant_in_order():
    runs = [dict(variant="ppo", seed=1, seconds=None, steps=None, best=None, lag_mean=1.0, lag_max=2,
                 steps_per_s=50)]
    runs += [dict(variant="base", seed=s, seconds=sec, steps=st, best=b, lag_mean=lm, lag_max=9, steps_per_s=100)
             for s, sec, st, b, lm in [(1, 10.0, 100, 200.0, 2.0), (2, 30.0, 300, 210.0, 4.0),
                                       (3, None, None, 90.0, 6.0)]]
    lines = cs.table(runs, 195)
    assert lines[0].startswith("| variant | seed | seconds to 195 | steps to 195 |")
    assert lines[5] == "| base | 3 | - | - | 90.0 | 6.0 / 9 | 100 |"
    assert lines[6] == "| **ppo: median** | 0/1 reached | - | - | - | 1.0 | 50 |"
    assert lines[7] == "| **base: median** | 2/3 reached | 20 | 200 | 200.0 | 4.0 | 100 |"


def test_variants_parse_and_bad_ones_are_refused():
    assert cs.parse_variant("base") == ("base", [])
    assert cs.parse_variant(" ppo : PPO_CLIP=0.2  PPO_EPOCHS=4 ") == ("ppo", ["PPO_CLIP=0.2", "PPO_EPOCHS=4"])
    for bad in ("", ": PPO_CLIP=0.2", "ppo: PPO_CLIP", "a/b: X=1", "a=b"):
        with pytest.raises(ValueError, match="NAME: KEY=VALUE"):
            cs.parse_variant(bad)
    out = subprocess.run([sys.executable, str(SCRIPTS / "compare_settings.py"), "--variant", "a: X", "--out",
                          "unused"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "NAME: KEY=VALUE" in out.stderr, out.stderr
    out = subprocess.run([sys.executable, str(SCRIPTS / "compare_settings.py"), "--variant", "a", "--variant",
                          "a: X=1", "--out", "unused"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "variant names must differ" in out.stderr, out.stderr


def run_compare(tmp_path, *args):
    # a rolling mean of 30 over 5 episodes: random play gets there too, so runs stop early by SIGINT
    # cartpole.toml: the faithful algorithm (the classic preset's GAE excludes V-trace)
    out = subprocess.run([sys.executable, str(SCRIPTS / "compare_settings.py"), "--config",
                          str(SCRIPTS.parent / "configs" / "cartpole.toml"), "--seeds", "1", "--target", "30",
                          "--window", "5", "--budget", "60", "--out", str(tmp_path), *args, "ATARI_GAME=CartPole-v1",
                          "DEVICE=cpu", "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "DYNAMIC_SETTINGS=False"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith("|")]


def test_the_default_variants_are_none_and_vtrace_in_real_runs(tmp_path):
    table = run_compare(tmp_path)
    assert len(table) == 2 + 2 + 2, table  # header, rule, two runs, two medians
    for mode in ("none", "vtrace"):
        row = next(line for line in table if line.startswith(f"| {mode} | 1 |")).split("|")
        assert row[3].strip() != "-" and float(row[3]) < 60, row  # reached, within the budget
        assert (tmp_path / f"{mode}-seed1" / "results.txt").stat().st_size > 0
        assert "summary:" in (tmp_path / f"{mode}-seed1" / "stderr.txt").read_text()


def test_a_variant_setting_reaches_its_run_and_max_steps_bounds_it(tmp_path):
    # an unreachable target: each run goes on until its MAX_STEPS; every rollout is one update (no minimum batch),
    # so updates / trained transitions is 1 / TIME_MAX: 1/5 for the base, 1/20 for the variant's TIME_MAX=20
    out = subprocess.run([sys.executable, str(SCRIPTS / "compare_settings.py"), "--config",
                          str(SCRIPTS.parent / "configs" / "cartpole.toml"), "--seeds", "1", "--target", "1e9",
                          "--window", "5", "--budget", "120", "--max-steps", "3000", "--out", str(tmp_path),
                          "--variant", "base", "--variant", "long: TIME_MAX=20", "ATARI_GAME=CartPole-v1",
                          "DEVICE=cpu", "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "DYNAMIC_SETTINGS=False",
                          "ENVS_PER_AGENT=1", "TRAINING_MIN_BATCH_SIZE=0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    per_step = {}
    for name in ("base", "long"):
        err = (tmp_path / f"{name}-seed1" / "stderr.txt").read_text()
        assert "stopping: MAX_STEPS=3000 reached" in err, err[-2000:]
        s = cs.summary_values(cs.SUMMARY.findall(err)[-1])
        assert s["steps"] >= 3000, s
        per_step[name] = s["updates"] / s["trained"]
    assert 0.19 < per_step["base"] < 0.21 and 0.04 < per_step["long"] < 0.06, per_step  # partial ends: a bit more
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert table[-2].startswith("| **base: median** | 0/1 reached |"), table
    assert table[-1].startswith("| **long: median** | 0/1 reached |"), table


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_driver_alone_stops_its_run(tmp_path, tag, signum):
    """kill -INT/-TERM of the driver's pid (not its process group, as a terminal's Ctrl-C would) once a run is
    training: the run stops as on Ctrl-C (its summary line written) and nothing of it is left behind."""
    driver = subprocess.Popen([sys.executable, str(SCRIPTS / "compare_settings.py"), "--config",
                               str(SCRIPTS.parent / "configs" / "cartpole.toml"), "--seeds", "1", "--target", "1e9",
                               "--budget", "300", "--out", str(tmp_path), "--variant", "base", "DEVICE=cpu",
                               "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "DYNAMIC_SETTINGS=False"],
                              env=tagged_env(tag), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    results = tmp_path / "base-seed1" / "results.txt"
    try:
        assert wait_until(lambda: results.exists() and results.stat().st_size > 0 or driver.poll() is not None,
                          120), "no episode within 120 s"
        assert driver.poll() is None, driver.communicate()
        assert len(tagged_processes(tag)) >= 5, tagged_processes(tag)  # driver, run, 2 agents, stats
        os.kill(driver.pid, signum)
        driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert leftover_processes(tag) == []
    assert "summary:" in (tmp_path / "base-seed1" / "stderr.txt").read_text()
