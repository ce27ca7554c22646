#!/usr/bin/env bash
# Target 2's games with the Pong candidate TIME_MAX=10 MAX_QUEUE_SIZE=8 on top of configs/cpu.toml (nothing else
# changed, nothing tried on these games), 30 minutes each, then evaluation: the driver of atari-2026-12-04 with the
# two settings added. Games as arguments (default: the four).
set -u
cd "$(git rev-parse --show-toplevel)"   # the repository root; run outputs go under runs/ (ignored)
GAMES=("$@"); [ ${#GAMES[@]} -eq 0 ] && GAMES=(Qbert Seaquest MsPacman Centipede)
for G in "${GAMES[@]}"; do
  D=runs/atari-t10/$G
  mkdir -p $D
  echo "=== $G train start $(date -u +%FT%TZ)" >> runs/atari-t10/progress.txt
  ./_train.sh --config configs/cpu.toml ATARI_GAME=${G}Deterministic-v4 MAX_SECONDS=1800 SEED=1 \
      TIME_MAX=10 MAX_QUEUE_SIZE=8 \
      STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 TENSORBOARD=true \
      RESULTS_FILENAME=$D/results.txt CHECKPOINT_DIR=$D/checkpoints LOG_DIR=$D/logs > $D/train.log 2>&1
  echo "=== $G train end rc=$? $(date -u +%FT%TZ)" >> runs/atari-t10/progress.txt
  .venv/bin/python scripts/random_score.py --episodes 30 ATARI_GAME=${G}Deterministic-v4 > $D/random.txt 2>&1
  echo "=== $G random end rc=$? $(date -u +%FT%TZ)" >> runs/atari-t10/progress.txt
  for MODE in False True; do
    timeout 600 ./_play.sh --config configs/cpu.toml ATARI_GAME=${G}Deterministic-v4 CHECKPOINT_DIR=$D/checkpoints \
        TIME_MAX=10 MAX_QUEUE_SIZE=8 \
        PLAY_EPISODES=30 PLAY_STOCHASTIC=$MODE PLAY_NOOP_MAX=30 VIDEO_PATH=$D/play-stochastic-$MODE.mp4 \
        > $D/play-stochastic-$MODE.txt 2>&1
    echo "=== $G play stochastic=$MODE end rc=$? $(date -u +%FT%TZ)" >> runs/atari-t10/progress.txt
  done
done
echo "=== all done $(date -u +%FT%TZ)" >> runs/atari-t10/progress.txt
