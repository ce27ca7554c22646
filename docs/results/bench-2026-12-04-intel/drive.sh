#!/usr/bin/env bash
# Issue 12 target 5: ga3c's benchmark with configs/cpu.toml, then Stable-Baselines3 A2C (GA3C-sized network,
# 16 environments, both vector-env kinds) back to back on the same machine, nothing else on the cores.
# Usage: drive.sh SB3_VENV PEERS_DIR [OUT]   (SB3_VENV made as ../shared/peers/README.md says; OUT: the folder for
# the results, this script's own folder by default)
set -u
SB3=$1; PEERS=$2
OUT=$(cd "${3:-$(dirname "$0")}" && pwd)
cd "$(git -C "$OUT" rev-parse --show-toplevel)"
lscpu > "$OUT/lscpu.txt"; git rev-parse HEAD > "$OUT/commit.txt"
.venv/bin/python scripts/benchmark.py --config configs/cpu.toml --seconds 60 --warmup 15 > "$OUT/ga3c.txt" 2>&1
cd "$PEERS"
for V in subproc dummy; do
  PATH=$SB3/bin:$PATH python bench_run.py --label sb3_ga3c_n16_$V --out "$OUT/sb3_ga3c_n16_$V.json" -- \
      python a2c_pong.py --n-envs 16 --vec $V --threads 2 --net ga3c --seconds 150 > "$OUT/sb3_ga3c_n16_$V.txt" 2>&1
done
cd - > /dev/null
.venv/bin/python scripts/benchmark.py --config configs/cpu.toml --seconds 60 --warmup 15 > "$OUT/ga3c-run2.txt" 2>&1
