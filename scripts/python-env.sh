#!/usr/bin/env bash
# Python environments from pinned requirements.
#
#   scripts/python-env.sh            .venv/: the reference stack of tools/python/requirements.txt
#                                    (torch, transformers, tokenizers, ...). Only the explicit
#                                    generators and training need it; `make test` does not.
#   scripts/python-env.sh --deploy   .venv-deploy/: the chart tests' stack of
#                                    tools/python/requirements-deploy.txt (helm-python-sdk,
#                                    kubernetes-validate). tests/deploy/test_chart.py runs this
#                                    itself; quiet, and a no-op (well under a second) when the
#                                    venv already holds those pins.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--deploy" ]; then
  venv=.venv-deploy
  requirements=tools/python/requirements-deploy.txt
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  stamp="$venv/.requirements.sha256"
  [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
  mkdir -p "$venv"
  # Ignored by git from the inside (as Python 3.13's venv does), whatever the checkout ignores.
  echo '*' > "$venv/.gitignore"
  # One installer at a time (several test runs may start together); the winner's work is reused.
  exec 9>"$venv/.lock"
  flock 9
  [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
  # A fresh venv (an earlier one may be half made, or made by a Python that is gone), by the
  # system's Python where there is one.
  find "$venv" -mindepth 1 -maxdepth 1 ! -name .lock ! -name .gitignore -exec rm -rf {} +
  python=python3
  [ -x /usr/bin/python3 ] && python=/usr/bin/python3
  "$python" -m venv "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check --no-input -r "$requirements" \
       > "$venv/.install.log" 2>&1; then
    echo "python-env: pip could not install $requirements (see $venv/.install.log):" \
      "$(tail -n 1 "$venv/.install.log")" >&2
    exit 1
  fi
  "$venv/bin/python" -c "import helm_python, kubernetes_validate"
  echo "$want" > "$stamp"
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -r tools/python/requirements.txt
.venv/bin/python -c "import torch, transformers; print('python env ok: torch', torch.__version__, 'transformers', transformers.__version__)"
