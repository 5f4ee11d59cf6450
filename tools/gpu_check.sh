#!/usr/bin/env bash
# The GPU measurement of the GPU presets in one call, for a machine with one CUDA GPU and 16 cores: the `auto` preset
# (beast there) trains seed 0 from scratch for RUN_SECONDS (default 460), then is interrupted (Ctrl-C: every member
# saves a checkpoint, so `train_ppo --resume` can finish the run elsewhere). What comes back in $OUT:
#   machine.txt  CPU, memory, GPU, library versions, and "mark" lines saying when each step began;
#   run.log      the launcher's output, each line prefixed with the seconds since the run started;
#   smi.csv      nvidia-smi every 0.5 s: timestamp, GPU utilisation %, memory used and total (MiB);
#   apps.txt     nvidia-smi every 2 s: each CUDA process's memory (MiB), prefixed with the Unix time;
#   run.tgz      the run directory without frames and TensorBoard events: every member's log, progress.csv and cut
#                scores, and the models and checkpoints of the members still training at the stop (not those of
#                members already cut, to keep it small).
# With .whl/ (wheels of packages the machine lacks, see the device README) they are installed to /tmp/site first.
# docs/gpu-guide.md ("Measured on one GPU") has what such calls found and how each figure was read.
set -u
OUT=${OUT:-/tmp/gpu_check}
RUN_SECONDS=${RUN_SECONDS:-460}
PRESET=${PRESET:-auto}
SEED=${SEED:-0}
RUNS=${RUNS:-/tmp/gpu_runs}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
mark() { echo "mark $(date +%s.%N) $*" >>"$OUT/machine.txt"; echo "== [$(($(date +%s) - T0)) s] $*"; }

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 500 \
        >"$OUT/smi.csv" &
    SMI=$!
    (while sleep 2; do
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed "s/^/$(date +%s) /"
    done) >"$OUT/apps.txt" &
    APPS=$!
    trap 'kill $SMI $APPS 2>/dev/null' EXIT
fi

{
    lscpu | grep -E "Model name|^CPU\(s\)"; free -g | head -2; nvidia-smi -L 2>/dev/null
    python3 -c "import torch, numba, numpy, stable_baselines3 as s; print('torch', torch.__version__, 'numba', numba.__version__,
'numpy', numpy.__version__, 'sb3', s.__version__, 'cuda', torch.cuda.is_available())"
    python3 -m mission_gym.scripts.memory_helper --preset beast --device cuda 2>&1 | tail -n 4
} 2>&1 | tee "$OUT/machine.txt"

mark run-start
train() {  # train for $1 seconds with the flags after it; the output, timed from the start, goes to run.log
    local seconds=$1; shift
    timeout -s INT -k 90 "$seconds" python3 -m mission_gym.scripts.train_ppo --preset "$PRESET" --seed "$SEED" \
        --runs-dir "$RUNS" --run-name "run_s$SEED" --no-progress "$@" 2>&1 \
        | while IFS= read -r line; do now=${EPOCHREALTIME/./}; printf '%6d %s\n' $(((now - START) / 1000000)) "$line"; done \
        >>"$OUT/run.log"
    return "${PIPESTATUS[0]}"
}
rm -rf "$RUNS/run_s$SEED"
START=${EPOCHREALTIME/./}
train "$RUN_SECONDS"
RC=$?
SPENT=$(((${EPOCHREALTIME/./} - START) / 1000000))
if [ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SPENT" -lt 60 ]; then  # failed at once: once more without MPS
    mark "rc $RC after $SPENT s: again with --no-mps"
    rm -rf "$RUNS/run_s$SEED"
    train $((RUN_SECONDS - SPENT)) --no-mps
    RC=$?
fi
echo "rc $RC"
mark run-end
tail -n 30 "$OUT/run.log"
# the checkpoints of members cut before the stop are not needed to resume; leave them out
python3 - "$RUNS" "run_s$SEED" <<'EOF' >/tmp/exclude.txt
import json, pathlib, sys
run = pathlib.Path(sys.argv[1]) / sys.argv[2]
state = json.loads((run / "population.json").read_text()) if (run / "population.json").exists() else {}
kept = set(state["cuts"][-1]["kept"]) if state.get("cuts") else set()
for d in sorted((run / "members").glob("m*")):
    if d.name not in kept:
        for name in ("checkpoints", "best_model.zip", "best_vecnormalize.pkl"):
            print(f"{sys.argv[2]}/members/{d.name}/{name}")
EOF
tar czf "$OUT/run.tgz" --exclude-from=/tmp/exclude.txt --exclude=frames --exclude=tb -C "$RUNS" "run_s$SEED" 2>/dev/null
if [ "$(stat -c %s "$OUT/run.tgz")" -gt 15000000 ]; then  # too big to come back: the logs and tables alone
    tar czf "$OUT/run.tgz" --exclude='*.zip' --exclude='*.pkl' --exclude=frames --exclude=tb -C "$RUNS" "run_s$SEED"
fi
ls -la "$OUT"
