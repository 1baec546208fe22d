#!/usr/bin/env python3
"""The launch commands of the miles recipe for Nemotron 3 Ultra (the project's seed 000), typed here as written:

    python scripts/run_nemotron_3_ultra_550b_a55b.py full-train --model-name NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16-4layer --num-nodes 1
    python scripts/run_nemotron_3_ultra_550b_a55b.py train --num-nodes 16

miles' launcher is not part of this tool: the same runs are ``nemotron ultra3`` stages (GRPO on NeMo RL, the
4-layer slice as ``-c tiny``, the full model as ``-c default``), submitted through an env.toml profile. This script
reads the command as miles takes it, prints the nemotron command of the same run and why, and exits 2 (a usage
error: nothing was started). Standard library only, so it answers on a machine where nothing is installed yet.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

#: miles' subcommands: ``full-train`` prepares (downloads, converts) and trains; ``train`` trains what is prepared.
COMMANDS = ("full-train", "train")
#: The full model's name in miles' recipe; ``<name>-<N>layer`` is its N-layer slice.
FULL = "NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"


def equivalent(command: str, model_name: str, num_nodes: int, external_ray: bool) -> tuple[str, list[str]]:
    """The ``nemotron`` command of the same run and the lines that explain it.

    ``model_name``: miles' ``--model-name`` (``...-4layer``: a slice; anything else: the full model);
    ``num_nodes``: miles' ``--num-nodes``; ``external_ray``: ``MILES_SCRIPT_EXTERNAL_RAY=1`` was set.
    """
    m = re.search(r"-(\d+)layer$", model_name)
    config = "tiny" if m else "default"
    why = []
    if m and m.group(1) != "4":
        why.append(f"--model-name {model_name}: -c tiny is the 4-layer slice (ultra4layer, as miles publishes it); "
                   f"a {m.group(1)}-layer slice is not in the model catalogue (nemotron ultra3 list)")
    if m:
        why.append("the slice runs on one 8-GPU node: TP1 PP1 EP8, training and generation colocated, as in miles' "
                   "smoke test")
    else:
        why.append("the full 108-layer model: its node count comes from the config's layout (the dry run prints it "
                   f"and checks it against your profile's `nodes`); miles' --num-nodes {num_nodes} is not an option")
    if command == "full-train":
        why.append("miles' full-train also downloads and converts the checkpoint: here the input is the artifact "
                   "the config names (an SFT/HF checkpoint: `nemotron ultra3 model import PATH` registers a download)")
    if external_ray or os.environ.get("RAY_ADDRESS"):
        why.append("a Ray cluster you started yourself: describe it as a profile with executor = \"ray\" and its "
                   "address in env.toml (docs/profiles.md); a Slurm profile starts the Ray cluster for you")
    cmd = f"nemotron ultra3 rlvr -c {config} --run YOUR-CLUSTER --dry-run"
    why.append("drop --dry-run to submit once the dry run is valid; `--batch YOUR-CLUSTER` submits detached (YOUR-CLUSTER: your env.toml profile)")
    return cmd, why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_nemotron_3_ultra_550b_a55b.py", add_help=True,
                                 description="miles' Nemotron 3 Ultra launcher, answered with the nemotron command "
                                             "of the same run")
    ap.add_argument("command", choices=COMMANDS)
    ap.add_argument("--model-name", default=FULL)
    ap.add_argument("--num-nodes", type=int, default=1)
    args, rest = ap.parse_known_args(argv)
    cmd, why = equivalent(args.command, args.model_name, args.num_nodes,
                          os.environ.get("MILES_SCRIPT_EXTERNAL_RAY") == "1")
    print(f"error: this is miles' launcher command ({args.command}); nemotron runs the same GRPO run as a stage: {cmd}",
          file=sys.stderr)
    for line in why:
        print(f"  - {line}", file=sys.stderr)
    if rest:
        print(f"  - left out: {' '.join(rest)} (miles' own options; set the stage's keys as key=value, "
              "every key is shown by the dry run)", file=sys.stderr)
    print(f"hint: {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
