# Sourced by drive.sh and run_one.sh: run NAME SEED [KEY=VALUE ...] trains Centipede with configs/cpu.toml for
# 30 minutes into runs/centipede-t10/NAME, logging its start and end to runs/centipede-t10/progress.txt.
run() {
  local name=$1 seed=$2; shift 2
  local d=runs/centipede-t10/$name
  mkdir -p $d
  echo "=== $name start $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
  ./_train.sh --config configs/cpu.toml ATARI_GAME=CentipedeDeterministic-v4 MAX_SECONDS=1800 SEED=$seed "$@" \
      STAT_ROLLING_MEAN_WINDOW=100 PRINT_STATS_FREQUENCY=50 SAVE_MODELS=false \
      RESULTS_FILENAME=$d/results.txt LOG_DIR=$d/logs > $d/train.log 2>&1
  echo "=== $name end rc=$? $(date -u +%FT%TZ)" >> runs/centipede-t10/progress.txt
}
