#!/usr/bin/env bash
# llama.cpp beside the playground on this CPU, measured interleaved in one window: llama-bench's tg128 and pp512
# at F32, Q8_0 and Q4_1 against `python -m playground run` at fp32, int8 and 4-bit on JAX and PyTorch eager and
# torch.compile at fp32, each row with its share of the memory roofline. Not part of setup and not run in CI.
#
# The first run builds llama-bench and llama-quantize from the llama-cpp-python source distribution on PyPI
# (its vendored llama.cpp; cmake and a C++ compiler) into LLAMA_CPP_DIR, outside the repository. That takes
# minutes on a quiet 2-core machine and most of an hour on a loaded one. Then it makes F32 and Q8_0 files from
# the bundled Q4_1 GGUF with `llama-quantize --allow-requantize`, so both engines decode the same weight values.
#
# Usage: scripts/peer-bench.sh [--json] [--build-only] [--rounds N]
#   LLAMA_CPP_DIR (default: $PLAYGROUND_CACHE or ~/.cache/playground, then /llama.cpp), LLAMA_CPP_PYTHON_VERSION
#   (default 0.3.36), THREADS (default: the CPU count), PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[[ -x "$python" ]] || python=python3
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
dir=${LLAMA_CPP_DIR:-${PLAYGROUND_CACHE:-$HOME/.cache/playground}/llama.cpp}
bin="$dir/build-$version/bin"
build_only=0
args=()
while (($#)); do
  case $1 in
    --build-only) build_only=1 ;;
    --json) args+=(--json) ;;
    --rounds) args+=(--rounds "$2"); shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown option $1 (allowed: --json, --build-only, --rounds N)" >&2; exit 2 ;;
  esac
  shift
done

build() {
  for tool in cmake c++; do
    command -v "$tool" > /dev/null || { echo "error: building llama.cpp needs $tool on PATH" >&2; exit 2; }
  done
  mkdir -p "$dir"
  local sdist="$dir/llama_cpp_python-$version.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    echo "peer-bench: downloading llama-cpp-python $version's source distribution" >&2
    "$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$dir" >&2
  fi
  [[ -d "$dir/llama_cpp_python-$version" ]] || tar -xzf "$sdist" -C "$dir"
  local source="$dir/llama_cpp_python-$version/vendor/llama.cpp"
  local generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  echo "peer-bench: building llama-bench and llama-quantize in $dir (minutes on 2 cores)" >&2
  cmake -S "$source" -B "$dir/build-$version" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > /dev/null
  cmake --build "$dir/build-$version" --target llama-bench llama-quantize -j "$(nproc)" >&2
}

[[ -x "$bin/llama-bench" && -x "$bin/llama-quantize" ]] || build
((build_only)) && { echo "peer-bench: tools in $bin" >&2; exit 0; }
exec "$python" -m playground.tools.peer_bench --llama-bin "$bin" --files "$dir" "${args[@]}"
