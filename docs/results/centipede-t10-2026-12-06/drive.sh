#!/usr/bin/env bash
# Centipede, where the t10 candidate's one seed fell behind the preset's two bf16 runs from 5M frames on: the preset
# itself on the same fp32 CPU (seed 1, paired with ../atari-t10-2026-12-06/'s candidate seed 1), then the
# candidate's seed 2. 30 minutes each, training only (compared by frames; no evaluation).
set -u
cd "$(git rev-parse --show-toplevel)"   # the repository root; run outputs go under runs/ (ignored)
source docs/results/centipede-t10-2026-12-06/run.sh   # run NAME SEED [KEY=VALUE ...]
run preset-seed1 1 TIME_MAX=5 MAX_QUEUE_SIZE=16
run t10-seed2 2 TIME_MAX=10 MAX_QUEUE_SIZE=8
echo "=== all done $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
