"""The Typer command line's help and shell completion, on the real tree and the configs shipped in ``stages/``.

A stage's ``--help`` lists its configs, every key of its ``default.yaml`` (type, default or REQUIRED, the key's
comment), its artifact inputs, the env.toml profiles and examples; the shell completion (Typer's protocol, the
variable ``_NEMOTRON_COMPLETE``) answers stages, ``-c`` names, profiles and config keys. Expected names are read
here independently of the code under test (the YAML with the project's loader, env.toml with ``tomllib``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from config_support import config_valid

from nemotron.cli.main import build_cli, main
from nemotron.config import yamlio
from nemotron.config.paths import config_names, stages_dir
from nemotron.config.registry import STAGES, get_stage
from nemotron.config.tree import leaves

ROOT = Path(__file__).resolve().parents[2]
ENV_FILE = ROOT / "tests" / "fixtures" / "env.toml"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEMOTRON_ENV_FILE", str(ENV_FILE))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)


def _help(capsys, *words: str) -> str:
    assert main([*words, "--help"]) == 0
    return capsys.readouterr().out


def _section(text: str, title: str) -> str:
    """The lines of help section ``title`` (up to the next blank-line-separated title)."""
    m = re.search(rf"^{re.escape(title)}.*?\n(.*?)(?=\n\n[A-Z]|\Z)", text, re.S | re.M)
    assert m, f"no section {title!r} in:\n{text}"
    return m.group(1)


def _default_keys(stage) -> list[str]:
    data = yamlio.load_file(stages_dir() / stage.config_dir / "default.yaml")
    data.pop("defaults", None)
    return [k for k, _ in leaves(data)]


def _fixture_profiles() -> list[str]:
    data = tomllib.loads(ENV_FILE.read_text(encoding="utf-8"))
    return [n for n, v in data.items() if isinstance(v, dict) and n not in ("wandb", "artifacts")]


# ----------------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_stage_help_lists_every_config_and_every_key(capsys, stage):
    out = _help(capsys, stage.recipe, *stage.command)
    configs = _section(out, "Configs")
    for name in config_names(stage):
        assert re.search(rf"^  {re.escape(name)}\*?\s", configs, re.M), (name, configs)  # *: refused by a rule
    keys = _section(out, "Config keys")
    listed = {line.split()[0] for line in keys.splitlines() if line.startswith("  ") and not line.startswith("   ")}
    missing = [k for k in _default_keys(stage) if k not in listed]
    assert not missing, missing
    for key in ("run.env.nodes", "run.env.gpus_per_node", "run.env.cpus"):  # the schema keys every stage has
        assert key in listed
    profiles = _section(out, "Profiles")
    for name in _fixture_profiles():
        assert re.search(rf"^  {re.escape(name)}\s", profiles, re.M), (name, profiles)
    examples = _section(out, "Examples")
    assert f"nemotron {stage.title} -c " in examples
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith(("  ", "Config keys", "Artifact",
                                                                                    "Configs", "Profiles")))


def test_a_key_row_has_its_type_default_and_comment(capsys):
    """sft's ``model.seq_length: 294912   # report §3.1 packed sequence length``; the artifact input is REQUIRED and
    listed with its override forms; a key null in default.yaml takes its type from the other configs."""
    out = _help(capsys, "ultra3", "sft")
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["model.seq_length"])
    assert lines[i].split()[1:3] == ["int", "294912"], lines[i]
    assert lines[i + 1].strip() == "report §3.1 packed sequence length"  # the key's own comment, below it at 80 columns
    j = next(j for j, ln in enumerate(lines) if ln.split()[:1] == ["checkpoint.pretrained_checkpoint"])
    assert lines[j].split()[1:] == ["str", "REQUIRED"], lines[j]
    assert lines[j + 1].strip().startswith("artifact pretrain-checkpoint, see Artifact inputs;"), lines[j + 1]
    arts = _section(out, "Artifact inputs")
    assert "checkpoint.pretrained_checkpoint = ${art:pretrain-checkpoint,path}" in arts
    assert "pins version N" in out
    pretrain = _help(capsys, "ultra3", "pretrain").splitlines()
    recompute = next(ln for ln in pretrain if ln.split()[:1] == ["model.recompute_num_layers"])  # null in default.yaml
    assert recompute.split()[1:3] == ["int|null", "null"], recompute  # long_context.yaml sets an int


def test_a_key_takes_the_comment_block_above_it_not_the_previous_keys_continuation(capsys):
    """data prep rl's ``answer_field`` comment continues on indented ``#`` lines below it; ``dedupe``'s own comment
    is the block at its column just above it; the file's header comment is no key's."""
    lines = _help(capsys, "ultra3", "data", "prep", "rl").splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["dedupe"])
    assert lines[i + 1].strip() == "Keep only the first of identical (problem, answer) pairs."
    out = _help(capsys, "ultra3", "sft").splitlines()
    j = next(j for j, ln in enumerate(out) if ln.split()[:1] == ["backend"])
    assert "every key of the stage" not in out[j + 1] and "Why this published layout" not in out[j + 1]


def test_wide_terminal_puts_each_key_on_one_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = _help(capsys, "ultra3", "data", "prep", "sft")
    row = next(ln for ln in out.splitlines() if ln.split()[:1] == ["pack.pack_size"])
    assert row.split()[1:3] == ["int", "294912"] and "report §3.1 packed SFT length" in row
    assert max(len(ln) for ln in out.splitlines()) <= 160  # the terminal's width (max_content_width 200)
    # the description column takes the width there is: a key's comment is not cut at 36 characters
    assert any(len(ln) > 120 for ln in out.splitlines())


def test_an_abbreviation_does_not_end_a_keys_description(capsys, monkeypatch):
    """pretrain's ``pretrained_checkpoint`` comment "start from weights (e.g. phase 2 from phase 1); null = from
    scratch" and quantize's ``calib_size`` "bump (e.g. --calib-size 512)": the help's one line goes past "e.g."."""
    monkeypatch.setenv("COLUMNS", "200")
    out = _help(capsys, "ultra3", "pretrain")
    row = next(ln for ln in out.splitlines() if ln.split()[:1] == ["checkpoint.pretrained_checkpoint"])
    assert "start from weights (e.g. phase 2 from phase 1); null = from scratch" in row, row
    out = _help(capsys, "ultra3", "quantize")
    row = next(ln for ln in out.splitlines() if ln.split()[:1] == ["quantization.calib_size"])
    assert "(e.g. --calib-size 512)" in row, row
    assert not any(ln.rstrip().endswith(("(e.g.", "i.e.")) for ln in out.splitlines())


def test_a_100_column_terminal_puts_each_key_on_one_line_as_the_readme_says(capsys, monkeypatch):
    """README: "At 100 columns or more each key is one line" (click's formatter is 2 narrower than the terminal)."""
    monkeypatch.setenv("COLUMNS", "100")
    out = _help(capsys, "ultra3", "data", "prep", "sft")
    row = next(ln for ln in out.splitlines() if ln.split()[:1] == ["pack.pack_size"])
    assert row.split()[1:3] == ["int", "294912"] and "report §3.1" in row, row
    monkeypatch.setenv("COLUMNS", "99")
    out = _help(capsys, "ultra3", "data", "prep", "sft")
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["pack.pack_size"])
    assert "report" not in lines[i] and "report §3.1" in lines[i + 1]


@pytest.mark.parametrize("columns", ["120", "100"])
def test_long_keys_keep_the_type_column_aligned(capsys, monkeypatch, columns):
    """rlvr's keys run to 70 characters (``policy.generation.sglang_cfg.sglang_server_config...``): the type column
    starts at one offset on every row; a key too long for its column is a line of its own, its row below it."""
    monkeypatch.setenv("COLUMNS", columns)
    keys = _section(_help(capsys, "ultra3", "rlvr"), "Config keys").splitlines()
    assert any(len(ln.split()[0]) > 36 for ln in keys if ln.startswith("  ") and not ln.startswith("   "))
    keys = keys[:next(i for i, ln in enumerate(keys) if ln.startswith("  and "))]  # the table, not the count below
    starts = set()
    for i, line in enumerate(keys):
        if not line.startswith("  ") or line.startswith("   "):
            continue
        words = line.split()
        if len(words) == 1:  # alone: its type on the next line, at the column
            starts.add(len(keys[i + 1]) - len(keys[i + 1].lstrip()))
        else:
            starts.add(line.index(" " + words[1], 2 + len(words[0])) + 1)
    assert len(starts) == 1, starts
    assert max(len(ln) for ln in keys) <= int(columns)


def test_help_without_an_env_file_says_where_to_get_one(capsys, monkeypatch):
    monkeypatch.delenv("NEMOTRON_ENV_FILE")
    monkeypatch.setenv("XDG_CONFIG_HOME", os.getcwd())
    out = _help(capsys, "ultra3", "pretrain")
    assert "no env.toml found (cp env.toml.example env.toml" in out
    assert "--run PROFILE --dry-run" in _section(out, "Examples")


def test_every_command_of_the_tree_builds():
    """Sub-commands are built when reached (start-up): walk the whole tree so a command that cannot be built fails
    here, and every registry stage is in it."""
    import typer
    from typer.core import TyperGroup

    cli = build_cli()
    seen = []

    def walk(cmd, path):
        ctx = typer.Context(cmd, info_name=path[-1] if path else "nemotron")
        if isinstance(cmd, TyperGroup):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, (path, name)
                walk(sub, (*path, name))
        else:
            seen.append(path)
            assert cmd.get_help(ctx)

    walk(cli, ())
    for stage in STAGES:
        assert (stage.recipe, *stage.command) in seen
    for path in (("ultra3", "model", "import"), ("ultra3", "data", "inspect"), ("ultra3", "why"), ("ultra3", "pipe"),
                 ("kit", "slurm", "build"), ("profiles",)):
        assert path in seen


def test_bare_group_prints_its_help(capsys):
    assert main(["ultra3", "data"]) == 0
    assert "Commands:" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- completion
def _complete(capsys, monkeypatch, line: str) -> list[str]:
    """What the completion hook answers for the last word of ``line`` (bash protocol, as the installed script asks)."""
    words = line.split(" ")
    monkeypatch.setenv("_NEMOTRON_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", line)
    monkeypatch.setenv("COMP_CWORD", str(len(words) - 1))
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 0
    return capsys.readouterr().out.split()


def test_completion_of_stages_and_commands(capsys, monkeypatch):
    assert _complete(capsys, monkeypatch, "nemotron ul") == ["ultra3"]
    words = _complete(capsys, monkeypatch, "nemotron ultra3 ")
    for stage in (s for s in STAGES if len(s.command) == 1):
        assert stage.command[0] in words
    assert {"data", "pipe", "list", "status", "jobs"} <= set(words)
    assert _complete(capsys, monkeypatch, "nemotron ultra3 data prep ") == ["pretrain", "sft", "rl"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe data-prep-s") == ["data-prep-sft"]


def test_completion_of_config_names(capsys, monkeypatch):
    for name in ("sft", "rlvr", "data-prep-pretrain"):
        stage = get_stage(name)
        line = f"nemotron {stage.recipe} {' '.join(stage.command)} -c "
        assert _complete(capsys, monkeypatch, line) == config_names(stage)
    assert _complete(capsys, monkeypatch, "nemotron ultra3 rlvr -c teacher-r") == ["teacher-reasoning", "teacher-rlhf"]


def test_completion_of_profiles(capsys, monkeypatch, tmp_path):
    expected = _fixture_profiles()
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain --run ") == expected
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe --batch sample-") == [n for n in expected
                                                                                       if n.startswith("sample-")]
    other = tmp_path / "other.toml"
    other.write_text('[mine]\nexecutor = "local"\n', encoding="utf-8")
    assert _complete(capsys, monkeypatch, f"nemotron ultra3 sft --env-file {other} --batch ") == ["mine"]
    assert _complete(capsys, monkeypatch, "nemotron profiles ") == expected


def test_completion_of_a_profile_name_with_a_space_is_one_word(capsys, monkeypatch, tmp_path):
    """``["my cluster"]``: bash inserts what the answer says, so the space is escaped (``my\\ cluster``: one word
    of the command line); the answer still starts with what was typed."""
    other = tmp_path / "spaced.toml"
    other.write_text('["my cluster"]\nexecutor = "local"\n\n[plain]\nexecutor = "local"\n', encoding="utf-8")
    monkeypatch.setenv("_NEMOTRON_COMPLETE", "complete_bash")
    line = f"nemotron ultra3 sft --env-file {other} --run my"
    monkeypatch.setenv("COMP_WORDS", line)
    monkeypatch.setenv("COMP_CWORD", str(len(line.split(" ")) - 1))
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().out.splitlines() == ["my\\ cluster"]


def test_completion_offers_the_nemo_rl_recipe_keys(capsys, monkeypatch):
    """``grpo.seed`` is a key of the NeMo RL recipe below mopd's default.yaml (``nemotron ultra3 keys mopd`` lists
    it): completed as a plain override, as ``mopd:`` and as ``mopd#2:`` in a pipe naming mopd twice."""
    assert "grpo.seed" in dict(leaves(_recipe_of(get_stage("mopd"))))  # read here, from the recipe itself
    assert "grpo.seed=" in _complete(capsys, monkeypatch, "nemotron ultra3 mopd grpo.se")
    assert "mopd:grpo.seed=" in _complete(capsys, monkeypatch, "nemotron ultra3 pipe mopd mopd:grpo.se")
    assert "grpo.seed=" in _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pipe mopd mopd mopd#2:grpo.se")
    assert "backend=" not in _complete(capsys, monkeypatch, "nemotron ultra3 mopd grpo.")


def test_completion_of_config_keys(capsys, monkeypatch):
    keys = _default_keys(get_stage("pretrain"))
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain -c tiny train.g") == ["train.global_batch_size="]
    every = _complete(capsys, monkeypatch, "nemotron ultra3 pretrain ")
    assert every[0] == "estimate" and {f"{k}=" for k in keys} <= set(every)
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain ~model.mtp_n") == ["~model.mtp_num_layers"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain model.seq_length=") == []  # a value: nothing
    quantize = _complete(capsys, monkeypatch, "nemotron ultra3 quantize ")
    assert "estimate" not in quantize and "export.output_dir=" in quantize
    pipe = _complete(capsys, monkeypatch, "nemotron ultra3 pipe pretrain:train.g")
    assert pipe == ["pretrain:train.global_batch_size="]


def test_show_and_install_completion_from_the_console_script(tmp_path):
    """--show-completion prints the script that asks ``_NEMOTRON_COMPLETE``; --install-completion writes it under
    $HOME and sources it from ~/.bashrc. Typer detects the shell from the parent process: here a bash."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    env.pop("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", None)

    def in_bash(option: str) -> subprocess.CompletedProcess:  # `; true`: bash stays the parent (no exec)
        return subprocess.run(["bash", "-c", f"'{sys.executable}' -m nemotron {option}; true"], capture_output=True,
                              text=True, env=env, cwd=tmp_path)

    show = in_bash("--show-completion")
    assert "_NEMOTRON_COMPLETE" in show.stdout, show.stderr
    assert "complete -o default -F _nemotron_completion nemotron" in show.stdout
    install = in_bash("--install-completion")
    script = tmp_path / ".bash_completions" / "nemotron.sh"
    assert script.is_file() and "_NEMOTRON_COMPLETE" in script.read_text(encoding="utf-8"), install.stderr
    assert str(script) in (tmp_path / ".bashrc").read_text(encoding="utf-8")
    assert "bash completion installed" in install.stdout


@pytest.mark.parametrize("stage", ["pretrain", "rlvr"])
def test_the_override_example_of_a_stages_help_is_valid(capsys, stage):
    """The help's ``-c local KEY=VALUE --dry-run`` example names a key any config takes (a run length): the dry run
    finds no error (a parallel size from default.yaml was one: -c local refuses it)."""
    examples = _section(_help(capsys, "ultra3", stage), "Examples:")
    line = next(ln.split()[1:] for ln in examples.splitlines() if re.search(r" [a-z_.]+=\d+ --dry-run$", ln))
    assert line[4].split("=")[0].endswith(("iters", "steps")), line
    code = main(line)
    cap = capsys.readouterr()
    # no problem: exit 0, or exit 2 only for inputs no run has made yet (the run's refusal, the dry run's too)
    assert code == 0 or (code == 2 and cap.out.startswith("dry run: the config is valid (")), cap.out[:500]
    assert not [ln for ln in cap.out.splitlines() if ln.startswith("error:")], cap.out


# --------------------------------------------------------------------------------------- keys (merged tree)
def _recipe_of(stage) -> dict:
    """The NeMo RL recipe ``stage``'s default.yaml names (``nemo_rl.base``), read from the key list directly."""
    from nemotron.config.nemo_rl_base import keylist

    name = yamlio.load_file(stages_dir() / stage.config_dir / "default.yaml")["nemo_rl"]["base"]
    return keylist()["recipes"][name]


def _key_lines(text: str) -> dict[str, list[str]]:
    """``{key: [type, source, value...]}`` of the ``keys`` table (the first line is its header; a line indented
    further is the wrapped rest of a key's comment)."""
    return {ln.split()[0]: ln.split()[1:] for ln in text.splitlines()[1:]
            if ln.startswith("  ") and not ln.startswith("   ")}


def test_keys_lists_the_nemo_rl_recipe_keys_with_their_source(capsys, monkeypatch):
    """rlvr's ``policy.megatron_cfg.optimizer.*`` come from the recipe nemo_rl.base names (default.yaml does not
    set them): each listed with the recipe's value and source ``recipe``; a default.yaml key says default.yaml, a
    key tiny.yaml sets says tiny.yaml; the prefix keeps exactly the keys that start with it."""
    monkeypatch.setenv("COLUMNS", "200")
    recipe = dict(leaves(_recipe_of(get_stage("rlvr"))))
    wanted = {k: v for k, v in recipe.items() if k.startswith("policy.megatron_cfg.optimizer.")}
    assert "policy.megatron_cfg.optimizer.lr" in wanted  # a real key of NeMo RL's recipe
    assert main(["ultra3", "keys", "rlvr", "policy.megatron_cfg.optimizer."]) == 0
    out = capsys.readouterr().out
    rows = _key_lines(out)
    assert set(rows) == set(wanted), (set(rows) ^ set(wanted))
    lr = rows["policy.megatron_cfg.optimizer.lr"]
    assert lr[:2] == ["float", "recipe"] and float(lr[2]) == wanted["policy.megatron_cfg.optimizer.lr"], lr
    assert "nemo-rl:" in out.splitlines()[0] and "(NeMo RL recipe) < default.yaml" in out.splitlines()[0]

    tiny = dict(leaves(yamlio.load_file(stages_dir() / "ultra3" / "rlvr" / "tiny.yaml")))
    assert main(["ultra3", "keys", "rlvr", "-c", "tiny"]) == 0
    every = _key_lines(capsys.readouterr().out)
    assert every["grpo.max_num_steps"][:3] == ["int", "tiny.yaml", str(tiny["grpo.max_num_steps"])]
    assert every["backend"][:3] == ["str", "default.yaml", "nemo-rl"]
    assert sum(1 for r in every.values() if r[1] == "recipe") > 100  # the recipe's own keys, hundreds of them


def test_keys_json_and_a_megatron_stage(capsys):
    import json

    assert main(["ultra3", "keys", "sft", "model.seq_l", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layers"] == ["schema", "default.yaml"] and doc["config"] == "default" and doc["prefix"] == "model.seq_l"
    assert [(k["key"], k["type"], k["value"], k["source"]) for k in doc["keys"]] == [
        ("model.seq_length", "int", "294912", "default.yaml")]
    assert doc["keys"][0]["description"] == "report §3.1 packed sequence length"


@pytest.mark.parametrize("args, first", [
    (["keys", "rlvx"], "error: keys 'rlvx': not a stage of ultra3 (did you mean 'rlvr'?)"),
    (["keys", "rlvr", "-c", "nope"], "error: ultra3 rlvr has no config 'nope'"),
    (["keys", "rlvr", "policy.megatron_cfg.optimiser"], "error: no key of rlvr (schema < nemo-rl:"),
])
def test_keys_bad_input_is_one_error_line(capsys, args, first):
    assert main(["ultra3", *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(first), err
    assert len(err) == 2 and err[1].startswith("hint: "), err


def test_keys_takes_a_stage_by_its_command_words_and_names_the_stages_a_first_word_starts(capsys):
    """`keys data prep pretrain` was "got unexpected extra argument(s) (pretrain)": the command's words name the
    stage as its name does; `keys data` (a first word only) names the stages it starts."""
    import json

    assert main(["ultra3", "keys", "data", "prep", "pretrain", "tokenizer.", "--json"]) == 0
    by_words = json.loads(capsys.readouterr().out)
    assert main(["ultra3", "keys", "data-prep-pretrain", "tokenizer.", "--json"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert by_words == by_name and by_words["stage"] == "data-prep-pretrain" and by_words["keys"], by_words
    for words in (["data"], ["data", "prep"], ["data", "prep", "pretrian"]):
        assert main(["ultra3", "keys", *words]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0] == (f"error: keys {' '.join(words)!r}: not a stage of ultra3; the stages whose command starts "
                          "with 'data' are named data-prep-pretrain, data-prep-sft, data-prep-rl here"), err
        assert err[1] == ("hint: the name, or the command's words in full: nemotron ultra3 keys data-prep-pretrain, "
                          "or nemotron ultra3 keys data prep pretrain"), err
    assert main(["ultra3", "keys", "sft", "model.seq_l", "x"]) == 2
    assert capsys.readouterr().err.startswith("error: keys 'sft model.seq_l x': one PREFIX after the stage, got 2")


def test_keys_of_mtp_boost_says_its_nodes_are_sfts_layout_not_sfts_config(capsys):
    """`keys mtp-boost` showed run.env.nodes "# Nemotron ultra3 SFT config: 384 nodes", the SFT comment copied."""
    import json

    assert main(["ultra3", "keys", "mtp-boost", "run.env.nodes", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["keys"][0]
    assert row["value"] == "384" and "Nemotron ultra3 SFT config" not in row["description"], row
    assert "frozen backbone" in row["description"] and "SFT's published layout" in row["description"], row


def test_nemo_rl_stage_help_counts_the_recipe_keys_and_names_the_command(capsys):
    """The help lists default.yaml's keys and counts the recipe's others (not flooding the help with them); the
    count is the number of keys ``keys`` lists that the help does not."""
    out = _help(capsys, "ultra3", "mopd")
    listed = {ln.split()[0] for ln in _section(out, "Config keys").splitlines()
              if ln.startswith("  ") and not ln.startswith("   ")}
    assert main(["ultra3", "keys", "mopd", "--json"]) == 0
    import json

    every = [k["key"] for k in json.loads(capsys.readouterr().out)["keys"]]
    more = [k for k in every if k not in listed]
    assert len(more) > 100
    text = " ".join(out.split())
    assert f"and {len(more)} keys of the NeMo RL recipe nemo_rl.base names (nemo-rl:mopd.yaml" in text
    assert "nemotron ultra3 keys mopd [PREFIX] [-c NAME]" in text
    assert "keys of the NeMo RL recipe" not in _help(capsys, "ultra3", "sft")


def test_completion_of_keys_words(capsys, monkeypatch):
    """``keys STAGE -c NAME PREFIX``: the recipe's stages, that stage's configs, then its merged tree one level at a
    time (the NeMo RL recipe's sections included)."""
    assert _complete(capsys, monkeypatch, "nemotron ultra3 keys rl") == ["rlvr"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 keys rlvr -c ") == config_names(get_stage("rlvr"))
    recipe = dict(leaves(_recipe_of(get_stage("rlvr"))))
    words = _complete(capsys, monkeypatch, "nemotron ultra3 keys rlvr policy.megatron_cfg.optimizer.")
    assert set(words) == {k for k in recipe if k.startswith("policy.megatron_cfg.optimizer.")}
    assert "policy.megatron_cfg." in _complete(capsys, monkeypatch, "nemotron ultra3 keys rlvr -c tiny policy.m")


# ------------------------------------------------------------------------------- completion: values, pipe forms
def test_completion_of_values_after_key_equals(capsys, monkeypatch):
    """After ``KEY=`` the values of a known set: the model catalogue, bools (default.yaml's and the NeMo RL
    recipe's), Megatron-Core's decay styles, Megatron-Bridge's precision presets and NeMo RL's recipes from the
    pinned key lists, the values the stage's configs give a string key; nothing for a number or a key the stage
    lacks. The expected sets are read from their sources here."""
    from nemotron.config import catalogue
    from nemotron.config.images import keylist_version
    from nemotron.config.keys import load_keylist
    from nemotron.config.nemo_rl_base import keylist
    from nemotron.layout import rules

    models = [*catalogue.BASE_MODELS, *catalogue.PUBLISHED_SLICES]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain model.name=") == [f"model.name={m}" for m in models]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 sft -c tiny +model.name=ultra4") == [
        "+model.name=ultra4layer"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain run.requeue=") == ["run.requeue=true",
                                                                                        "run.requeue=false"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 rlvr policy.megatron_cfg.optimizer.bf16=f") == [
        "policy.megatron_cfg.optimizer.bf16=false"]  # a key of the NeMo RL recipe, not of default.yaml
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain scheduler.lr_decay_style=") == [
        f"scheduler.lr_decay_style={v}" for v in rules.DECAY_STYLES]
    presets = load_keylist(keylist_version("nemo", "megatron_bridge"))["mixed_precision_recipes"]
    got = _complete(capsys, monkeypatch, "nemotron ultra3 pretrain mixed_precision=")
    assert got and {g.partition("=")[2] for g in got} <= set(presets) and "mixed_precision=bf16_with_nvfp4_mixed" in got
    assert _complete(capsys, monkeypatch, "nemotron ultra3 rlvr nemo_rl.base=") == [
        f"nemo_rl.base={r}" for r in keylist()["recipes"]]
    backends = _complete(capsys, monkeypatch, "nemotron ultra3 pretrain backend=")
    assert {"backend=megatron-bridge", "backend=local"} <= set(backends)  # default.yaml's and local.yaml's
    assert _complete(capsys, monkeypatch, "nemotron ultra3 quantize mixed_precision=") == []  # quantize has no such key
    # every recipe the refusal of a bad name lists (the files of recipes/), not only the one the configs name
    shipped = sorted(p.stem for p in (stages_dir() / "ultra3" / "quantize" / "recipes").glob("*.yaml"))
    assert len(shipped) > 1 and _complete(capsys, monkeypatch, "nemotron ultra3 quantize quantization.recipe=") == [
        f"quantization.recipe={r}" for r in shipped]
    monkeypatch.delenv("_NEMOTRON_COMPLETE")  # a command again, not a completion
    assert main(["ultra3", "quantize", "-c", "tiny", "quantization.recipe=nope", "--dry-run", "-q"]) == 2
    assert f"valid: {', '.join(shipped)} (or a path" in capsys.readouterr().out
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pretrain ~model.name=") == []
    # an offered value is one the dry run takes
    small = next(w for w in _complete(capsys, monkeypatch, "nemotron ultra3 sft -c local model.name=s"))
    monkeypatch.delenv("_NEMOTRON_COMPLETE")
    code = main(["ultra3", "sft", "-c", "local", small, "--dry-run", "--quiet"])
    cap = capsys.readouterr()
    assert config_valid(code, cap.out), cap.out + cap.err  # valid; a fresh home has no SFT data yet (exit 2 then)


def test_completion_of_pipe_stage_forms(capsys, monkeypatch):
    """In ``pipe``: ``STAGE:`` for the stages named, ``STAGE#K:`` for the runs of a stage named twice, then that
    stage's keys and values; a stage not in the pipe, or a run K it has not, gets nothing."""
    words = _complete(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr mopd mopd m")
    assert {"mopd", "mopd-warmup", "mopd:", "mopd#1:", "mopd#2:"} <= set(words) and "mopd#3:" not in words
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr s") == ["sft", "sft:"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr pretrain:") == []  # not in the pipe
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr mopd mopd mopd#2:grpo.max_num_st") == [
        "mopd#2:grpo.max_num_steps="]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr mopd mopd mopd#3:g") == []
    assert _complete(capsys, monkeypatch, "nemotron ultra3 pipe rlvr rlvr:model.name=ultra4") == [
        "rlvr:model.name=ultra4layer"]
    every = _complete(capsys, monkeypatch, "nemotron ultra3 pipe pretrain:")  # no stage named: the pipe runs all
    assert "pretrain:train.global_batch_size=" in every and "pretrain:estimate" not in every


def _complete_bash_split(capsys, monkeypatch, line: str) -> list[str]:
    """What the completion hook answers when bash asks as its installed script does: bash splits words at ``:`` and
    ``=`` (``COMP_WORDBREAKS``) and the script joins ``COMP_WORDS`` with newlines; the answer replaces only the
    text after the last break (checked once in an interactive bash on a pty: ``model.name=ultra4<TAB>`` became
    ``model.name=ultra4layer``, ``rlvr:grpo.max_num_st<TAB>`` ``rlvr:grpo.max_num_steps=``)."""
    words = re.sub(r"([:=])", r" \1 ", line).split()
    if line.endswith(" "):
        words.append("")
    monkeypatch.setenv("_NEMOTRON_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "\n".join(words))
    monkeypatch.setenv("COMP_CWORD", str(len(words) - 1))
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 0
    return capsys.readouterr().out.split()


def test_completion_of_values_and_pipe_forms_as_bash_splits_them(capsys, monkeypatch):
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pretrain model.name=u") == ["ultra",
                                                                                                  "ultra4layer"]
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pretrain model.name=") == [
        "ultra", "small", "ultra4layer"]  # bash's word is the "=", and it inserts the answer after it
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr rlvr:")[:2] == [
        "backend=", "output_artifact="]
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr rlvr:grpo.max_num_st") == [
        "grpo.max_num_steps="]
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr rlvr:model.name=ultra4") == [
        "ultra4layer"]
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr mopd mopd mopd#2:grpo.max_num_st") \
        == ["grpo.max_num_steps="]
    assert _complete_bash_split(capsys, monkeypatch, "nemotron ultra3 pipe sft rlvr r") == ["rlvr", "rlvr:"]


def _unwrapped(lines: list[str], key: str) -> str:
    """The line of ``key`` in a key table and the wrapped lines below it (indented further), joined by spaces."""
    at = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [key])
    rest = [lines[at]]
    for ln in lines[at + 1:]:
        if not ln.startswith("   ") or not ln.strip():
            break
        rest.append(ln)
    return " ".join(" ".join(rest).split())


@pytest.mark.parametrize("columns", ["80", "140", "400"])
def test_help_and_keys_show_a_keys_whole_comment(capsys, monkeypatch, columns):
    """The help and `keys` cut each key's comment to its first sentence (and `...` at the width): the allowed
    values of policies.control_token_text (the comment's second sentence, `text: ... | skip | fail`) were shown
    nowhere. The whole comment is shown, wrapped, at any width; no line is wider than the terminal."""
    monkeypatch.setenv("COLUMNS", columns)
    whole = ("A control-token string (<|im_end|>, </s>, <tool_call>, any added token of the tokenizer) written inside "
             "a message's text. text: encoded as plain text, never as the control token (counted per dataset) | "
             "skip | fail")
    keys = _section(_help(capsys, "ultra3", "data", "prep", "sft"), "Config keys").splitlines()
    assert whole in _unwrapped(keys, "policies.control_token_text"), keys
    assert "natural = every dataset once, weights not applied. The summary shows passes and shares either way." in \
        _unwrapped(keys, "mixing")
    assert max(len(ln) for ln in keys) <= int(columns)
    assert main(["ultra3", "keys", "data-prep-sft", "policies.control"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert _unwrapped(lines[1:], "policies.control_token_text").endswith(f"text # {whole}"), lines
    assert max(len(ln) for ln in lines[1:]) <= int(columns)


def test_completion_offers_the_values_a_data_prep_runtime_accepts(capsys, monkeypatch):
    """`chat.reasoning=<TAB>` offered only `auto` (the configs' value), `policies.control_token_text=<TAB>` only
    `text`: the completion offers the set the runtime validates (`valid: text, skip, fail`), the same set for
    each stage's own policy."""
    assert _complete(capsys, monkeypatch, "nemotron ultra3 data prep sft chat.reasoning=") == [
        "chat.reasoning=auto", "chat.reasoning=off"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 data prep sft policies.control_token_text=") == [
        f"policies.control_token_text={v}" for v in ("text", "skip", "fail")]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 data prep rl policies.control_token_text=k") == [
        "policies.control_token_text=keep"]
    assert _complete(capsys, monkeypatch, "nemotron ultra3 data prep pretrain output.dtype=") == [
        f"output.dtype={v}" for v in ("auto", "uint16", "int32")]
    # each offered value is one the runtime takes; a value outside the set is refused naming the same set
    monkeypatch.delenv("_NEMOTRON_COMPLETE")
    code = main(["ultra3", "data", "prep", "sft", "-c", "tiny", "policies.control_token_text=bogus", "--dry-run",
                 "--quiet"])
    out = capsys.readouterr()
    assert code == 2 and "valid: text, skip, fail" in out.out + out.err, out
