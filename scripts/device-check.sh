#!/usr/bin/env bash
# The device checks, for a GPU machine (under 8 minutes on one GPU): the GPU tests (tests/gpu), then
# `python -m playground bench --suite devices --json`. Everything goes to files in OUTPUT_DIR (default
# device-check/): nvidia-smi.txt, gpu-tests.log, gpu-tests.xml, bench-devices.json, bench-devices.log.
# Usage: scripts/device-check.sh [OUTPUT_DIR]    (after scripts/setup.sh --gpu; PYTHON picks another interpreter,
# PARTS="tests" or PARTS="bench" runs one half, SELECT picks GPU tests by pytest's -k, e.g. SELECT=bundled)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-device-check}
mkdir -p "$out"
python=${PYTHON:-.venv/bin/python}
[[ -x "$python" ]] || python=python3
export PYTHONUNBUFFERED=1
# torch and JAX share the GPU: JAX allocates as it goes instead of taking 75% of the memory at its start
export XLA_PYTHON_CLIENT_PREALLOCATE=false

nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "device-check: nvidia-smi found no GPU; the GPU tests will skip" >&2
"$python" -c "from playground import device; print('device-check: running on', device.current().label)"

parts=${PARTS:-tests bench}
tests_rc=0
bench_rc=0
if [[ " $parts " == *" tests "* ]]; then
start=$SECONDS
# quanto's kernels for this device, built once here: left to the tests, one worker builds them inside a timed test
# while the others wait on its lock (nvcc: minutes)
"$python" -m playground.backends.torch.caches.kernels 2>&1 | tail -1
workers=()
"$python" -c "import xdist" 2> /dev/null && workers=(-n "${WORKERS:-4}")  # one GPU, several test processes
"$python" -m pytest tests/gpu ${SELECT:+-k "$SELECT"} "${workers[@]}" -q -p no:cacheprovider -o addopts="" \
    --timeout "${TEST_TIMEOUT_S:-300}" -rs \
    --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
echo "device-check: GPU tests exited $tests_rc after $((SECONDS - start)) s"
fi

if [[ " $parts " == *" bench "* ]]; then
start=$SECONDS
timeout "${BENCH_TIMEOUT_S:-330}" "$python" -m playground bench --suite devices --json \
    > "$out/bench-devices.json" 2> >(tee "$out/bench-devices.log" >&2)
bench_rc=$?
echo "device-check: devices bench exited $bench_rc after $((SECONDS - start)) s"
[[ -s "$out/bench-devices.json" ]] && "$python" -c "
import json, sys
from playground.tools.bench_devices import format_table
print(format_table(json.load(open(sys.argv[1]))))" "$out/bench-devices.json"
fi
exit $(( tests_rc != 0 ? tests_rc : bench_rc ))
