#!/bin/bash
# configs/cpu.toml with a queue of one rollout waiting for the trainers (MAX_QUEUE_SIZE=1, the preset's 2): a
# lower policy lag; on a CPU with AVX512-BF16; seeds one after another, 23 minutes each at most
cd "$(dirname "$0")/../../.."
mkdir -p runs/q1-bf16
for s in "$@"; do
  .venv/bin/python scripts/compare_settings.py --config configs/cpu.toml --seeds $s --target 18 --window 100 \
    --budget 1400 --max-steps 5000000 \
    --variant 'q1: MAX_QUEUE_SIZE=1' \
    --out runs/q1-bf16/s$s PRINT_STATS_FREQUENCY=50 \
    > runs/q1-bf16/compare-seed$s.txt 2> runs/q1-bf16/compare-seed$s.err
done
