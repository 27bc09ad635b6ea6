#!/usr/bin/env bash
# Creates .venv/ with the pinned reference stack of tools/python/requirements.txt (torch,
# transformers, tokenizers, ...). Only the explicit generators and training need it; `make test`
# does not.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -r tools/python/requirements.txt
.venv/bin/python -c "import torch, transformers; print('python env ok: torch', torch.__version__, 'transformers', transformers.__version__)"
