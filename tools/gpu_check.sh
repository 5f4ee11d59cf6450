#!/usr/bin/env bash
# The GPU measurements of the GPU presets in one call (about 7 minutes), for a machine with one CUDA GPU:
#   1. memory_helper --measure on CUDA (the estimator's GPU constants against a real run),
#   2. members of the cpu recipe side by side (bench --mode placement): 1 alone on the GPU, 16 on the GPU through MPS,
#      16 time-sliced (--no-mps), 16 on the CPU cores alone: steps/s (place.csv) and GPU utilisation,
#   3. the `auto` preset's population (beast on 16 cores) training on the GPU for BEAST_SECONDS, then interrupted
#      (its members save their checkpoints): per-member steps/s, GPU utilisation and memory with every member on it.
# nvidia-smi samples utilisation and memory twice a second throughout (smi.csv, apps.txt); the "mark" lines at the end
# of machine.txt say which step ran when. At most 7 files, as the device tool brings back 8.
# Everything lands in $OUT (default /tmp/gpu_check). Wheels in .whl/ (packages the machine lacks) are installed first.
# docs/gpu-guide.md ("Measured on one GPU") has what the last such call found and how each figure was read.
set -u
OUT=${OUT:-/tmp/gpu_check}
BEAST_SECONDS=${BEAST_SECONDS:-240}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/site"
fi
T0=$(date +%s)
mark() { echo "mark $(date +%s.%N) $*" >>"$OUT/machine.txt"; echo "== [$(($(date +%s) - T0)) s] $*"; }

nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 500 \
    >"$OUT/smi.csv" &
SMI=$!
(while sleep 2; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed "s/^/$(date +%s) /"
done) >"$OUT/apps.txt" &
APPS=$!
trap 'kill $SMI $APPS 2>/dev/null' EXIT

{
    lscpu | grep -E "Model name|^CPU\(s\)"; free -g | head -2; nvidia-smi -L
    python3 -c "import torch, numba, numpy, stable_baselines3 as s; print('torch', torch.__version__, 'numba', numba.__version__,
'numpy', numpy.__version__, 'sb3', s.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/machine.txt"

mark memory
python3 -m mission_gym.scripts.memory_helper --measure --preset fast --device cuda 2>&1 | tee "$OUT/memory.txt"

for p in "cuda 1x1" "cuda 16x1" "cuda 16x1 --no-mps" "cpu 16x1"; do
    set -- $p
    mark "placement $*"
    python3 -m mission_gym.scripts.bench --mode placement --preset cpu --device "$1" --placements "$2" ${3:-} \
        --rollouts 8 --csv /tmp/place.csv 2>&1 | tail -n 8
    { echo "# $*"; cat /tmp/place.csv; } >>"$OUT/place.csv"
done

mark beast-start
timeout -s INT -k 60 "$BEAST_SECONDS" python3 -m mission_gym.scripts.train_ppo --preset auto --seed 0 \
    --runs-dir /tmp/gpu_runs --run-name auto_s0 --no-progress >"$OUT/beast.log" 2>&1
echo "rc $?"
mark beast-end
tail -n 25 "$OUT/beast.log"
tar czf "$OUT/run.tgz" --exclude='*.zip' --exclude='*.pkl' --exclude='*.pt' -C /tmp/gpu_runs auto_s0 2>/dev/null
ls -la "$OUT"
