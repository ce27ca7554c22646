#!/usr/bin/env bash
# Boxing with configs/cpu.toml unchanged (the preset of 7 December: orthogonal start, queue of 2), nothing tried on
# Boxing: the command of ../boxing-cpu.md (the preset of 2 December) with a 40-minute budget, then the final
# checkpoint's evaluation as target 2's games have it (30 episodes, greedy and sampled, 0..30 no-op starts).
# SEED=N (default 1); outputs under runs/boxing-2026-12-07/ (ignored).
set -u
cd "$(git rev-parse --show-toplevel)"
SEED=${SEED:-1}
D=runs/boxing-2026-12-07/s$SEED
mkdir -p $D
echo "=== train start $(date -u +%FT%TZ)" >> $D/progress.txt
./_train.sh --config configs/cpu.toml ATARI_GAME=BoxingDeterministic-v4 MAX_SECONDS=2400 SEED=$SEED \
    STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 TENSORBOARD=true \
    RESULTS_FILENAME=$D/results.txt CHECKPOINT_DIR=$D/checkpoints LOG_DIR=$D/logs > $D/train.log 2>&1
echo "=== train end rc=$? $(date -u +%FT%TZ)" >> $D/progress.txt
for MODE in False True; do
  timeout 600 ./_play.sh --config configs/cpu.toml ATARI_GAME=BoxingDeterministic-v4 CHECKPOINT_DIR=$D/checkpoints \
      PLAY_EPISODES=30 PLAY_STOCHASTIC=$MODE PLAY_NOOP_MAX=30 > $D/play-stochastic-$MODE.txt 2>&1
  echo "=== play stochastic=$MODE end rc=$? $(date -u +%FT%TZ)" >> $D/progress.txt
done
echo "=== all done $(date -u +%FT%TZ)" >> $D/progress.txt
