#!/usr/bin/env bash
# rl-baselines3-zoo's own `python -m rl_zoo3.train --algo ppo --env ID` against `train_ppo --env ID` (no other flag),
# seed by seed, one run at a time, each timed whole (/usr/bin/time -v) and evaluated on the same 20 held-out episodes.
#
#   python3 -m venv /tmp/zoo && /tmp/zoo/bin/pip install torch==2.13.0 rl_zoo3 'gymnasium[mujoco]'   # its own venv
#   tools/vs_zoo.sh /tmp/zoo/bin/python /tmp/vs Hopper-v5 0 1          # TASK SEED...
#
# Environment: ZOO_CPUS / OURS_CPUS pin each trainer (taskset -c; default: not pinned); ZOO_ARGS adds rl_zoo3.train
# flags (e.g. "-n 1000000" for a budget other than its own); ZOO_PACKAGES names modules that register the task for the
# zoo, in training and evaluation (gymnasium_robotics for the Dict task, PointMaze_UMazeDense-v3); OURS_ARGS adds train_ppo flags; PYTHON is Mission Gym's interpreter
# (default .venv/bin/python). Rows are appended to OUT/results.csv: task, seed, trainer, wall seconds, peak RSS (MB),
# held-out mean return and its standard deviation. The zoo's v5 MuJoCo entries are its v4 ones (tools/zoo_peer.py).
set -u
ZOO=$1
OUT=$2
TASK=$3
shift 3
PYTHON=${PYTHON:-.venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
[ -f "$OUT/ppo_v5.yml" ] || "$ZOO" "$HERE/zoo_peer.py" conf "$OUT/ppo_v5.yml"
[ -f "$OUT/results.csv" ] || echo "task,seed,trainer,wall_s,peak_rss_mb,mean_return,std_return" > "$OUT/results.csv"
tag=${TASK//\//-}

pinned() {  # pinned CPUS CMD...: CMD under taskset when CPUS is set
  local cpus=$1
  shift
  if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

row() {  # row SEED TRAINER TIMEFILE EVALJSON
  local wall rss ret
  wall=$(awk -F': ' '/Elapsed \(wall/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$3")
  rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2/1024}' "$3")
  ret=$("$PYTHON" -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['mean_return']:.2f},{d['std_return']:.2f}\")" "$4")
  echo "$TASK,$1,$2,$wall,$rss,$ret" >> "$OUT/results.csv"
}

for seed in "$@"; do
  zoo_dir="$OUT/zoo_${tag}_s$seed"
  # shellcheck disable=SC2086  # ZOO_ARGS holds several flags
  pinned "${ZOO_CPUS:-}" /usr/bin/time -v -o "$zoo_dir.time" "$ZOO" -m rl_zoo3.train --algo ppo --env "$TASK" \
    -conf "$OUT/ppo_v5.yml" --seed "$seed" -f "$zoo_dir" ${ZOO_PACKAGES:+--gym-packages $ZOO_PACKAGES} ${ZOO_ARGS:-} \
    > "$zoo_dir.log" 2>&1
  # shellcheck disable=SC2086
  pinned "${ZOO_CPUS:-}" "$ZOO" "$HERE/zoo_peer.py" eval "$zoo_dir/ppo/${tag}_1" "$TASK" --episodes 20 \
    ${ZOO_PACKAGES:+--gym-packages $ZOO_PACKAGES} 2>/dev/null | tail -1 > "$zoo_dir.eval.json"
  row "$seed" rl-zoo3 "$zoo_dir.time" "$zoo_dir.eval.json"

  ours="ours_${tag}_s$seed"
  # shellcheck disable=SC2086
  pinned "${OURS_CPUS:-}" /usr/bin/time -v -o "$OUT/$ours.time" "$PYTHON" -m mission_gym.scripts.train_ppo --env "$TASK" \
    --seed "$seed" --run-name "$ours" --runs-dir "$OUT/runs" --no-progress ${OURS_ARGS:-} > "$OUT/$ours.log" 2>&1
  pinned "${OURS_CPUS:-}" "$PYTHON" -m mission_gym.scripts.evaluate "$OUT/runs/$ours" --episodes 20 --json \
    > "$OUT/$ours.eval.json"
  row "$seed" mission_gym "$OUT/$ours.time" "$OUT/$ours.eval.json"
done
column -s, -t "$OUT/results.csv"
