#!/usr/bin/env bash
# A short GA3C training on the GPU: prints the benchmark table (PPS, TPS, steps/s) and its JSON line.
# Needs a CUDA build of torch: on a fresh machine run `TORCH_SPEC=torch ./scripts/gpu_check.sh` (the default
# torch==2.13.0 may resolve to a CPU build on machines that keep one locally).
# Extra arguments go to scripts/benchmark.py, e.g. AGENTS=64 ENVS_PER_AGENT=8 --seconds 60.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if ! .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: torch sees no CUDA GPU here (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))" >&2
  exit 1
fi
.venv/bin/python -c "import torch; print('GPU:', torch.cuda.get_device_name(0))"
exec .venv/bin/python scripts/benchmark.py --config configs/cpu.toml DEVICE=cuda:0 PRECISION=bf16 TORCH_THREADS=0 \
  --seconds 30 --warmup 10 --env-seconds 10 --profile "$@"
