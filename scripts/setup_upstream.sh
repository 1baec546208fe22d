#!/usr/bin/env bash
# Set up the contract-test interpreter <repo>/.venv-upstream: what the pinned upstream sources
# (../shared/upstream: Megatron-Bridge, Megatron-LM, NeMo RL) need to import and run on a CPU.
# The upstream packages are NOT installed: tests/contract/upstream.py puts their source on sys.path.
#
#   bash scripts/setup_upstream.sh        # idempotent: a second run only checks and returns
#
# Python 3.11 (NEMOTRON_PYTHON, default python3): the CPU torch build this project installs exists for 3.11
# only; tests/contract/boot.py says what that means for upstream code that declares 3.12/3.13.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV="$ROOT/.venv-upstream"
PY="$VENV/bin/python"
REQ=tests/contract/requirements.txt
STAMP="$VENV/.nemotron-setup"
step() { printf '[setup-upstream] %s\n' "$*"; }

want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && "$PY" -c 'import torch, transformers, pydantic' 2>/dev/null; then
  step "up to date ($VENV)"
  exit 0
fi
if [[ -d "$VENV" ]] && ! "$PY" -c 'import pip' >/dev/null 2>&1; then rm -rf "$VENV"; fi
[[ -d "$VENV" ]] || { step "creating $VENV"; "${NEMOTRON_PYTHON:-python3}" -m venv "$VENV"; }
rm -f "$STAMP"
step "installing $REQ"
"$PY" -m pip --quiet --disable-pip-version-check install -r "$REQ" 2>&1 \
  | { grep -v -E "^WARNING: Location '.*' is ignored" || true; }
"$PY" -c 'import torch, transformers, pydantic' || { echo "[setup-upstream] error: the contract interpreter does not import torch/transformers/pydantic" >&2; exit 1; }
printf '%s\n' "$want" > "$STAMP"
step "done"
