"""NeMo RL's own reader (RL @ 7ea279a) on what ``data prep rl -c ultra-blends`` writes: each stage file's
train/validation JSONL goes through ``NemoGymDataset`` (``nemo_rl/data/datasets/response_datasets/nemogym_dataset.py``:
every line kept raw, the task named from the path) and ``nemo_gym_data_processor`` (``nemo_rl/data/processors.py``:
``json.loads`` of the line into ``extra_env_info``), the pair the teacher configs name. The restored placeholder rows
arrive with their question in ``responses_create_params.input[0].content`` and ``agent_ref`` intact.

Where the proof stops: no NeMo Gym server (which routes ``agent_ref`` and scores the rollouts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))

SCRIPT = r'''
from upstream import read_payload, write_result
from nemo_rl.data.datasets.response_datasets.nemogym_dataset import NemoGymDataset
from nemo_rl.data.processors import nemo_gym_data_processor

out = {}
for path in read_payload():
    ds = NemoGymDataset(path).dataset
    rows = [nemo_gym_data_processor(ds[i], None, None, None, i) for i in range(len(ds))]
    out[path] = {"task": rows[0]["task_name"], "env": [r["extra_env_info"] for r in rows]}
write_result(out)
'''


def test_nemo_rl_reads_every_stage_file(upstream, tmp_path):
    from nemotron.data import rl_blends
    from test_rl_blends import config, ultra_blends_repo

    fx = ultra_blends_repo(tmp_path)
    m = rl_blends.prepare(rl_blends.settings(config(fx, tmp_path / "out")))
    paths = [st[k] for st in m["stages"] for k in ("train_path", "validation_path")]
    out = upstream.run(SCRIPT, paths)
    for st in m["stages"]:
        assert out[st["train_path"]]["task"] == f"{st['stage']}-train"
        for k in ("train_path", "validation_path"):
            ours = [json.loads(x) for x in Path(st[k]).read_text().splitlines()]
            assert out[st[k]]["env"] == ours
    restored = [e for v in out.values() for e in v["env"] if e.get("expected_answer")]
    assert len(restored) == sum(st["restored"] for st in m["stages"]) > 0
    for e in restored:
        assert e["responses_create_params"]["input"][0]["content"] == e["question"] and e["agent_ref"]["name"]
