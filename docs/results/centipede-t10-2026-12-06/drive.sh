#!/usr/bin/env bash
# Centipede, where the t10 candidate's one seed fell behind the preset's two bf16 runs from 5M frames on: the preset
# itself on the same fp32 CPU (seed 1, paired with ../atari-t10-2026-12-06/'s candidate seed 1), then the
# candidate's seed 2. 30 minutes each, training only (compared by frames; no evaluation).
set -u
cd "$(git rev-parse --show-toplevel)"   # the repository root; run outputs go under runs/ (ignored)
run() {  # NAME SEED [KEY=VALUE ...]
  local name=$1 seed=$2; shift 2
  local d=runs/centipede-t10/$name
  mkdir -p $d
  echo "=== $name start $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
  ./_train.sh --config configs/cpu.toml ATARI_GAME=CentipedeDeterministic-v4 MAX_SECONDS=1800 SEED=$seed "$@" \
      STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 SAVE_MODELS=false \
      RESULTS_FILENAME=$d/results.txt LOG_DIR=$d/logs > $d/train.log 2>&1
  echo "=== $name end rc=$? $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
}
run preset-seed1 1 TIME_MAX=5 MAX_QUEUE_SIZE=16
run t10-seed2 2 TIME_MAX=10 MAX_QUEUE_SIZE=8
echo "=== all done $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
