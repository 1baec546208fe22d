"""Runtime entry of `nemotron ultra3 data prep rl`: ``python run.py --config train.yaml``.

The runtime of this stage (prompt JSONL for NeMo RL's math environment) arrives with a later issue; its configs (default.yaml, tiny.yaml)
already carry the keys it will read. Until then this script says so in one line and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="nemotron ultra3 data prep rl runtime entry")
    parser.add_argument("--config", required=True, type=Path, help="compiled train.yaml")
    parser.parse_known_args(argv)
    print("ultra3 data prep rl: this stage's runtime (prompt JSONL for NeMo RL's math environment) is not available yet in this version",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
