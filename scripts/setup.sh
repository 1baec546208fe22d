#!/usr/bin/env bash
# Set up the project's virtual environment in <repo>/.venv and install nemotron (editable).
#
#   bash scripts/setup.sh            # idempotent: a second run only checks and returns
#
# The base install runs every command but local training and quantization: submission (NeMo-Run) and
# data prep (Ray, the tokenizers). Those two need the `local` extra (torch, transformers, Model Optimizer).
#
# Environment:
#   NEMOTRON_PYTHON       interpreter used to create the venv (default: python3)
#   NEMOTRON_EXTRAS       extras to install, comma-separated (default: all = local,wandb,test; empty: the base
#                         install only, no torch). A venv set up with `all` also serves any smaller request.
#   NEMOTRON_TORCH_SPEC   what to install for torch before the project when the extras include torch
#                         (default: torch==2.13.0). Set it empty to skip; a torch already in the venv that
#                         satisfies the project's range (torch>=2.6,<3) is always kept.
#   NEMOTRON_SETUP_FORCE  set to 1 to reinstall even if nothing changed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
PYTHON="${NEMOTRON_PYTHON:-python3}"
TORCH_SPEC="${NEMOTRON_TORCH_SPEC-torch==2.13.0}"
EXTRAS="${NEMOTRON_EXTRAS-all}"
EXTRAS="${EXTRAS// /}"
case ",$EXTRAS," in
  *,all,*|*,local,*) WANT_TORCH=1 ;;
  *) WANT_TORCH=0 ;;
esac
[[ $WANT_TORCH == 1 ]] || TORCH_SPEC=""
STAMP="$VENV/.nemotron-setup"

step() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python >= 3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); nemotron needs Python >= 3.11"

# 1. the venv (recreated if a previous attempt left it without a working interpreter)
if [[ -d "$VENV" ]] && ! "$PY" -c 'import pip' >/dev/null 2>&1; then
  step "removing broken $VENV"
  rm -rf "$VENV"
fi
if [[ ! -d "$VENV" ]]; then
  step "creating $VENV"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    # Debian/Ubuntu ship venv's ensurepip separately
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      step "installing python3-venv (apt)"
      [[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]] \
        || apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$PYTHON" -m venv "$VENV"
    else
      die "'$PYTHON -m venv' failed; install your distribution's venv package (e.g. python3-venv)"
    fi
  fi
fi

# Skip the pip work when nothing that decides it has changed since the last good run.
hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
want="$hash extras=${EXTRAS} torch=${TORCH_SPEC}"
have_stamp="$(cat "$STAMP" 2>/dev/null || true)"
covered=0  # the venv already holds this request: the same one, or `all` (what test.sh installs) for the same files
[[ -n "$have_stamp" && ( "$have_stamp" == "$want" || "$have_stamp" == "$hash extras=all "* ) ]] && covered=1
if [[ "${NEMOTRON_SETUP_FORCE:-0}" != 1 && $covered == 1 ]] \
   && "$PY" -c 'import nemotron' >/dev/null 2>&1 && [[ -x "$VENV/bin/nemotron" ]]; then
  step "up to date ($VENV)"
  exit 0
fi
rm -f "$STAMP"

# pip, quiet, without the one warning per package that a find-links/extra-index folder lacking it prints
pip_q() {
  local rc=0
  "$PY" -m pip --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v -E "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; } || rc=$?
  return "$rc"
}

step "upgrading pip"
pip_q install --upgrade pip

# 2. torch first (only for the local extra): an exact pin lets a local CPU wheel win over a multi-GB CUDA download
if [[ $WANT_TORCH == 0 ]]; then
  step "extras '${EXTRAS:-none}': no torch (local training and quantization need NEMOTRON_EXTRAS=local or all)"
elif have=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
   && "$PY" - "$have" <<'PYEOF'
import sys
v = tuple(int(p) for p in sys.argv[1].split("+")[0].split(".")[:2])
sys.exit(0 if (2, 6) <= v < (3, 0) else 1)
PYEOF
then
  step "torch $have already installed"
elif [[ -n "$TORCH_SPEC" ]]; then
  step "installing $TORCH_SPEC"
  pip_q install "$TORCH_SPEC"
else
  step "NEMOTRON_TORCH_SPEC is empty: torch comes from the project's requirements"
fi

# 3. the project, editable, with the extras asked for
target="."
[[ -n "$EXTRAS" ]] && target=".[${EXTRAS}]"
step "installing nemotron-cli${target#.} (editable)"
pip_q install -e "$target"

"$PY" -c 'import nemotron' || die "nemotron does not import after install"
printf '%s\n' "$want" > "$STAMP"
step "done: $("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'torch missing'); activate with: source .venv/bin/activate"
