#!/usr/bin/env bash
# Set up (idempotent, with test tools), lint, type-check, and run the whole test suite, slow integration tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
