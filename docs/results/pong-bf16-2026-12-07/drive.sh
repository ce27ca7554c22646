#!/bin/bash
# configs/cpu.toml as it is (no override but the stats line's frequency) on a CPU with AVX512-BF16, so that
# PRECISION='auto' runs the model in bfloat16; seeds one after another, 30 minutes each at most
cd "$(dirname "$0")/../../.."
mkdir -p runs/preset-bf16
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 1800 --max-steps 5000000 --variant 'preset' \
    --out runs/preset-bf16/s$s PRINT_STATS_FREQUENCY=50 \
    > runs/preset-bf16/compare-seed$s.txt 2> runs/preset-bf16/compare-seed$s.err
done
