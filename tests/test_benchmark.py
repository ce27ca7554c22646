"""scripts/benchmark.py runs end to end: the env-only ceiling, a training run and a second one with --compare, and
its last line is one JSON object with every figure (speed is measured by the script, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


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
    assert first["ratio"] == round(first["train_steps_per_s"] / first["env_only_steps_per_s"], 3)
    for run in (first, second):  # PSS splits the pages shared with other processes; private memory is part of it
        assert 0 < run["peak_private_mb_per_agent"] <= run["peak_pss_mb_per_agent"], run
        assert run["peak_rss_mb_per_agent"] > 0, run
