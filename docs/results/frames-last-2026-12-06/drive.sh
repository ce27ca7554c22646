#!/bin/bash
# What produced this folder: the model alone before/after (paired, one process), then scripts/benchmark.py on the
# commit before (OLD) and after (NEW) the change, alternating, three rounds, nothing else on the cores.
# Usage: drive.sh OLD_CHECKOUT NEW_CHECKOUT PYTHON OUT
# Each side runs with its own checkout first on PYTHONPATH: with an editable install, a script run from another
# checkout would otherwise import the installed checkout's ga3c (the first two series in same-code/ did exactly that).
set -euo pipefail
old=$1 new=$2 py=$3 out=$4
"$py" "$new/docs/results/frames-last-2026-12-06/paired_model.py" > "$out/paired_model.txt" 2>&1
for round in 1 2 3; do
  for side in old new; do
    dir=$old; [ "$side" = new ] && dir=$new
    (cd "$dir" && PYTHONPATH="$dir" "$py" scripts/benchmark.py --config configs/cpu.toml --seconds 60 --warmup 15 \
        --profile > "$out/bench-$side-$round.txt" 2>&1)
  done
done
