#!/bin/bash
# configs/cpu.toml with one predictor thread and a learning rate that falls linearly from 7e-4 to 7e-6 (settings.py wants a rate > 0) over 10M agent
# steps (40M frames, the baselines' A2C schedule: 70% of the rate left at 12M frames), on a CPU with AVX512-BF16;
# seeds one after another, 22 minutes each at most
cd "$(dirname "$0")/../../.."
mkdir -p runs/np1lr-bf16
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 1320 --max-steps 5000000 \
    --variant 'np1lr: PREDICTORS=1 ANNEALING_STEP_COUNT=10000000 LEARNING_RATE_END=0.000007' \
    --out runs/np1lr-bf16/s$s PRINT_STATS_FREQUENCY=50 \
    > runs/np1lr-bf16/compare-seed$s.txt 2> runs/np1lr-bf16/compare-seed$s.err
done
