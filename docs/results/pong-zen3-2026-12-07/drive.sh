#!/bin/bash
# configs/cpu.toml as it is (no override but the stats line's frequency), seeds one after another
cd "$(dirname "$0")/../../.."
mkdir -p runs/preset-zen3
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 2400 --max-steps 5000000 --variant 'preset' \
    --out runs/preset-zen3/s$s PRINT_STATS_FREQUENCY=50 \
    > runs/preset-zen3/compare-seed$s.txt 2> runs/preset-zen3/compare-seed$s.err
done
