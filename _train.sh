#!/usr/bin/env bash
# Trains: sets up .venv on first use, then runs GA3C with the given arguments (KEY=VALUE, --config FILE, --help).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
exec .venv/bin/python -m ga3c "$@"
