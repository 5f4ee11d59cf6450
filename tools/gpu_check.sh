#!/usr/bin/env bash
# The GPU measurements of issue 40 in one call, for a machine with one CUDA GPU and 16 cores:
#   1. a smoke test of the batched learner on CUDA (a 2-member population of `quick`, its graphs captured);
#   2. `bench --mode population` of the `beast` recipe, 1 to 32 members in one batched learner (BENCH_LEARNERS adds
#      `processes` for the members side by side through MPS, as before), steps/s in all and per member, GPU memory;
#   3. `train_ppo --preset beast --seed SEED` from scratch for at most RUN_SECONDS (default 290), then Ctrl-C, so
#      `train_ppo --resume` can finish it elsewhere if it has not finished.
# What comes back in $OUT:
#   machine.txt   CPU, memory, GPU, library versions, and "mark" lines saying when each step began;
#   smoke.log     the smoke test's output;  population.csv / bench.log  the bench's rows and table;
#   run.log       the run's output, each line prefixed with the seconds since it started;
#   smi.csv       nvidia-smi every 0.5 s: timestamp, GPU utilisation %, memory used and total (MiB);
#   run.tgz       the run directory without TensorBoard events and frames (the survivors' models and checkpoints,
#                 every member's log, progress.csv and scores).
# With .whl/ (wheels of packages the machine lacks, see the device README) they are installed to /tmp/site first.
set -u
OUT=${OUT:-/tmp/gpu_check}
RUN_SECONDS=${RUN_SECONDS:-290}
SEED=${SEED:-0}
RUNS=${RUNS:-/tmp/gpu_runs}
BENCH_LEARNERS=${BENCH_LEARNERS:-batched}
DEVICE=${DEVICE:-cuda}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
mark() { echo "mark $(date +%s.%N) $*" >>"$OUT/machine.txt"; echo "== [$(($(date +%s) - T0)) s] $*"; }

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 500 \
        >"$OUT/smi.csv" &
    SMI=$!
    trap 'kill $SMI 2>/dev/null' EXIT
fi
{
    lscpu | grep -E "Model name|^CPU\(s\)"; free -g | head -2; nvidia-smi -L 2>/dev/null
    python3 -c "import torch, numba, numpy, stable_baselines3 as s; print('torch', torch.__version__, 'numba', numba.__version__,
'numpy', numpy.__version__, 'sb3', s.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/machine.txt"

mark smoke
timeout "${SMOKE_S:-60}" python3 -m mission_gym.scripts.train_ppo --preset quick --timesteps 4096 --device "$DEVICE" --runs-dir /tmp/smoke \
    --run-name s --no-progress --hyperparams "population={size: 2, cuts: [{at: 2048, keep: 1}], episodes: 4, learner: batched}" \
    >"$OUT/smoke.log" 2>&1
echo "smoke rc $?"; tail -n 4 "$OUT/smoke.log"

mark bench
# shellcheck disable=SC2086
timeout "${BENCH_S:-120}" python3 -m mission_gym.scripts.bench --mode population --preset beast --device "$DEVICE" --rollouts 3 \
    --members ${BENCH_MEMBERS:-1 2 4 8 16 32} --learners $BENCH_LEARNERS --csv "$OUT/population.csv" 2>&1 | tee "$OUT/bench.log" | tail -n 16

mark run-start
rm -rf "$RUNS/beast_s$SEED"
START=${EPOCHREALTIME/./}
timeout -s INT -k 45 "$RUN_SECONDS" python3 -m mission_gym.scripts.train_ppo --preset beast --seed "$SEED" \
    --runs-dir "$RUNS" --run-name "beast_s$SEED" --no-progress 2>&1 \
    | while IFS= read -r line; do now=${EPOCHREALTIME/./}; printf '%6d %s\n' $(((now - START) / 1000000)) "$line"; done \
    >"$OUT/run.log"
echo "run rc ${PIPESTATUS[0]} after $(((${EPOCHREALTIME/./} - START) / 1000000)) s"
mark run-end
tail -n 25 "$OUT/run.log"
# the checkpoints of members cut before the stop are not needed to resume or to judge the run; leave them out
python3 - "$RUNS" "beast_s$SEED" <<'EOF' >/tmp/exclude.txt
import json, pathlib, sys
run = pathlib.Path(sys.argv[1]) / sys.argv[2]
state = json.loads((run / "population.json").read_text()) if (run / "population.json").exists() else {}
kept = set(state["cuts"][-1]["kept"]) if state.get("cuts") else {m["name"] for m in state.get("members", [])}
for d in sorted((run / "members").glob("m*")):
    if d.is_dir() and d.name not in kept:
        for name in ("checkpoints", *(f"{m}{s}" for m in ("best_model", "final_model")
                     for s in (".zip", ".safetensors", ".agent.json")), "best_vecnormalize.pkl", "final_vecnormalize.pkl"):
            print(f"{sys.argv[2]}/members/{d.name}/{name}")
EOF
tar czf "$OUT/run.tgz" --exclude-from=/tmp/exclude.txt --exclude=frames --exclude=tb -C "$RUNS" "beast_s$SEED" 2>/dev/null
if [ "$(stat -c %s "$OUT/run.tgz")" -gt 15000000 ]; then  # too big to come back: the models and logs, no checkpoints
    tar czf "$OUT/run.tgz" --exclude-from=/tmp/exclude.txt --exclude=checkpoints --exclude=frames --exclude=tb \
        -C "$RUNS" "beast_s$SEED" 2>/dev/null
fi
ls -la "$OUT"
