#!/usr/bin/env bash
# Members x learner threads on a machine with many cores (issue 25, "thread and core placement"), in one call: the
# `cpu` preset's members side by side (`bench --mode placement`), then one member on 8 cores with 1, 2, 4 and 8
# learner threads (its native env steps on all 8 either way), so the learner's threads and the env's cores are told
# apart. ROLLOUTS (default 8) timed per configuration after a warm-up; PLACEMENTS overrides the placement list.
# What comes back in $OUT: machine.txt (CPU, memory, versions), placement.csv, train_8cores_t{T}.csv, and bench.log.
# With .whl/ (wheels of packages the machine lacks, see the device README) they are installed to /tmp/site first.
# docs/training.md ("The cpu preset") has what such a call found.
set -u
OUT=${OUT:-/tmp/placement_check}
ROLLOUTS=${ROLLOUTS:-8}
PLACEMENTS=${PLACEMENTS:-1x1 1x2 1x4 1x8 2x8 4x4 8x2 16x1}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
mark() { echo "== [$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/bench.log"; }
{
    lscpu | grep -E "Model name|^CPU\(s\)|^Model:|Flags" | cut -c1-200; free -g | head -2
    python3 -c "import torch, numba, numpy, stable_baselines3 as s; print('torch', torch.__version__, 'numba', numba.__version__,
'numpy', numpy.__version__, 'sb3', s.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
CORES=$(nproc)
mark "placement on $CORES cores: $PLACEMENTS"
# shellcheck disable=SC2086  # PLACEMENTS is a list of words
python3 -m mission_gym.scripts.bench --mode placement --preset cpu --device cpu --rollouts "$ROLLOUTS" \
    --placements $PLACEMENTS --csv "$OUT/placement.csv" 2>&1 | tee -a "$OUT/bench.log"
LAST=$((CORES < 8 ? CORES - 1 : 7))
for t in 1 2 4 8; do
    [ "$t" -gt $((LAST + 1)) ] && break
    mark "one member on cores 0-$LAST, $t learner thread(s)"
    taskset -c "0-$LAST" python3 -m mission_gym.scripts.bench --mode train --preset cpu --device cpu \
        --num-threads "$t" --rollouts "$ROLLOUTS" --csv "$OUT/train_8cores_t$t.csv" 2>&1 | tee -a "$OUT/bench.log"
done
mark done
