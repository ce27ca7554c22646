#!/usr/bin/env bash
# Issue 12 target 5 on a Zen 4 EPYC with AVX512-BF16 (PRECISION='auto' runs bf16), on a day its emulators ran
# slower: ga3c's benchmark with configs/cpu.toml, SB3 A2C (GA3C-sized network, 16 environments, DummyVecEnv), then
# ga3c's benchmark again. Back to back, nothing else on the cores.
# Usage: drive.sh SB3_VENV PEERS_DIR (run from this folder's repository).
set -u
SB3=$1; PEERS=$2
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$(git -C "$OUT" rev-parse --show-toplevel)"
.venv/bin/python scripts/benchmark.py --config configs/cpu.toml --seconds 60 --warmup 15 --profile > "$OUT/ga3c.txt" 2>&1
(cd "$PEERS" && PATH=$SB3/bin:$PATH python bench_run.py --label sb3_ga3c_n16_dummy --out "$OUT/sb3_ga3c_n16_dummy.json" -- \
    python a2c_pong.py --n-envs 16 --vec dummy --threads 2 --net ga3c --seconds 150 > "$OUT/sb3_ga3c_n16_dummy.txt" 2>&1)
.venv/bin/python scripts/benchmark.py --config configs/cpu.toml --seconds 60 --warmup 15 > "$OUT/ga3c-run2.txt" 2>&1
