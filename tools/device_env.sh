# Sourced by the device scripts (tools/gpu_check.sh, tools/placement_check.sh): makes $OUT, puts this checkout on
# PYTHONPATH and, with .whl/ (wheels of packages the device machine lacks, see the device README), installs them to
# /tmp/site first; T0 is when it ran.
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/site"
fi
T0=$(date +%s)
