"""env.toml profiles: discovery, inheritance, strict validation, secrets and display (real files)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from nemotron.errors import ConfigError
from nemotron.profiles.load import find_env_file, load_profiles, resolve_profile
from nemotron.profiles.schema import is_secret_name, parse_slurm_time, redact_text
from nemotron.profiles.show import profile_yaml, profiles_table

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str):
    return load_profiles(write(tmp_path / "env.toml", text))


def error_of(tmp_path: Path, text: str, name: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text).get(name)
    return info.value


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No env.toml from the real user or environment leaks into a test."""
    monkeypatch.delenv("NEMOTRON_ENV_FILE", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("NEMOTRON_HOME", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


# --------------------------------------------------------------------------- discovery
def test_discovery_order(tmp_path, clean_env, monkeypatch):
    project = tmp_path / "project"
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    assert find_env_file(cwd=deep) is None

    user_file = write(clean_env / ".config" / "nemotron" / "env.toml", "")
    assert find_env_file(cwd=deep) == user_file

    far = write(project / "env.toml", "")
    assert find_env_file(cwd=deep) == far
    near = write(project / "a" / "env.toml", "")
    assert find_env_file(cwd=deep) == near

    from_var = write(tmp_path / "elsewhere" / "vars.toml", "")
    monkeypatch.setenv("NEMOTRON_ENV_FILE", str(from_var))
    assert find_env_file(cwd=deep) == from_var

    explicit = write(tmp_path / "explicit.toml", "")
    assert find_env_file(explicit, cwd=deep) == explicit
    assert find_env_file(str(explicit), cwd=deep) == explicit


def test_discovery_xdg_config_home(tmp_path, clean_env, monkeypatch):
    xdg = tmp_path / "xdg"
    target = write(xdg / "nemotron" / "env.toml", "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert find_env_file(cwd=tmp_path / "home") == target


def test_discovery_missing_explicit_or_env_var_is_an_error(tmp_path, clean_env, monkeypatch):
    with pytest.raises(ConfigError, match=r"--env-file .*no such file") as info:
        find_env_file(tmp_path / "nope.toml", cwd=tmp_path)
    assert info.value.exit_code == 2 and info.value.hint
    monkeypatch.setenv("NEMOTRON_ENV_FILE", str(tmp_path / "gone.toml"))
    with pytest.raises(ConfigError, match=r"\$NEMOTRON_ENV_FILE .*gone.toml"):
        find_env_file(cwd=tmp_path)


def test_resolve_profile_without_any_env_file(tmp_path, clean_env):
    with pytest.raises(ConfigError, match=r"no env\.toml was found") as info:
        resolve_profile("cluster", cwd=tmp_path / "home")
    assert "env.toml.example" in info.value.hint


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path / "env.toml", '[a]\nexecutor = "local"\ngpus_per_node = = 2\n')
    with pytest.raises(ConfigError) as info:
        load_profiles(path)
    assert info.value.message.startswith(f"{path}:3: invalid TOML")


@pytest.mark.parametrize("header,line,why", [('[""]', 4, "is empty"), ("['  ']", 4, "is empty"),
                                             ('["-x"]', 4, "starts with '-'"), ('["".sub]', 4, "is empty")])
def test_a_profile_name_that_run_could_never_name_is_refused_with_its_line(tmp_path, header, line, why):
    """``--run ""`` and ``--run -x`` are refused on the command line, so such a table is refused where it is written
    (not listed by ``profiles`` as if it could be used)."""
    path = write(tmp_path / "env.toml", f'[ok]\nexecutor = "local"\n\n{header}\nexecutor = "local"\n')
    with pytest.raises(ConfigError) as info:
        load_profiles(path)
    msg = info.value.message
    assert msg.startswith(f"{path}:{line}: profile name ") and why in msg, msg
    assert "rename the table" in info.value.hint


def test_profiles_command_refuses_an_empty_profile_name(tmp_path, capsys):
    from nemotron.cli.main import main

    path = write(tmp_path / "env.toml", '[""]\nexecutor = "local"\n')
    assert main(["profiles", "--env-file", str(path)]) == 2
    assert f"error: {path}:1: profile name '' is empty" in capsys.readouterr().err


def test_top_level_scalar_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="top-level key 'default' is not a table"):
        load(tmp_path, 'default = "x"\n[a]\nexecutor = "local"\n')


# --------------------------------------------------------------------------- inheritance
THREE_LEVELS = """
    [root]
    executor = "slurm"
    account = "acct"
    partition = "batch"
    time = "04:00:00"
    mounts = ["/a:/a", "/b:/b"]
    images = { nemo = "/img/nemo.sqsh", data = "/img/data.sqsh" }
    env_vars = { A = "root", B = "root" }

    [mid]
    extends = "root"
    partition = "mid-part"
    images = { nemo = "/img/nemo-mid.sqsh" }
    env_vars = { B = "mid" }

    [leaf]
    extends = "mid"
    time = "30"
    mounts = ["/c:/c"]
    env_vars = { C = "leaf" }
"""


def test_three_level_inheritance_deep_merges_and_child_wins(tmp_path):
    profiles = load(tmp_path, THREE_LEVELS)
    leaf = profiles.get("leaf")
    assert leaf.chain == ["leaf", "mid", "root"]
    assert leaf.executor == "slurm" and leaf.settings.account == "acct"
    assert leaf.settings.partition == "mid-part"
    assert leaf.settings.time == "30" and leaf.time_seconds == 1800
    assert leaf.settings.mounts == ["/c:/c"]  # lists are replaced, not concatenated
    assert leaf.settings.images == {"nemo": "/img/nemo-mid.sqsh", "data": "/img/data.sqsh"}
    assert leaf.settings.env_vars == {"A": "root", "B": "mid", "C": "leaf"}
    assert leaf.provenance["images.nemo"] == "mid" and leaf.provenance["images.data"] == "root"
    assert leaf.provenance["env_vars.C"] == "leaf" and leaf.provenance["account"] == "root"
    assert profiles.get("root").settings.partition == "batch"  # the parent is untouched


def test_extends_cycle_names_the_whole_chain(tmp_path):
    err = error_of(tmp_path, """
        [a]
        extends = "b"
        [b]
        extends = "c"
        [c]
        executor = "local"
        extends = "a"
    """, "a")
    assert "a -> b -> c -> a" in err.message
    assert "env.toml" in err.message and err.hint


def test_missing_parent_names_chain_and_suggests(tmp_path):
    err = error_of(tmp_path, """
        [cluster]
        executor = "slurm"
        [child]
        extends = "mid"
        [mid]
        extends = "clustr"
    """, "child")
    assert "'clustr', which is not defined" in err.message
    assert "child -> mid -> clustr" in err.message
    assert "did you mean 'cluster'" in err.hint


def test_extending_a_settings_section_is_refused(tmp_path):
    err = error_of(tmp_path, '[wandb]\nproject = "p"\n[a]\nextends = "wandb"\n', "a")
    assert "settings section, not a profile" in err.message


def test_problems_inherited_from_a_parent_name_that_parent(tmp_path):
    err = error_of(tmp_path, """
        [base]
        executor = "slurm"
        time = "4h"
        [child]
        extends = "base"
    """, "child")
    assert "profile 'child'" in err.message and "(set in [base])" in err.message
    assert err.message.startswith(f"{tmp_path / 'env.toml'}:4:")  # the line in [base]


# --------------------------------------------------------------------------- strict types
def test_string_values_are_not_coerced(tmp_path):
    err = error_of(tmp_path, """
        [c]
        executor = "slurm"
        gpus_per_node = "8"
        exclusive = "False"
    """, "c")
    assert "profile 'c': 2 problems" in err.message
    assert "gpus_per_node: expected an integer, got '8' (a string: write it without quotes)" in err.message
    assert "exclusive: expected true or false, got 'False'" in err.message
    assert "Traceback" not in err.message and "pydantic" not in err.message
    assert "\n" not in err.message


def test_a_list_key_written_as_a_string_is_told_to_use_brackets(tmp_path):
    """``mounts = "/lustre:/lustre"``: the advice is the list of one string, not "write it without quotes" (which
    gives a TOML error); the message is the TOML to write."""
    err = error_of(tmp_path, """
        [c]
        executor = "slurm"
        mounts = "/lustre:/lustre"
        setup = "module load x"
    """, "c")
    assert ("""mounts: expected a list, got '/lustre:/lustre' (a list of strings: write mounts = ["/lustre:/lustre"])"""
            in err.message), err.message
    assert """setup: expected a list, got 'module load x' (a list of strings: write setup = ["module load x"])""" \
        in err.message, err.message
    assert "without quotes" not in err.message


def test_a_dotted_profile_name_is_explained_as_a_nested_table(tmp_path):
    """``[my.cluster]`` is TOML for table ``cluster`` inside table ``my``: profile ``my`` (no executor) and
    ``--run my.cluster`` both say so and how to quote the name; ``["my.cluster"]`` is a profile of that name."""
    body = """
        executor = "slurm"
        account = "a"
        partition = "p"
    """
    for name in ("my", "my.cluster"):
        err = error_of(tmp_path, "[my.cluster]" + body, name)
        assert "[my.cluster] is not a profile named 'my.cluster': in TOML a dot in a table name nests tables" \
            in err.message, err.message
        assert "inside profile 'my'" in err.message and '["my.cluster"]' in err.hint, err.hint
    assert load(tmp_path, '["my.cluster"]' + body).get("my.cluster").executor == "slurm"
    err = error_of(tmp_path, "[mine]" + body, "my.cluster")  # no such table at all: the usual no-profile line
    assert "no profile 'my.cluster'" in err.message


def test_single_problem_names_file_line_profile_and_key(tmp_path):
    err = error_of(tmp_path, '[c]\nexecutor = "slurm"\ngpus_per_node = -1\n', "c")
    assert err.message == f"{tmp_path / 'env.toml'}:3: profile 'c': gpus_per_node: -1 must be >= 0"
    assert "gpus_per_node" in err.hint
    err = error_of(tmp_path, '[c]\nexecutor = "slurm"\n\n[c.images]\nnemoo = "/i.sqsh"\n', "c")
    assert err.message.startswith(f"{tmp_path / 'env.toml'}:4: profile 'c': images: unknown image 'nemoo'")


# each of these `sbatch --test-only --time=...` refuses (Slurm 22.05), except "1-" and "-5", which Slurm's lax
# parser takes without a documented meaning: refused here as typos
@pytest.mark.parametrize("bad", ["4h", "25:00:00:00", "", " 30", "30.5", "+30", "1-2-3", "1-", "-5", "1-2:3:4:5",
                                 "UNLIMITEDX"])
def test_bad_slurm_times(tmp_path, bad):
    with pytest.raises(ValueError, match=r"is not a Slurm time limit"):
        parse_slurm_time(bad)
    err = error_of(tmp_path, f'[c]\nexecutor = "slurm"\ntime = "{bad}"\n', "c")
    assert "profile 'c': time:" in err.message
    assert "HH:MM:SS" in err.message and "UNLIMITED" in err.message


# every one is accepted by `sbatch --test-only --time=...` (Slurm 22.05); a field may exceed its clock range as
# in Slurm; 0, -1, INFINITE and UNLIMITED are no limit (None)
@pytest.mark.parametrize("good, seconds", [
    ("30", 1800), ("30:15", 1815), ("04:00:00", 14400), ("1-00", 86400),
    ("1-00:00:00", 86400), ("2-12:30", 2 * 86400 + 12 * 3600 + 30 * 60), ("0-00:00:01", 1), ("48:00:00", 172800),
    ("1:60", 120), ("1-24", 2 * 86400), ("01:75:00", 8100), ("0", None), ("00:00:00", None), ("-1", None),
    ("UNLIMITED", None), ("infinite", None),
])
def test_good_slurm_times(tmp_path, good, seconds):
    assert parse_slurm_time(good) == seconds
    assert load(tmp_path, f'[c]\nexecutor = "slurm"\ntime = "{good}"\n').get("c").time_seconds == seconds


def test_integer_time_is_minutes_as_in_sbatch(tmp_path):
    profile = load(tmp_path, '[c]\nexecutor = "slurm"\ntime = 240\n').get("c")
    assert (profile.settings.time, profile.time_seconds) == ("240", 4 * 3600)
    for bad in ("true", "1.5", "-5"):
        err = error_of(tmp_path, f'[c]\nexecutor = "slurm"\ntime = {bad}\n', "c")
        assert err.message.startswith(f"{tmp_path / 'env.toml'}:3: profile 'c': time: ") and "not a Slurm time" in err.message


def test_unknown_and_missing_executor(tmp_path):
    err = error_of(tmp_path, '[c]\nexecutor = "slurmm"\n', "c")
    assert "unknown executor 'slurmm'" in err.message and "did you mean 'slurm'" in err.message
    assert "valid: slurm, local, ray" in err.message
    err = error_of(tmp_path, '[c]\naccount = "x"\n', "c")
    assert "executor: missing" in err.message


def test_unknown_key_suggests_and_knows_other_executors(tmp_path):
    err = error_of(tmp_path, '[c]\nexecutor = "slurm"\npartiton = "batch"\n', "c")
    assert "partiton: unknown key (did you mean 'partition'?)" in err.message
    err = error_of(tmp_path, '[c]\nexecutor = "local"\npartition = "batch"\n', "c")
    assert "not a key of local profiles (it belongs to slurm profiles)" in err.message


def test_wandb_is_not_a_run_target_and_unknown_names_suggest(tmp_path):
    profiles = load(tmp_path, '[cluster]\nexecutor = "local"\n[wandb]\nproject = "p"\n[artifacts]\nroot = "/r"\n')
    assert profiles.names() == ["cluster"]
    assert set(profiles.sections) == {"wandb", "artifacts"}
    with pytest.raises(ConfigError, match=r"\[wandb\] is a settings section, not a profile") as info:
        profiles.get("wandb")
    assert "cluster" in info.value.hint
    with pytest.raises(ConfigError, match="no profile 'clustre' \\(did you mean 'cluster'\\?\\)") as info:
        profiles.get("clustre")
    assert "profiles in env.toml: cluster" in info.value.hint


def test_gpu_model_derives_arch_and_memory(tmp_path):
    profiles = load(tmp_path, """
        [h]
        executor = "slurm"
        gpu = "h200"
        gpus_per_node = 8
        [a40]
        executor = "local"
        gpu = "A100"
        gpu_memory = 40
        [bad]
        executor = "slurm"
        gpu = "H100"
        gpu_arch = "blackwell"
        [typo]
        executor = "slurm"
        gpu_arch = "hoper"
    """)
    h = profiles.get("h")
    assert (h.settings.gpu, h.gpu_arch, h.gpu_memory, h.gpus_per_node) == ("H200", "hopper", 141.0, 8)
    assert h.provenance["gpu_arch"] == "derived from gpu"
    assert (profiles.get("a40").gpu_arch, profiles.get("a40").gpu_memory) == ("ampere", 40.0)
    with pytest.raises(ConfigError, match="'blackwell' disagrees with gpu = 'H100', which is hopper"):
        profiles.get("bad")
    with pytest.raises(ConfigError, match="gpu_arch: 'hoper' is not one of 'ampere', 'hopper' or 'blackwell'"):
        profiles.get("typo")


def test_ssh_tunnel_rules(tmp_path):
    profiles = load(tmp_path, """
        [ssh]
        executor = "slurm"
        tunnel = "ssh"
        [stray]
        executor = "slurm"
        host = "login"
        [ok]
        executor = "slurm"
        tunnel = "ssh"
        host = "login"
        user = "me"
        job_dir = "/remote/jobs"
    """)
    with pytest.raises(ConfigError) as info:
        profiles.get("ssh")
    assert all(f'{k}: required when tunnel = "ssh"' in info.value.message for k in ("host", "user", "job_dir"))
    with pytest.raises(ConfigError, match="host: set but tunnel is 'local'"):
        profiles.get("stray")
    ok = profiles.get("ok")
    assert (ok.settings.port, ok.settings.job_dir, ok.provenance["port"]) == (22, "/remote/jobs", "default")


def test_local_and_ray_profiles(tmp_path, clean_env):
    profiles = load(tmp_path, """
        [here]
        executor = "local"
        [ray]
        executor = "ray"
        address = "ray://head:10001"
        [badray]
        executor = "ray"
        address = "head:10001"
        [noaddr]
        executor = "ray"
    """)
    here = profiles.get("here")
    assert here.settings.job_dir == str(clean_env / ".nemotron" / "jobs") and not hasattr(here.settings, "partition")
    assert profiles.get("ray").settings.address == "ray://head:10001"
    with pytest.raises(ConfigError, match="not a Ray address"):
        profiles.get("badray")
    with pytest.raises(ConfigError, match="address: required for ray profiles"):
        profiles.get("noaddr")


def test_slurm_shapes_mounts_mem_and_images(tmp_path):
    profiles = load(tmp_path, """
        [ok]
        executor = "slurm"
        mem = 512000
        mounts = ["/data:/data:ro"]
        images = { nemo-rl = "/img/rl.sqsh" }
        run_partition = "interactive"
        partition = "batch"
        [bad]
        executor = "slurm"
        mem = "lots"
        mounts = ["relative"]
        images = { nemo_rl = "/img/rl.sqsh" }
        cpus_per_node = 0
    """)
    ok = profiles.get("ok")
    assert ok.settings.partition_for("run") == "interactive" and ok.settings.partition_for("batch") == "batch"
    with pytest.raises(ConfigError) as info:
        profiles.get("bad")
    msg = info.value.message
    assert "4 problems" in msg and "'lots' is not a Slurm memory size" in msg
    assert "'relative': a mount is 'SRC:/DST'" in msg and "unknown image 'nemo_rl' (did you mean 'nemo-rl'?)" in msg
    assert "cpus_per_node: 0 must be >= 1" in msg
    assert set(profiles.errors()) == {"bad"}



def test_slurm_node_side_folders_must_be_absolute(tmp_path):
    """A relative checkpoint_root, data_root, cache folder or mount source would be read from the job's own working
    folder on the node (inside its container): refused by key, with the absolute form to give."""
    profiles = load(tmp_path, """
        [rel]
        executor = "slurm"
        checkpoint_root = "ckpts"
        data_root = "data/out"
        hf_home = "hf"
        mounts = ["relative:/x"]
        [ok]
        executor = "slurm"
        checkpoint_root = "/lustre/proj/ckpt"
        data_root = "/home/me/data"
        mounts = ["/lustre:/lustre"]
    """)
    with pytest.raises(ConfigError) as info:
        profiles.get("rel")
    msg = info.value.message
    assert "4 problems" in msg
    for key, value in (("checkpoint_root", "ckpts"), ("data_root", "data/out"), ("hf_home", "hf")):
        assert f"{key}: {value!r}: a relative path" in msg
    assert "its source 'relative' is a relative path" in msg
    assert profiles.get("ok").settings.checkpoint_root == "/lustre/proj/ckpt"


@pytest.mark.parametrize("root", ["jobs here", "my jobs/sub", "jobs,x", "/a b", "/lustre/x y/jobs", "jobs"])
def test_shell_safe_root_ends_for_any_path(root):
    """A job root the shell cannot carry unquoted becomes a symlink name beside its nearest safe ancestor; a
    relative root whose first folder is unsafe has the working folder as that ancestor (this looped forever)."""
    from nemotron.profiles.schema import _SHELL_SAFE, shell_safe_root

    out = shell_safe_root(root)
    assert _SHELL_SAFE.fullmatch(out), out
    assert out.startswith("/") == root.startswith("/")
    if not _SHELL_SAFE.fullmatch(root):
        assert out.rsplit("/", 1)[-1].startswith(".nemotron-jobs-")


# --------------------------------------------------------------------------- secrets
SECRETS = """
    [base]
    executor = "slurm"
    secrets = ["WANDB_API_KEY", "NOT_SET_ANYWHERE"]
    env_vars = { HF_TOKEN = "hf_env_token_value", TOKENIZERS_PARALLELISM = "false", NCCL_DEBUG = "WARN" }
    setup = ["echo $INLINE_KEY > /dev/null"]

    [child]
    extends = "base"
    secrets = { INLINE_KEY = "inline-secret-value", RENAMED = { env = "MY_OWN_VAR" } }
"""


def test_secret_resolution_and_redaction(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-from-shell-123")
    monkeypatch.setenv("MY_OWN_VAR", "renamed-secret-456")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    child = load(tmp_path, SECRETS).get("child")
    values = child.secret_values()
    assert values == {"WANDB_API_KEY": "wandb-from-shell-123", "INLINE_KEY": "inline-secret-value",
                      "RENAMED": "renamed-secret-456", "HF_TOKEN": "hf_env_token_value"}
    assert child.missing_secrets() == ["NOT_SET_ANYWHERE"]
    root = child.settings.job_dir  # a container profile's storage defaults on its job root (docs/profiles.md)
    assert child.public_env_vars() == {"NEMOTRON_DATA_DIR": f"{root}/data", "NEMOTRON_CKPT_ROOT": f"{root}/checkpoints",
                                       "TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "WARN"}

    red = child.redacted()
    assert red["secrets"] == {"WANDB_API_KEY": "***", "NOT_SET_ANYWHERE": "<unset $NOT_SET_ANYWHERE>",
                              "INLINE_KEY": "***", "RENAMED": "***"}
    assert red["env_vars"]["HF_TOKEN"] == "***" and red["env_vars"]["TOKENIZERS_PARALLELISM"] == "false"
    assert red["setup"] == ["echo $INLINE_KEY > /dev/null"]
    shown = [str(red), profile_yaml(child), repr(child), repr(child.settings), str(child.settings),
             repr(child.settings.secrets)]
    for text in shown:
        for secret in values.values():
            assert secret not in text


def test_secret_values_never_appear_in_errors(tmp_path):
    err = error_of(tmp_path, """
        [c]
        executor = "slurm"
        env_vars = { GITHUB_TOKEN = 987654321 }
        secrets = { API_PASSWORD = 123456789 }
    """, "c")
    assert "987654321" not in err.message and "123456789" not in err.message
    assert "env_vars.GITHUB_TOKEN: expected a string, got ***" in err.message
    assert 'secrets.API_PASSWORD: expected an inline string or { env = "VAR" }' in err.message


def test_secret_value_copied_into_any_written_key_is_refused(tmp_path, monkeypatch):
    """setup lines, mounts, env_vars values, plain keys: all are written into the job script and
    NeMo-Run's files, so a secret's literal value there is refused (inline, env-sourced or secret-named)."""
    err = error_of(tmp_path, """
        [p]
        executor = "slurm"
        secrets = { MY_TOKEN = "supersecretvalue123" }
        setup = ["echo supersecretvalue123 > /dev/null"]
    """, "p")
    assert err.message.endswith("profile 'p': setup[0]: contains the value of secret MY_TOKEN; write $MY_TOKEN "
                                "instead (secrets reach the job's environment)"), err.message
    assert ":5: " in err.message  # the line of setup
    monkeypatch.setenv("SHELL_SECRET", "from-the-shell-9876")
    err = error_of(tmp_path, """
        [base]
        executor = "slurm"
        mounts = ["/data/x:/data"]
        setup = ["module load cuda"]
        env_vars = { HF_TOKEN = "hf_plain_value_55", NOTE = "key=hf_plain_value_55" }

        [c]
        extends = "base"
        secrets = { SHELL_SECRET = { env = "SHELL_SECRET" } }
        mounts = ["/data/from-the-shell-9876:/data"]
        partition = "p-from-the-shell-9876"
    """, "c")
    assert "3 problems" in err.message, err.message
    for part in ("mounts[0]: contains the value of secret SHELL_SECRET",
                 "partition: contains the value of secret SHELL_SECRET",
                 "env_vars.NOTE: contains the value of secret HF_TOKEN; write $HF_TOKEN instead (secrets reach the job's "
                 "environment) (set in [base])"):
        assert part in err.message, err.message
    assert "from-the-shell-9876" not in err.message and "hf_plain_value_55" not in err.message
    # naming the variable is the way: it loads, and a short value (< 4 chars) is not searched for
    ok = load(tmp_path, '[p]\nexecutor = "slurm"\nsecrets = { MY_TOKEN = "abc" }\n'
                        'setup = ["echo $MY_TOKEN abc"]\n').get("p")
    assert ok.settings.setup == ["echo $MY_TOKEN abc"]
    with pytest.raises(ConfigError, match=r"setup\[1\]: contains the value of secret MY_TOKEN"):
        load(tmp_path, '[p]\nexecutor = "slurm"\nsecrets = { MY_TOKEN = "longer-value" }\n').get("p") \
            .with_overrides({"setup": '["true", "echo longer-value"]'})


def test_secret_declared_twice_is_an_error(tmp_path):
    err = error_of(tmp_path, '[c]\nexecutor = "local"\nsecrets = ["HF_TOKEN"]\nenv_vars = { HF_TOKEN = "x" }\n', "c")
    assert "env_vars.HF_TOKEN: also declared in secrets" in err.message


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("WANDB_API_KEY", True), ("NGC_APIKEY", True), ("DB_PASSWORD", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("SSH_PRIVATE_KEY", True), ("token", True), ("GCP_CREDENTIALS", True),
    ("TOKENIZERS_PARALLELISM", False), ("MAX_TOKENS", False), ("NCCL_DEBUG", False), ("KEYBOARD", False),
])
def test_is_secret_name(name, secret):
    assert is_secret_name(name) is secret


def test_redact_text():
    text = "export A=abcd1234; export B=abcd12345678; x=abc"
    assert redact_text(text, ["abcd12345678", "abcd1234", "abc"]) == "export A=***; export B=***; x=abc"
    assert redact_text("nothing here", []) == "nothing here"
    assert redact_text("a=xyz", ["xyz"]) == "a=xyz"  # shorter than 4: left alone


# --------------------------------------------------------------------------- overrides
def test_with_overrides_type_checks_and_records(tmp_path):
    profile = load(tmp_path, THREE_LEVELS).get("leaf")
    new = profile.with_overrides({"time": "01:00:00", "gpus_per_node": "4", "images.nemo": "/o.sqsh",
                                  "mounts": "/x:/x", "exclusive": "false"})
    assert (new.time_seconds, new.gpus_per_node, new.settings.exclusive, new.settings.mounts) == (3600, 4, False, ["/x:/x"])
    assert new.settings.images == {"nemo": "/o.sqsh", "data": "/img/data.sqsh"}
    assert new.overridden == {"time", "gpus_per_node", "images.nemo", "mounts", "exclusive"}
    assert new.provenance["images.nemo"] == "override" and new.provenance["images.data"] == "root"
    assert "time: 01:00:00  # override" in profile_yaml(new)
    assert profile.settings.time == "30" and profile.overridden == set()  # the original is unchanged
    whole = profile.with_overrides({"env_vars": "{X: y}"})
    assert whole.settings.env_vars == {"X": "y"} and "  X: y  # override" in profile_yaml(whole)
    typed = profile.with_overrides({"gpus_per_node": 2})
    assert typed.gpus_per_node == 2 and typed.with_overrides({"qos": "high"}).overridden == {"gpus_per_node", "qos"}

    for bad, expect in [({"gpus_per_node": "eight"}, "gpus_per_node: expected an integer, got 'eight'"),
                        ({"time": "4h"}, "time: '4h' is not a Slurm time"),
                        ({"exclusive": "maybe"}, "exclusive: expected true or false"),
                        ({"partiton": "x"}, "did you mean 'partition'")]:
        with pytest.raises(ConfigError, match=expect) as info:
            profile.with_overrides(bad)
        assert "(command-line override)" in info.value.message
        assert f"{tmp_path / 'env.toml'}: profile 'leaf'" in info.value.message  # no line for an override
        assert "without quotes" not in info.value.message
    with pytest.raises(ConfigError, match="cannot be set from the command line"):
        profile.with_overrides({"secrets.X": "value"})


# --------------------------------------------------------------------------- example file and display
def test_example_file_loads_cleanly(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "example-wandb-key")
    profiles = load_profiles(REPO / "env.toml.example")
    assert profiles.errors() == {}
    assert {"cluster", "cluster-ssh", "local"} <= set(profiles.names())
    # [wandb] and [artifacts] root are shown as comments: the file works as copied on any machine
    assert set(profiles.sections) == {"artifacts"} and profiles.sections["artifacts"] == {}
    text = (REPO / "env.toml.example").read_text()
    assert "\n# [wandb]\n" in text and "\n# root = " in text
    cluster = profiles.get("cluster")
    assert (cluster.executor, cluster.gpus_per_node, cluster.gpu_arch, cluster.gpu_memory) == ("slurm", 8, "hopper", 80.0)
    assert cluster.secret_values()["WANDB_API_KEY"] == "example-wandb-key"
    assert cluster.settings.account and cluster.settings.partition and cluster.time_seconds and cluster.settings.mounts and cluster.settings.images
    ssh = profiles.get("cluster-ssh")
    assert ssh.chain == ["cluster-ssh", "cluster"] and ssh.settings.tunnel == "ssh" and ssh.settings.host
    blackwell = [profiles.get(n) for n in profiles.names() if profiles.get(n).gpu_arch == "blackwell"]
    assert blackwell and blackwell[0].gpus_per_node == 4
    assert profiles.get("local").executor == "local"


def test_profile_yaml_round_trips_with_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-from-shell-123")
    child = load(tmp_path, SECRETS).get("child")
    text = profile_yaml(child)
    assert yaml.safe_load(text) == child.redacted()
    assert "executor: slurm  # base" in text
    assert "  INLINE_KEY: '***'  # child" in text and "  WANDB_API_KEY: '***'  # base, from $WANDB_API_KEY" in text


def test_profiles_table_lists_profiles_and_marks_invalid(tmp_path):
    from rich.console import Console

    profiles = load(tmp_path, THREE_LEVELS + '\n[broken]\nexecutor = "nope"\n[wandb]\nproject = "p"\n')
    console = Console(record=True, width=200)
    console.print(profiles_table(profiles))
    out = console.export_text()
    for expected in ("leaf", "mid -> root", "mid-part", "invalid", "settings sections (not profiles): wandb"):
        assert expected in out


def test_module_import_stays_light():
    code = ("import sys, nemotron.profiles.load; "
            "print(sorted(m for m in ('rich', 'nemo_run', 'torch', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.stdout.strip() == "[]"
