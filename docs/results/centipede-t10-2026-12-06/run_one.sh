#!/usr/bin/env bash
# One more Centipede run after drive.sh's two, the same settings but for the name, seed and KEY=VALUEs given:
#   bash run_one.sh preset-seed2 2 TIME_MAX=5 MAX_QUEUE_SIZE=16
# Waits for drive.sh's runs to end first (its progress file), so that nothing shares the cores.
set -u
cd "$(git rev-parse --show-toplevel)"
name=$1 seed=$2; shift 2
until grep -q "all done" runs/centipede-t10/progress.txt 2>/dev/null; do sleep 10; done
source docs/results/centipede-t10-2026-12-06/run.sh
run "$name" "$seed" "$@"
