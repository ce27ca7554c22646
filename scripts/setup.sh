#!/usr/bin/env bash
# Creates .venv on first use and installs ga3c into it (again only when pyproject.toml changes).
# TORCH_SPEC picks the torch build to install first (default torch==2.13.0; use e.g. "torch" for the latest).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GA3C_VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.ga3c-installed"
want=$(cat pyproject.toml | cksum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
echo "[setup] installing torch and ga3c into $VENV (first run only)" >&2
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
"$VENV/bin/python" -m pip install -q -e ".[dev,plot,ray]"
echo "$want" > "$stamp"
