#!/bin/bash
# configs/cpu.toml with one predictor thread, a 30-minute probe per seed, seeds one after another
cd "$(dirname "$0")/../../.."
mkdir -p runs/np1
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 1800 --max-steps 5000000 --variant 'np1: PREDICTORS=1' \
    --out runs/np1/s$s PRINT_STATS_FREQUENCY=50 \
    > runs/np1/compare-seed$s.txt 2> runs/np1/compare-seed$s.err
done
