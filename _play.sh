#!/usr/bin/env bash
# Watches a checkpoint: the same as `python -m ga3c PLAY_MODE=True ...`.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
exec .venv/bin/python -m ga3c PLAY_MODE=True "$@"
