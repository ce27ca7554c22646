#!/usr/bin/env bash
# One more Centipede run after drive.sh's two, the same settings but for the name, seed and KEY=VALUEs given:
#   bash run_one.sh preset-seed2 2 TIME_MAX=5 MAX_QUEUE_SIZE=16
# Waits for drive.sh's runs to end first (its progress file), so that nothing shares the cores.
set -u
cd "$(git rev-parse --show-toplevel)"
name=$1 seed=$2; shift 2
until grep -q "all done" runs/centipede-t10/progress.txt 2>/dev/null; do sleep 10; done
d=runs/centipede-t10/$name
mkdir -p $d
echo "=== $name start $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
./_train.sh --config configs/cpu.toml ATARI_GAME=CentipedeDeterministic-v4 MAX_SECONDS=1800 SEED=$seed "$@" \
    STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 SAVE_MODELS=false \
    RESULTS_FILENAME=$d/results.txt LOG_DIR=$d/logs > $d/train.log 2>&1
echo "=== $name end rc=$? $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
