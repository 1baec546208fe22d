"""Rule rl-export-host-memory: NeMo RL's Hugging Face export after RLVR/MOPD holds the whole policy (params x 2 bytes,
BF16) in one CPU process on the Ray head's node. The profile's host memory (Slurm ``mem`` when a size, else
``host_memory``) is checked by the dry-run; this node's real memory (/proc/meminfo MemTotal, the cgroup limit) by the
runtime before NeMo RL trains, with the same rule."""

from __future__ import annotations

import json

import pytest

from nemotron import validation
from nemotron.config import catalogue
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
from nemotron.errors import ConfigError
from nemotron.layout import rules
from nemotron.layout import views
from nemotron.profiles.load import load_profile
from nemotron.runtime.common import prestart
from nemotron.runtime.rl import nemo_rl

ULTRA = catalogue.param_count(catalogue.get("ultra"))["total"]  # 560.5 B
NEED = ULTRA * 2  # bytes, BF16


def _profile(tmp_path, body: str, overrides: dict | None = None):
    env = tmp_path / "env.toml"
    env.write_text('[c]\nexecutor = "slurm"\ngpus_per_node = 8\ngpu = "B200"\n' + body, encoding="utf-8")
    return load_profile("c", str(env), overrides or {})


def _validate(stage: str, config: str, profile, overrides: dict | None = None):
    c = compile_config(get_stage(stage), config, [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()],
                       check_paths=False)
    validation.prepare(get_stage(stage), c.config, c.user_keys, profile)
    found = validation.validate(get_stage(stage), c.config, profile)
    return c.config, [p for p in found if p.rule == "rl-export-host-memory"]


# ------------------------------------------------------------------------------------------ the rule
def test_rule_errors_below_the_need_warns_when_unknown_and_holds_above():
    [err] = rules.rl_export_host_memory(ULTRA, 512 * 2**30, "profile.c.mem", "512G", "Slurm mem = '512G' of profile c",
                                        "fix it")
    assert err.severity == "error" and err.key == "profile.c.mem" and err.valid == "fix it"
    assert "560.5 B parameters x 2 bytes (BF16) = 1121 GB of host RAM" in err.message
    assert "more than the 550 GB of Slurm mem = '512G' of profile c" in err.message
    assert "reads 1121 GB of Megatron weights and writes 1121 GB of safetensors" in err.message
    [warn] = rules.rl_export_host_memory(ULTRA, None, "profile.c.host_memory", None, "profile c declares no host_memory",
                                         "set host_memory")
    assert warn.severity == "warning" and "unknown (profile c declares no host_memory)" in warn.message
    assert rules.rl_export_host_memory(ULTRA, NEED, "k", 1, "w", "f") == []  # exactly enough holds
    assert len(rules.rl_export_host_memory(ULTRA, NEED - 1, "k", 1, "w", "f")) == 1
    assert "rl-export-host-memory" in rules.RULES


def test_slurm_mem_sizes_in_bytes():
    assert views.slurm_mem_bytes(500000) == 500000 * 2**20  # an integer is MB
    assert views.slurm_mem_bytes("2T") == 2 * 2**40 and views.slurm_mem_bytes("1536g") == 1536 * 2**30
    assert views.slurm_mem_bytes("1000") == 1000 * 2**20 and views.slurm_mem_bytes("64K") == 64 * 2**10
    assert views.slurm_mem_bytes(0) is None and views.slurm_mem_bytes("0G") is None and views.slurm_mem_bytes(None) is None


# ------------------------------------------------------------------------------------------ the profile key
def test_profile_key_host_memory_is_parsed_and_checked(tmp_path):
    p = _profile(tmp_path, "host_memory = 2048\n")
    assert p.settings.host_memory == 2048 and p.redacted()["host_memory"] == 2048
    assert views.host_memory(p).bytes == 2048 * 10**9 and views.host_memory(p).key == "profile.c.host_memory"
    assert _profile(tmp_path, "", {"host_memory": "1536"}).settings.host_memory == 1536  # profile.host_memory=1536
    with pytest.raises(ConfigError, match=r"env.toml:5: profile 'c': host_memory: 0 must be > 0"):
        _profile(tmp_path, "host_memory = 0\n")
    with pytest.raises(ConfigError, match=r"host_memory: expected a number, got '2T'"):
        _profile(tmp_path, 'host_memory = "2T"\n')
    # Slurm's mem, when a size, is what the job gets and wins; mem = 0 (all of the node) falls back to host_memory
    both = _profile(tmp_path, 'mem = "512G"\nhost_memory = 2048\n')
    assert views.host_memory(both).bytes == 512 * 2**30 and views.host_memory(both).key == "profile.c.mem"
    assert views.host_memory(_profile(tmp_path, 'mem = 0\nhost_memory = 2048\n')).bytes == 2048 * 10**9
    assert views.host_memory(_profile(tmp_path, "mem = 0\n")).bytes is None


# ------------------------------------------------------------------------------------------ the dry-run's check
@pytest.mark.parametrize("stage", ["rlvr", "mopd"])
def test_dry_run_refuses_a_node_without_the_ram_for_the_export(tmp_path, stage):
    _, [err] = _validate(stage, "default", _profile(tmp_path, 'mem = "512G"\n'))
    assert err.severity == "error" and err.key == "profile.c.mem" and err.value == "512G"
    assert "1121 GB of host RAM" in err.message and "550 GB of Slurm mem = '512G' of profile c" in err.message
    assert "profile.mem=1045G" in err.valid  # 1121 GB = 1044.1 GiB, Slurm's G
    _, [err] = _validate(stage, "default", _profile(tmp_path, "host_memory = 1024\n"))
    assert err.key == "profile.c.host_memory" and "1024 GB of host_memory = 1024 of profile c" in err.message
    assert _validate(stage, "default", _profile(tmp_path, "host_memory = 2048\n"))[1] == []
    assert _validate(stage, "default", _profile(tmp_path, 'mem = "2T"\n'))[1] == []


def test_dry_run_warns_when_the_node_memory_is_unknown_and_skips_when_nothing_is_exported(tmp_path):
    _, [warn] = _validate("rlvr", "default", _profile(tmp_path, ""))
    assert warn.severity == "warning" and warn.key == "profile.c.host_memory"
    assert "at least 1122 GB" in warn.valid and "host_memory" in warn.valid
    _, [warn] = _validate("rlvr", "tiny", None)  # no profile: unknown too; the 4-layer slice needs 72 GB
    assert "35.8 B parameters x 2 bytes (BF16) = 72 GB" in warn.message and "(no profile)" in warn.message
    cfg, found = _validate("rlvr", "default", _profile(tmp_path, 'mem = "512G"\n'), {"checkpointing.enabled": False})
    assert found == [] and views.rl_export_params(cfg) is None  # checkpointing off: the run exports nothing


# ------------------------------------------------------------------------------------------ the job-start check
def test_host_memory_reads_meminfo_and_the_cgroup_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2113929216 kB\nMemFree:        1000 kB\n")  # 2.16 TB
    assert prestart.host_memory(meminfo, ()) == (2113929216 * 1024, f"this node ({meminfo} MemTotal)")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")
    assert prestart.host_memory(meminfo, (v2,))[0] == 2113929216 * 1024  # no limit
    v2.write_text(f"{512 * 2**30}\n")
    have, where = prestart.host_memory(meminfo, (v2, v1))
    assert have == 512 * 2**30 and where == f"this node's cgroup memory limit ({v2}; MemTotal 2165 GB)"
    v1.write_text(f"{2**63 - 4096}\n")  # cgroup v1's 'no limit'
    assert prestart.host_memory(meminfo, (tmp_path / "absent", v1))[0] == 2113929216 * 1024
    assert prestart.host_memory(tmp_path / "absent", ()) == (None, f"{tmp_path / 'absent'} has no MemTotal line to read")


def test_job_start_refuses_before_training_with_the_rules_message(tmp_path, capsys):
    cfg, [dry] = _validate("rlvr", "default", _profile(tmp_path, 'mem = "512G"\n'))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {512 * 2**20} kB\n")  # 512 GiB, as Slurm's 512G
    lines = nemo_rl.precheck(cfg, importable=lambda m: True, gpus=8, checkout=tmp_path,
                             host_memory=lambda: prestart.host_memory(meminfo, ()))
    [line] = [ln for ln in lines if "Hugging Face export" in ln]
    assert line.startswith(dry.message.split(", more than")[0])  # the same rule, the same figures
    assert f"more than the 550 GB of this node ({meminfo} MemTotal)" in line and "valid: " in line
    assert prestart.refuse("ultra3 rlvr", [line]) == 1
    assert capsys.readouterr().err == f"ultra3 rlvr: {line}\n"
    meminfo.write_text(f"MemTotal: {2048 * 2**20} kB\n")
    assert nemo_rl.export_memory_problems(cfg, lambda: prestart.host_memory(meminfo, ())) == []
    # memory that cannot be read is said, not refused
    assert nemo_rl.export_memory_problems(cfg, lambda: (None, "nothing to read")) == []
    assert "note: " in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ a model outside the catalogue
@pytest.mark.parametrize("name", ["ultra", "small", "ultra4layer"])
@pytest.mark.parametrize("form", ["v4", "v5"])
def test_an_hf_config_counts_as_the_catalogue_counts(name, form):
    """catalogue.spec_from_hf_config is the inverse of hf_config: the same total in either config form."""
    from nemotron.runtime.common.convert import v4_to_v5

    spec = catalogue.get(name)
    config = catalogue.hf_config(spec)
    config = v4_to_v5(config) if form == "v5" else config
    assert catalogue.param_count(catalogue.spec_from_hf_config(config, "x"))["total"] == \
        catalogue.param_count(spec)["total"]


def test_an_hf_config_that_cannot_be_counted_names_the_field():
    config = catalogue.hf_config(catalogue.get("small"))
    with pytest.raises(catalogue.CatalogueError, match=r"model_type='llama' is not a NemotronH config"):
        catalogue.spec_from_hf_config({**config, "model_type": "llama"}, "x")
    with pytest.raises(catalogue.CatalogueError, match=r"x: n_routed_experts=None: a positive whole number"):
        catalogue.spec_from_hf_config({k: v for k, v in config.items() if k != "n_routed_experts"}, "x")
    with pytest.raises(catalogue.CatalogueError, match=r"neither hybrid_override_pattern \(v4\) nor layers_block_type"):
        catalogue.spec_from_hf_config({k: v for k, v in config.items() if k != "hybrid_override_pattern"}, "x")


def _outside(tmp_path, config: dict | None) -> dict:
    """An RLVR config whose model.name is outside the catalogue and whose policy.model_name is a folder here (with
    ``config`` as its config.json, or none)."""
    folder = tmp_path / "my-model"
    folder.mkdir(exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return {"model": {"name": "my-model"}, "checkpointing": {"enabled": True, "checkpoint_dir": str(tmp_path / "ck")},
            "policy": {"model_name": str(folder)}}


def test_a_model_outside_the_catalogue_is_counted_from_its_config_json(tmp_path):
    """Was: rl_export_params None, nothing checked. Now the config.json of policy.model_name (the folder NeMo RL's
    converter builds its bridge from) gives the count; the dry-run and the job start check it."""
    ultra_like = catalogue.hf_config(catalogue.get("ultra"))
    cfg = _outside(tmp_path, ultra_like)
    size = views.rl_export_size(cfg)
    assert size.params == ULTRA and size.source == str(tmp_path / "my-model" / "config.json")
    assert views.rl_export_params(cfg) == ULTRA
    # the dry-run's rule on a profile of 512 GB nodes: an error naming where the count comes from
    from nemotron.validation import checks

    [err] = checks.rl_export_rules(cfg, _profile(tmp_path, 'mem = "512G"\n'))
    assert err.severity == "error" and err.key == "profile.c.mem"
    assert "560.5 B parameters x 2 bytes (BF16) = 1121 GB" in err.message
    assert f"parameters counted from {tmp_path / 'my-model' / 'config.json'}" in err.message
    # the job start, on a node of 512 GiB: refused with the same figures
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {512 * 2**20} kB\n")
    [line] = nemo_rl.export_memory_problems(cfg, lambda: prestart.host_memory(meminfo, ()))
    assert "1121 GB of host RAM" in line and "config.json" in line and "more than the 550 GB" in line


def test_a_model_whose_parameters_cannot_be_counted_is_said_not_checked(tmp_path, capsys):
    from nemotron.validation import checks

    for config, why in ((None, "has no config.json on this machine"),
                        ({"model_type": "llama", "hidden_size": 8}, "is not a NemotronH config")):
        cfg = _outside(tmp_path, config)
        size = views.rl_export_size(cfg)
        assert size.params is None and why in size.source
        [warn] = checks.rl_export_rules(cfg, _profile(tmp_path, 'mem = "512G"\n'))
        assert warn.severity == "warning" and warn.key == "policy.model_name"
        assert "its host RAM is not checked: model.name='my-model' is not a catalogue model" in warn.message
        assert why in warn.message and "config.json" in warn.valid
        assert nemo_rl.export_memory_problems(cfg, lambda: (10**9, "a tiny node")) == []   # not a refusal...
        assert "note: " in capsys.readouterr().out   # ...but said
        (tmp_path / "my-model" / "config.json").unlink(missing_ok=True)
