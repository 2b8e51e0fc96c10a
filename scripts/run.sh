#!/usr/bin/env bash
# Set up (idempotent) and serve the playground on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT (default 127.0.0.1:7860).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python app.py
