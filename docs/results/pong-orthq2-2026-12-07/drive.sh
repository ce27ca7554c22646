#!/bin/bash
# seeds one after another; each its own folder and compare table
cd "$(dirname "$0")/../.."
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 2400 --max-steps 5000000 --variant 'orthq2: WEIGHT_INIT=orthogonal MAX_QUEUE_SIZE=2' \
    --out runs/orthq2/s$s PRINT_STATS_FREQUENCY=50 > runs/orthq2/compare-seed$s.txt 2> runs/orthq2/compare-seed$s.err
done
