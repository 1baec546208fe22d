"""Runtime entry of `nemotron ultra3 quantize`: ``python run.py --config train.yaml``.

Thin on purpose. It checks its environment before anything heavy: the cluster backend
(``backend: megatron-bridge``) runs inside the NeMo container (stages/images.toml ``nemo``); the
``local`` backend (Model Optimizer on one machine) arrives with the quantization issue. Until then this script says which piece is
missing, in one line, and exits 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tomllib
from pathlib import Path

STAGE = "ultra3 quantize"
FRAMEWORK = "megatron.bridge"  # the cluster runtime's framework module
IMAGE_KEY = "nemo"
CLUSTER_BACKEND = "megatron-bridge"


def _image() -> str:
    table = Path(__file__).resolve().parents[2] / "images.toml"
    try:
        return tomllib.loads(table.read_text(encoding="utf-8"))[IMAGE_KEY]["image"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return IMAGE_KEY


def _backend(config: Path) -> str:
    try:
        import yaml
    except ImportError:
        sys.exit(f"{STAGE}: PyYAML is not importable here, cannot read {config}")
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        sys.exit(f"{STAGE}: cannot read the config {config}: {exc.strerror}")
    return str(data.get("backend") or CLUSTER_BACKEND)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"nemotron {STAGE} runtime entry")
    parser.add_argument("--config", required=True, type=Path, help="compiled train.yaml")
    args, _ = parser.parse_known_args(argv)
    if _backend(args.config) == "local":
        print(f"{STAGE}: the local backend (Model Optimizer on one machine) is not available yet", file=sys.stderr)
        return 1
    if not _importable(FRAMEWORK):
        print(f"{STAGE}: this stage runs inside the NeMo container (image {_image()}); {FRAMEWORK} is not "
              "importable here", file=sys.stderr)
        return 1
    print(f"{STAGE}: the Megatron-Bridge runtime of this stage is not available yet in this version", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
