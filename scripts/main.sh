#!/usr/bin/env bash
# Set up the environment, then run the main job: data prep for pretraining with the `tiny` config
# (local Ray, offline data and tokenizer). Extra arguments go to the command, e.g. key=value overrides
# or --dry-run.
#
#   bash scripts/main.sh [ARGS...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# data prep needs only the base install (no torch); a venv that scripts/test.sh set up with every extra is kept
NEMOTRON_EXTRAS="${NEMOTRON_EXTRAS-}" bash scripts/setup.sh
exec .venv/bin/nemotron ultra3 data prep pretrain -c tiny "$@"
