"""scripts/benchmark.py runs end to end: the env-only ceiling before and after, a training run and a second one with
--compare, and its last line is one JSON object with every figure (speed is measured by the script, never asserted
here)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import REPO

spec = importlib.util.spec_from_file_location("benchmark", REPO / "scripts" / "benchmark.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


def test_benchmark_compares_two_networks_in_one_invocation(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark.py"), "--seconds", "3", "--warmup", "2",
                          "--env-seconds", "2", "--compare", "NETWORK_TYPE=lstm", "ATARI_GAME=CartPole-v1",
                          "DEVICE=cpu", "AGENTS=2", "PREDICTORS=1", "TRAINERS=1", "LSTM_SIZE=32"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    first, second = result, result["compare"]
    assert first["NETWORK_TYPE"] == "feedforward" and second["NETWORK_TYPE"] == "lstm"
    assert second["settings"] == ["NETWORK_TYPE=lstm"]
    assert first["env_only_steps_per_s"] > 0 and first["train_steps_per_s"] > 0 and second["train_steps_per_s"] > 0
    assert result["compare_ratio"] == round(second["train_steps_per_s"] / first["train_steps_per_s"], 3)
    before, after = first["env_only_before_after"]  # measured on both sides of the two training runs
    assert before > 0 and after > 0 and second["env_only_before_after"] == [before, after]
    for run in (first, second):
        mean = (before + after) / 2
        assert run["env_only_steps_per_s"] == pytest.approx(mean, abs=0.1)
        assert run["ratio"] == pytest.approx(run["train_steps_per_s"] / mean, abs=2e-3)
        low, high = sorted(run["train_steps_per_s"] / rate for rate in (before, after))
        assert run["ratio_range"] == pytest.approx([low, high], abs=2e-3)
    for run in (first, second):  # PSS splits the pages shared with other processes; private memory is part of it
        assert 0 < run["peak_private_mb_per_agent"] <= run["peak_pss_mb_per_agent"], run
        assert run["peak_rss_mb_per_agent"] > 0, run


def test_ratio_is_against_the_mean_of_both_env_only_readings():
    """A machine that ran the env-only pass at 4,000 steps/s before and 6,000 after: 2,000 training steps/s are
    0.4 of the mean, 1/3 of the faster reading and 1/2 of the slower one."""
    result = {"train_steps_per_s": 2000.0}
    benchmark.add_env_only(result, 4000.0, 6000.0)
    assert result["env_only_steps_per_s"] == 5000.0 and result["env_only_before_after"] == [4000.0, 6000.0]
    assert result["ratio"] == 0.4 and result["ratio_range"] == [0.333, 0.5]
    once = {"train_steps_per_s": 2000.0}  # --env-once: one reading, a range of one value
    benchmark.add_env_only(once, 4000.0, None)
    assert once["ratio"] == 0.5 and once["ratio_range"] == [0.5, 0.5]
    assert once["env_only_before_after"] == [4000.0, None]
    none = {"train_steps_per_s": 2000.0, "ratio": None}  # --skip-env-only: nothing to compare with
    benchmark.add_env_only(none, None, None)
    assert none["ratio"] is None and "env_only_steps_per_s" not in none


def _bench_model(tmp_path, *args):
    return subprocess.run([sys.executable, str(REPO / "scripts" / "bench_model.py"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("network", ["feedforward", "lstm"])
def test_bench_model_times_every_batch_and_its_ceiling_is_the_cpu_shares(tmp_path, network):
    """Each batch asked for gets a time per call and per state; the ceiling is env-only CPU per step over that plus
    one prediction and one training of a state, computed here from the script's own figures."""
    out = _bench_model(tmp_path, "--predict", "4", "8", "--train", "10", "--repeats", "1",
                       "--ceiling", "4000", "8", "10", "ATARI_GAME=CartPole-v1", "DEVICE=cpu",
                       f"NETWORK_TYPE={network}", "LSTM_SIZE=16")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["state_shape"] == [4] and result["actions"] == 2
    assert result["network"] == ("mlp-lstm" if network == "lstm" else "mlp")
    assert sorted(result["predict"]) == ["4", "8"] and list(result["train"]) == ["10"]
    for kind, n in (("predict", 4), ("predict", 8), ("train", 10)):
        row = result[kind][str(n)]
        assert row["ms_per_call"] > 0
        # ms_per_call is rounded to 1 us per call and us_per_state to 0.1 us: together they may differ by 0.5/n + 0.05
        assert row["us_per_state"] == pytest.approx(row["ms_per_call"] * 1e3 / n, abs=0.5 / n + 0.05 + 1e-9)
    c = result["ceiling"]
    env_us = c["cores"] * 1e6 / 4000
    model_us = result["predict"]["8"]["us_per_state"] + result["train"]["10"]["us_per_state"]
    assert c["env_us_per_step"] == pytest.approx(env_us, abs=0.1)
    assert c["model_us_per_step"] == pytest.approx(model_us, abs=0.1)
    assert c["ratio"] == pytest.approx(env_us / (env_us + model_us), abs=1e-3)
    assert "training / env-only at most" in out.stdout
    assert result["code"].startswith(str(REPO)) and f"code: {result['code']}" in out.stdout


def test_bench_model_names_the_code_it_ran(tmp_path):
    """A copy of the package first on PYTHONPATH is what runs (as when two commits are compared side by side), and
    the figures say so, not the checkout the editable install points at."""
    import os
    import shutil

    other = tmp_path / "other"
    shutil.copytree(REPO / "ga3c", other / "ga3c", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(other))
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_model.py"), "--predict", "4", "--train", "4",
                          "--repeats", "1", "ATARI_GAME=CartPole-v1", "DEVICE=cpu"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["code"] == str(other.resolve())  # not a checkout: no commit


def test_bench_model_refuses_a_ceiling_on_a_batch_it_did_not_measure(tmp_path):
    out = _bench_model(tmp_path, "--predict", "4", "--train", "10", "--ceiling", "4000", "8", "10",
                       "ATARI_GAME=CartPole-v1", "DEVICE=cpu")
    assert out.returncode == 2
    assert "P among --predict" in out.stderr and "Traceback" not in out.stderr
