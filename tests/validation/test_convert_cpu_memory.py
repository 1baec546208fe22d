"""Rule convert-cpu-host-memory: a conversion with ``convert.device: cpu`` holds the whole model in one process's host
RAM (params x the bytes of ``convert.dtype``); the dry run checks it against the profile's host memory (Slurm ``mem``
when a size, else ``host_memory``), as rule rl-export-host-memory does for NeMo RL's export. A new user's
``convert -c default --run cluster --dry-run convert.device=cpu run.env.nodes=1`` was "valid" with no word on the
1.1 TB the key's own comment names."""

from __future__ import annotations

import json

from nemotron import validation
from nemotron.config import catalogue
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.layout import rules
from nemotron.profiles.load import load_profile

ULTRA = catalogue.param_count(catalogue.get("ultra"))["total"]  # 560.5 B, MTP included


def _profile(tmp_path, body: str = ""):
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = tmp_path / "env.toml"
    env.write_text('[c]\nexecutor = "slurm"\ngpus_per_node = 8\ngpu = "H100"\n' + body, encoding="utf-8")
    return load_profile("c", str(env), {})


def _found(profile, **overrides):
    ov = {"convert.device": "cpu", "run.env.nodes": 1, "convert.source": "/lustre/x", **overrides}
    c = compile_config(get_stage("convert"), "default", [f"{k}={json.dumps(v)}" for k, v in ov.items()],
                       check_paths=False)
    found = validation.validate(get_stage("convert"), c.config, profile)
    return [p for p in found if p.rule == "convert-cpu-host-memory"]


def test_the_rule_counts_the_export_dtypes_bytes():
    [err] = rules.convert_cpu_host_memory(ULTRA, "bfloat16", 512 * 2**30, "profile.c.mem", "512G",
                                          "Slurm mem = '512G' of profile c", "fix it")
    assert err.severity == "error" and err.key == "profile.c.mem" and err.valid == "fix it"
    assert "560.5 B parameters x 2 bytes (bfloat16, convert.dtype) = 1121 GB at least" in err.message, err.message
    [err32] = rules.convert_cpu_host_memory(ULTRA, "float32", 2000 * 10**9, "k", 1, "w", "f")
    assert "x 4 bytes (float32, convert.dtype) = 2242 GB" in err32.message, err32.message
    assert rules.convert_cpu_host_memory(ULTRA, "bfloat16", ULTRA * 2, "k", 1, "w", "f") == []  # exactly enough
    [warn] = rules.convert_cpu_host_memory(ULTRA, "bfloat16", None, "profile.c.host_memory", None, "unknown", "f")
    assert warn.severity == "warning"


def test_a_cpu_conversion_of_ultra_is_checked_against_the_profiles_host_memory(tmp_path):
    # unknown (mem = 0 and no host_memory): a warning naming host_memory and the need
    [warn] = _found(_profile(tmp_path / "a", 'mem = "0"\n'))
    assert warn.severity == "warning" and warn.key == "profile.c.host_memory", warn
    assert "1121 GB at least" in warn.message and "convert.device=gpu" in warn.valid, warn
    # a node of 512 GB: an error naming the key
    [err] = _found(_profile(tmp_path / "b", "host_memory = 512\n"))
    assert err.severity == "error" and err.key == "profile.c.host_memory" and err.value == 512, err
    assert "more than the 512 GB of host_memory = 512 of profile c" in err.message, err.message
    # a Slurm mem size below the need (G = 2^30 bytes): the fix names the mem to ask for
    [err] = _found(_profile(tmp_path / "c", 'mem = "1000G"\n'))
    assert err.severity == "error" and err.key == "profile.c.mem" and "profile.mem=1045G" in err.valid, err
    # float32 output needs twice as much: 2 TB nodes hold bfloat16, not float32
    two_tb = _profile(tmp_path / "d", "host_memory = 2000\n")
    assert _found(two_tb) == []
    [err] = _found(two_tb, **{"convert.dtype": "float32"})
    assert "x 4 bytes (float32, convert.dtype) = 2242 GB" in err.message, err.message
    # the GPU conversion and a config rewrite (hf_v5_to_v4) hold no whole model in host RAM
    assert _found(_profile(tmp_path / "e", "host_memory = 512\n"), **{"convert.device": "gpu", "run.env.nodes": 6}) == []
    assert _found(_profile(tmp_path / "f", "host_memory = 512\n"), **{"convert.direction": "hf_v5_to_v4"}) == []
