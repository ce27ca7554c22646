#!/bin/bash
# configs/cpu.toml with the value loss weighted 0.5 (Stable Baselines' A2C vf_coef 0.25 on the mean squared error,
# which is 0.5 here, where 1.0 is the original's 0.5 * sum((R - V)^2)), on a CPU with AVX512-BF16; seeds one after
# another, 25 minutes each at most
cd "$(dirname "$0")/../../.."
mkdir -p runs/vf05-bf16
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 1500 --max-steps 5000000 \
    --variant 'vf05: VALUE_LOSS_COEF=0.5' \
    --out runs/vf05-bf16/s$s PRINT_STATS_FREQUENCY=50 \
    > runs/vf05-bf16/compare-seed$s.txt 2> runs/vf05-bf16/compare-seed$s.err
done
