#!/usr/bin/env bash
# Target 2's games with the Pong candidate WEIGHT_INIT=orthogonal MAX_QUEUE_SIZE=2 on top of configs/cpu.toml
# (nothing else changed, nothing tried on these games), 30 minutes each, then evaluation: the driver of
# atari-t10-2026-12-06 with the two settings instead of t10's (now in the preset), and without random play (a
# game's random score does not depend on the preset: atari-t10-2026-12-06/<Game>-random.txt). Games as arguments
# (default: the four); PLAY=0 skips the evaluation, TRAIN=0 the training (evaluates an existing checkpoint);
# SEED=N (default 1) runs another seed, under runs/atari-orthq2/<Game>-s<N>.
set -u
cd "$(git rev-parse --show-toplevel)"   # the repository root; run outputs go under runs/ (ignored)
GAMES=("$@"); [ ${#GAMES[@]} -eq 0 ] && GAMES=(Qbert Seaquest MsPacman Centipede)
SEED=${SEED:-1}
for G in "${GAMES[@]}"; do
  D=runs/atari-orthq2/$G; [ "$SEED" = 1 ] || D=$D-s$SEED
  mkdir -p $D
  if [ "${TRAIN:-1}" != 0 ]; then
    echo "=== $G seed $SEED train start $(date -u +%FT%TZ)" >> runs/atari-orthq2/progress.txt
    ./_train.sh --config configs/cpu.toml ATARI_GAME=${G}Deterministic-v4 MAX_SECONDS=1800 SEED=$SEED \
        WEIGHT_INIT=orthogonal MAX_QUEUE_SIZE=2 \
        STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 TENSORBOARD=true \
        RESULTS_FILENAME=$D/results.txt CHECKPOINT_DIR=$D/checkpoints LOG_DIR=$D/logs > $D/train.log 2>&1
    echo "=== $G seed $SEED train end rc=$? $(date -u +%FT%TZ)" >> runs/atari-orthq2/progress.txt
  fi
  [ "${PLAY:-1}" = 0 ] && continue
  for MODE in False True; do
    timeout 600 ./_play.sh --config configs/cpu.toml ATARI_GAME=${G}Deterministic-v4 CHECKPOINT_DIR=$D/checkpoints \
        WEIGHT_INIT=orthogonal MAX_QUEUE_SIZE=2 \
        PLAY_EPISODES=30 PLAY_STOCHASTIC=$MODE PLAY_NOOP_MAX=30 VIDEO_PATH=$D/play-stochastic-$MODE.mp4 \
        > $D/play-stochastic-$MODE.txt 2>&1
    echo "=== $G seed $SEED play stochastic=$MODE end rc=$? $(date -u +%FT%TZ)" >> runs/atari-orthq2/progress.txt
  done
done
echo "=== all done $(date -u +%FT%TZ)" >> runs/atari-orthq2/progress.txt
