#!/usr/bin/env bash
# Four games of the GA3C paper's Table 3, configs/cpu.toml (RMSPROP_EPSILON 1e-6, grad clip 40) unchanged, 30 minutes each, then evaluation.
set -u
cd "$(git rev-parse --show-toplevel)"   # the repository root; run outputs go under runs/ (ignored)
for G in Qbert Seaquest MsPacman Centipede; do
  D=runs/atari-eps/$G
  mkdir -p $D
  echo "=== $G train start $(date -u +%FT%TZ)" >> runs/atari-eps/progress.txt
  ./_train.sh --config configs/cpu.toml ATARI_GAME=${G}Deterministic-v4 MAX_SECONDS=1800 SEED=1 \
      STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 TENSORBOARD=true \
      RESULTS_FILENAME=$D/results.txt CHECKPOINT_DIR=$D/checkpoints LOG_DIR=$D/logs > $D/train.log 2>&1
  echo "=== $G train end rc=$? $(date -u +%FT%TZ)" >> runs/atari-eps/progress.txt
  .venv/bin/python scripts/random_score.py --episodes 30 ATARI_GAME=${G}Deterministic-v4 > $D/random.txt 2>&1
  echo "=== $G random end rc=$? $(date -u +%FT%TZ)" >> runs/atari-eps/progress.txt
  for MODE in False True; do
    timeout 600 ./_play.sh --config configs/cpu.toml ATARI_GAME=${G}Deterministic-v4 CHECKPOINT_DIR=$D/checkpoints \
        PLAY_EPISODES=30 PLAY_STOCHASTIC=$MODE PLAY_NOOP_MAX=30 VIDEO_PATH=$D/play-stochastic-$MODE.mp4 \
        > $D/play-stochastic-$MODE.txt 2>&1
    echo "=== $G play stochastic=$MODE end rc=$? $(date -u +%FT%TZ)" >> runs/atari-eps/progress.txt
  done
done
echo "=== all done $(date -u +%FT%TZ)" >> runs/atari-eps/progress.txt
