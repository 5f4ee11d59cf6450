#!/usr/bin/env bash
# A GPU preset's whole run in one device call (issue 47), for a machine with one CUDA GPU and 16 cores:
#   1. `bench --mode population` of the preset at BENCH_MEMBERS (default: 2 and the preset's population size, its
#      last and first stage), each beside its games alone on the same cores (the ceiling);
#   2. `train_ppo --preset PRESET --seed SEED` from scratch (or `--resume` of the run carried in .gpu_resume/, see
#      below) until it ends or RUN_SECONDS pass (then Ctrl-C: every member keeps a checkpoint), with py-spy sampling
#      the trainer's process for PROFILE_S seconds twice (the first stage from 40 s, the last stage once it starts);
#   3. `evaluate RUN --episodes 1000` on the held-out seeds when the run finished (by the defenders' modes).
# What comes back in $OUT (8 files at most):
#   machine.txt  CPU, memory, GPU, library versions, and "mark" lines saying when each step began;
#   bench.txt    the bench's table and its CSV rows;
#   run.log      the run's output, each line prefixed with the seconds since it started;
#   smi.csv      nvidia-smi every 0.5 s: timestamp, GPU utilisation %, memory used and total (MiB);
#   profile.tgz  py-spy's raw samples (collapsed stacks, wall-clock with --idle) of the two stages;
#   eval.txt / eval.json   the held-out evaluation;
#   run.tgz      the run directory without TensorBoard events and frames (the survivors' models and checkpoints,
#                every member's log, progress.csv and scores): unpack it into .gpu_resume/ to resume it next call.
# With .whl/ (wheels of packages the machine lacks, see the device README) they are installed to /tmp/site first.
# RUN_ARGS adds train_ppo flags to a new run, e.g. RUN_ARGS="--hyperparams population.cuts[2].n_envs=512" (the last
# stage's two members with 512 envs each).
set -u
OUT=${OUT:-/tmp/gpu_check}
PRESET=${PRESET:-heavy}
RUN_SECONDS=${RUN_SECONDS:-420}
SEED=${SEED:-0}
RUNS=${RUNS:-/tmp/gpu_runs}
DEVICE=${DEVICE:-cuda}
PROFILE_S=${PROFILE_S:-25}
RUN_ARGS=${RUN_ARGS:-}
NAME=$(basename "${PRESET%.yaml}")_s$SEED
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
mark() { echo "mark $(date +%s.%N) $*" >>"$OUT/machine.txt"; echo "== [$(($(date +%s) - T0)) s] $*"; }
PYSPY=$(command -v py-spy || ls /tmp/site/bin/py-spy 2>/dev/null || true)

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
    echo "preset $PRESET seed $SEED run_seconds $RUN_SECONDS py-spy ${PYSPY:-none}"
} 2>&1 | tee "$OUT/machine.txt"

if [ "${BENCH_MEMBERS-x}" != "" ]; then
    size=$(python3 -c "from mission_gym.plan.presets import load_preset; print(load_preset('$PRESET').population.size)")
    mark bench
    # shellcheck disable=SC2086
    timeout "${BENCH_S:-150}" python3 -m mission_gym.scripts.bench --mode population --preset "$PRESET" --device "$DEVICE" \
        --rollouts 3 --members ${BENCH_MEMBERS:-2 $size} --learners batched --csv /tmp/population.csv >"$OUT/bench.txt" 2>&1
    echo "bench rc $?"; cat /tmp/population.csv >>"$OUT/bench.txt" 2>/dev/null; tail -n 8 "$OUT/bench.txt"
fi

profile() {  # profile NAME: py-spy on the trainer for PROFILE_S seconds (wall clock: --idle), without pausing it
    [ -n "$PYSPY" ] || return 0
    local pid p
    for p in $(pgrep -f "mission_gym.scripts.train_ppo"); do  # the trainer itself, not `timeout` around it
        case $(cat "/proc/$p/comm" 2>/dev/null) in python*) pid=$p; break ;; esac
    done
    [ -n "$pid" ] && timeout $((PROFILE_S + 20)) "$PYSPY" record --pid "$pid" --duration "$PROFILE_S" --rate 100 --idle \
        --nonblocking --format raw -o "/tmp/prof_$1.txt" >/dev/null 2>&1
}

mark run-start
if [ -d .gpu_resume/"$NAME" ] && [ ! -d "$RUNS/$NAME" ]; then mkdir -p "$RUNS" && cp -r .gpu_resume/"$NAME" "$RUNS/"; fi
if [ -f "$RUNS/$NAME/config.yaml" ]; then
    cmd=(python3 -m mission_gym.scripts.train_ppo --resume "$NAME" --runs-dir "$RUNS" --no-progress)
else
    # shellcheck disable=SC2206
    cmd=(python3 -m mission_gym.scripts.train_ppo --preset "$PRESET" --seed "$SEED" --runs-dir "$RUNS" --run-name "$NAME"
         --no-progress $RUN_ARGS)
fi
echo "${cmd[*]}" >>"$OUT/machine.txt"
START=${EPOCHREALTIME/./}
(sleep 40; profile first) &
FIRST=$!
(tail -F -n +1 "$OUT/run.log" 2>/dev/null | grep -q -m 1 "train to the end" && sleep 10 && profile last) &
LAST=$!
timeout -s INT -k 45 "$RUN_SECONDS" "${cmd[@]}" 2>&1 \
    | while IFS= read -r line; do now=${EPOCHREALTIME/./}; printf '%6d %s\n' $(((now - START) / 1000000)) "$line"; done \
    >"$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "run rc $rc after $(((${EPOCHREALTIME/./} - START) / 1000000)) s" | tee -a "$OUT/machine.txt"
mark run-end
tail -n 12 "$OUT/run.log"
for job in $FIRST $LAST; do pkill -P "$job" 2>/dev/null; kill "$job" 2>/dev/null; done
tar czf "$OUT/profile.tgz" -C /tmp $(cd /tmp && ls prof_*.txt 2>/dev/null) 2>/dev/null || rm -f "$OUT/profile.tgz"

if [ "$rc" = 0 ]; then
    mark eval
    python3 -m mission_gym.scripts.evaluate "$NAME" --runs-dir "$RUNS" --episodes "${EVAL_EPISODES:-1000}" \
        --json "$OUT/eval.json" >"$OUT/eval.txt" 2>&1
    echo "eval rc $?"; cat "$OUT/eval.txt"
    mark eval-end
fi

# the checkpoints of members cut before the stop are not needed to resume or to judge the run; leave them out
python3 - "$RUNS" "$NAME" <<'EOF' >/tmp/exclude.txt
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
tar czf "$OUT/run.tgz" --exclude-from=/tmp/exclude.txt --exclude=frames --exclude=tb -C "$RUNS" "$NAME" 2>/dev/null
if [ "$(stat -c %s "$OUT/run.tgz")" -gt 15000000 ]; then  # too big to come back: the models and logs, no checkpoints
    tar czf "$OUT/run.tgz" --exclude-from=/tmp/exclude.txt --exclude=checkpoints --exclude=frames --exclude=tb \
        -C "$RUNS" "$NAME" 2>/dev/null
fi
ls -la "$OUT"
