"""Runtime entry of `nemotron ultra3 data prep sft`: python run.py --config train.yaml

All logic lives in nemotron.data.sft; nemotron.data.entry loads the compiled config and maps errors to exit codes
(0 done, 2 config/input problem, 1 runtime failure, 130 interrupted).
"""

from __future__ import annotations

import sys

from nemotron.data.entry import run

if __name__ == "__main__":
    sys.exit(run("nemotron.data.sft", "Render, mask and pack chat data into Megatron-Bridge packed Parquet."))
