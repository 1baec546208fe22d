"""Data that silently went wrong now stops or warns, on real files and real command lines.

Real data prep outputs (WikiText-2 from ../shared/data, tokenized by the real data prep pipelines on a real
local Ray), the stages' real configs (compiled as the CLI does), the stages' real ``run.py`` and the real CLI:

* every blend a training stage reads is checked against the stage's tokenizer (a ``data.mix_with`` blend of
  another vocabulary is refused), and every blend entry must be a bare prefix;
* an SFT dataset that contributes nothing is an error naming it, its rejection reasons and examples;
* chat transcripts with speaker prefixes are read; prompt-only and unknown shapes are refused with the record;
* plain text is one document per file, and too few of them is refused up front;
* a stale ``RAY_ADDRESS`` fails in seconds, naming the variable; Ctrl-C says that a rerun resumes;
* optional datasets that are missing, and paths that only resolve from the project folder, are warned about.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from nemotron.data import chat, driver, pretrain, sft
from nemotron.data.blend import BlendFileError, load_blend, read_blend_pairs
from nemotron.validation.data import training_data_problems
from data_prep_sft_support import FIXTURES, compile_stage

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
STAGE_DIRS = {"data-prep-pretrain": "data_prep_pretrain", "data-prep-sft": "data_prep_sft", "data-prep-rl": "data_prep_rl"}


def write_blend(path: Path, datasets: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"datasets": datasets}))
    return path


def run_py(stage: str, cfg: dict, tmp_path: Path, env: dict | None = None, timeout: int = 240):
    """The stage's run.py on a compiled config, as a job runs it: (completed process, seconds)."""
    path = tmp_path / f"{stage}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = ROOT / "stages" / "ultra3" / STAGE_DIRS[stage] / "run.py"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(run), "--config", str(path)], capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, **(env or {})})
    return r, time.monotonic() - t0


def cli(*args: str, cwd: Path | None = None, home: Path, timeout: int = 180) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "nemotron", *args], capture_output=True, text=True, timeout=timeout,
                       cwd=cwd, env={**os.environ, "NEMOTRON_HOME": str(home), "PYTHONPATH": str(ROOT / "src")})
    return r.returncode, r.stdout + r.stderr


def pretrain_output(folder: Path, blend: Path, tok_cache: str, **over) -> dict:
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(folder),
                        tokenizer__cache_dir=tok_cache, sample=40, **over)
    return pretrain.prepare(pretrain.Settings.from_config(cfg), quiet=True)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, ray_instance, tok_cache, shared_data):
    """Three real pretrain outputs of WikiText-2: ``a`` and ``a2`` with Tekken (the tiny tokenizer), ``b`` with
    the tokenizer a real SFT data prep wrote (Tekken plus the Nemotron chat tokens: another vocabulary hash)."""
    root = tmp_path_factory.mktemp("two-tokenizers")
    sft_cfg = compile_stage("data-prep-sft", "tiny", output_dir=str(root / "sft"), tokenizer__cache_dir=tok_cache,
                            sample=20)
    sft_m = sft.prepare(sft.Settings.from_config(sft_cfg), quiet=True)
    blend = write_blend(root / "wiki.json", [{"name": "wiki", "path": str(shared_data / "pretrain" / "wikitext2-valid.jsonl"),
                                               "text_field": "text", "weight": 1.0}])
    a = pretrain_output(root / "a", blend, tok_cache)
    a2 = pretrain_output(root / "a2", blend, tok_cache)
    b = pretrain_output(root / "b", blend, tok_cache, tokenizer__name=str(Path(sft_m["path"]) / "tokenizer"))
    assert a["tokenizer"]["vocab_sha256"] != b["tokenizer"]["vocab_sha256"]
    assert a["tokenizer"]["vocab_sha256"] == a2["tokenizer"]["vocab_sha256"]
    return {"a": a, "a2": a2, "b": b, "sft": sft_m, "root": root}


# --------------------------------------------------------------------------------------------------
# 1. every blend a stage reads is checked against its tokenizer


def mix_cfg(main: str, extra: str, share: float = 0.2) -> dict:
    return {"model": {"name": "small"}, "tokenizer": {"tokenizer_model": None},
            "data": {"per_split_data_args_path": main, "mix_with": [{"blend": extra, "share": share}]}}


def test_a_mix_of_another_vocabulary_is_refused(outputs):
    a, a2, b = outputs["a"], outputs["a2"], outputs["b"]
    problems = training_data_problems("pretrain", mix_cfg(a["blend_json"], b["blend_json"]))
    [p] = [p for p in problems if p.rule == "data-tokenizer"]
    assert p.severity == "error" and p.key == "data.mix_with[0].blend" and p.value == b["blend_json"]
    assert "20% of the training samples" in p.message and b["tokenizer"]["vocab_sha256"][:12] in p.message
    assert a["tokenizer"]["vocab_sha256"][:12] in p.message and "re-run data prep" in p.valid
    # the same tokenizer in two outputs: no problem; an explicit tokenizer.vocab_sha256 is the reference
    assert training_data_problems("pretrain", mix_cfg(a["blend_json"], a2["blend_json"])) == []
    pinned = {**mix_cfg(a["blend_json"], a2["blend_json"]), "tokenizer": {"vocab_sha256": b["tokenizer"]["vocab_sha256"]}}
    assert [p.key for p in training_data_problems("pretrain", pinned)] == ["data.mix_with[0].blend"]


def test_sft_inputs_of_other_outputs_are_checked(outputs, tmp_path):
    """SFT reads dataset_root and the packed files: a packed file of another output (another vocabulary) is refused."""
    sft_m = outputs["sft"]
    cfg = {"model": {"name": "small"}, "dataset": {"dataset_root": outputs["a"]["path"], "packed_sequence_specs": {
        "packed_train_data_path": sft_m["loader"]["packed_train_data_path"], "packed_val_data_path": None}}}
    [p] = training_data_problems("sft", cfg)
    assert p.key == "dataset.dataset_root" and "was tokenized with" in p.message and p.rule == "data-tokenizer"


def test_mix_dry_run_refuses_another_vocabulary(outputs, tmp_path):
    """The command line: ``pretrain -c local`` with a mix of another vocabulary exits 2 at --dry-run."""
    a, b = outputs["a"], outputs["b"]
    code, out = cli("ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={a['blend_json']}",
                    f"data.mix_with=[{{blend: {b['blend_json']}, share: 0.2}}]", "--dry-run", home=tmp_path)
    assert code == 2 and "data.mix_with[0].blend" in out and "was tokenized with" in out, out[-2000:]
    code, out = cli("ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={a['blend_json']}",
                    f"data.mix_with=[{{blend: {outputs['a2']['blend_json']}, share: 0.2}}]", "--dry-run", home=tmp_path)
    assert "was tokenized with" not in out, out[-2000:]


# --------------------------------------------------------------------------------------------------
# 3. a blend entry must be a bare prefix


def _absolute(blend_json: str) -> dict:
    """The blend.json data prep wrote, its prefixes (written relative to its folder) made absolute, to be written
    elsewhere."""
    base = Path(blend_json).parent
    return {split: [x if i % 2 == 0 else str(base / x) for i, x in enumerate(flat)]
            for split, flat in json.loads(Path(blend_json).read_text()).items()}


def test_blend_entry_that_is_not_a_prefix(outputs, tmp_path):
    from nemotron.runtime.megatron.pretrain_data import DataError, read_blend

    good = _absolute(outputs["a"]["blend_json"])
    prefix = good["train"][1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good, "train": [1.0, prefix + ".bin"]}))
    with pytest.raises(BlendFileError, match=r"names the \.bin file, not a prefix .* write '" + prefix + "'"):
        read_blend_pairs(bad)
    with pytest.raises(DataError, match="names the .bin file"):  # the run's reader
        read_blend(bad)
    folder = tmp_path / "folder.json"
    folder.write_text(json.dumps({**good, "train": [1.0, str(Path(prefix).parent)]}))
    with pytest.raises(BlendFileError, match=r"is a folder, not a prefix .*the prefixes in it are .*'" + prefix + "'"):
        read_blend_pairs(folder)
    [p] = training_data_problems("pretrain", {"data": {"per_split_data_args_path": str(bad)}})
    assert p.rule == "blend-prefix" and p.key == "data.per_split_data_args_path" and "write '" + prefix in p.message
    gone = tmp_path / "gone.json"
    gone.write_text(json.dumps({**good, "train": [1.0, str(tmp_path / "nope" / "train_00000")]}))
    [p] = training_data_problems("pretrain", {"data": {"per_split_data_args_path": str(gone)}})
    assert "train_00000.bin does not exist" in p.message
    assert training_data_problems("pretrain", {"data": {"per_split_data_args_path": outputs["a"]["blend_json"]}}) == []
    code, out = cli("ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={bad}", "--dry-run", home=tmp_path)
    assert code == 2 and "names the .bin file" in out, out[-2000:]


def test_truncated_shard_is_refused_by_the_dry_run_the_trainer_and_data_inspect(outputs, tmp_path):
    """A ``.bin`` shorter than its ``.idx`` describes (a truncated copy): the trainer's reader refuses it when it
    opens the shard; the dry-run said valid and ``data inspect --step`` hashed empty samples. Now the dry-run
    (rule ``blend-prefix``) and ``data inspect`` refuse it with the trainer's own words, reading only the index's
    header and its last entry."""
    import shutil

    from nemotron.data.indexed import bin_size_problem
    from nemotron.runtime.megatron.pretrain_data import DataError, Shard

    good = _absolute(outputs["a"]["blend_json"])
    prefix = Path(good["train"][1])
    copy = tmp_path / "copy" / prefix.name
    copy.parent.mkdir()
    for suffix in (".bin", ".idx"):
        shutil.copy(f"{prefix}{suffix}", f"{copy}{suffix}")
    assert bin_size_problem(prefix) is None and bin_size_problem(copy) is None
    size = Path(f"{copy}.bin").stat().st_size
    with open(f"{copy}.bin", "r+b") as fh:
        fh.truncate(size - 4)
    message = f"{copy}.bin: {size - 4} bytes, the index describes {size}"
    assert bin_size_problem(copy) == message
    with pytest.raises(DataError) as info:  # the trainer's reader: the same words
        Shard(copy)
    assert str(info.value) == message
    blend = tmp_path / "blend.json"
    blend.write_text(json.dumps({**good, "train": [1.0, str(copy)]}))
    [p] = training_data_problems("pretrain", {"data": {"per_split_data_args_path": str(blend)}})
    assert p.rule == "blend-prefix" and message in p.message
    code, out = cli("ultra3", "pretrain", "-c", "local", f"data.per_split_data_args_path={blend}", "--dry-run",
                    home=tmp_path)
    assert code == 2 and message in out, out[-2000:]
    code, out = cli("ultra3", "data", "inspect", str(blend), home=tmp_path)
    assert code == 2 and message in out, out[-2000:]
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    code, out = cli("ultra3", "data", "inspect", str(empty), home=tmp_path)
    assert code == 2 and "not a blend.json: no split lists a prefix" in out and "internal error" not in out, out


# --------------------------------------------------------------------------------------------------
# 2 and 5. SFT: a dataset that contributes nothing; transcripts; prompt-only and unknown shapes


def sft_cfg(tmp_path: Path, tok_cache: str, datasets: list[dict], **over) -> dict:
    blend = write_blend(tmp_path / "blend.json", datasets)
    return compile_stage("data-prep-sft", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                         tokenizer__cache_dir=tok_cache, **over)


def test_transcripts_are_read(tmp_path, ray_instance, tok_cache):
    rows = [json.loads(x) for x in (FIXTURES / "transcripts.jsonl").read_text().splitlines()]
    msgs, _tools = chat.normalise(rows[2], None)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[4]["content"] == "Buenos días." and chat.normalise(rows[3], None)[0][0]["content"] == "You answer in one sentence."
    cfg = sft_cfg(tmp_path, tok_cache, [{"name": "transcripts", "path": str(FIXTURES / "transcripts.jsonl"), "weight": 1.0}],
                  split__validation_fraction=0.0)
    m = sft.prepare(sft.Settings.from_config(cfg), quiet=True)
    [d] = m["datasets"]
    assert d["records"] == 4 and d["conversations"] == 4 and d["skipped"] == {}


@pytest.mark.parametrize("fixture, reason, shows", [
    ("prompt_only.jsonl", "no_assistant_turn", ["turns: user", "Summarise the plot of Hamlet", "data prep rl"]),
    ("unknown_shape.jsonl", "bad_record", ["fields: 'prompt', 'completion'", "Explain what a hash map is.",
                                           "accepted: OpenAI 'messages'", "speaker prefixes"]),
])
def test_dataset_that_contributes_nothing_is_an_error(tmp_path, tok_cache, fixture, reason, shows):
    """Under mixing=weighted: exit 1 naming the dataset, the top reasons, and the rejected records themselves."""
    cfg = sft_cfg(tmp_path, tok_cache, [
        {"name": "chat-sample", "path": str(ROOT / "stages/ultra3/data_prep_sft/samples/chat_sample.jsonl"), "weight": 1.0},
        {"name": "bad-shape", "path": str(FIXTURES / fixture), "weight": 1.0}], mixing="weighted")
    r, _ = run_py("data-prep-sft", cfg, tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith(("error:", "hint:"))]
    assert len(lines) == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    err, hint = lines
    assert "dataset bad-shape (weight 1) contributes nothing" in err and f"all rejected (top reasons: {reason}" in err
    assert f"{fixture}:1: {reason}:" in hint and "first rejected:" in hint
    for text in shows:
        assert text in hint, hint


def test_no_contribution_hint_without_kept_examples():
    recs = [{"records": 3, "skipped": {"bad_record": 3}, "examples": []}]
    message, hint = driver.no_contribution("d", "weight 1", recs, "records", "policies.max_examples", 0)
    assert "3 records read, all rejected (top reasons: bad_record 3)" in message
    assert "policies.max_examples=0 keeps no examples: set policies.max_examples=3" in hint


# --------------------------------------------------------------------------------------------------
# 4. plain text: one document per file; too few files is refused before work


def test_single_text_file_is_refused_up_front(tmp_path, shared_data, tok_cache):
    text = tmp_path / "wiki.txt"  # a real text: the WikiText-2 articles as one plain-text file
    text.write_text("\n\n".join(json.loads(x)["text"] for x in (shared_data / "pretrain" / "wikitext2-valid.jsonl")
                                .read_text().splitlines()[:20]))
    blend = write_blend(tmp_path / "blend.json", [{"name": "wiki-text", "path": str(text), "weight": 1.0}])
    cfg = compile_stage("data-prep-pretrain", "tiny", blend_path=str(blend), output_dir=str(tmp_path / "out"),
                        tokenizer__cache_dir=tok_cache)
    r, _ = run_py("data-prep-pretrain", cfg, tmp_path)
    assert r.returncode == 2 and "plain text is one document per file, so its 1 file is one document" in r.stderr, r.stderr
    assert "\"sample_by\": \"paragraph\"" in r.stderr and not (tmp_path / "out" / "data").exists()
    code, out = cli("ultra3", "data", "prep", "pretrain", "-c", "tiny", f"blend_path={blend}",
                    f"output_dir={tmp_path / 'out'}", "--dry-run", home=tmp_path)
    assert code == 2 and "plain text is one document per file" in out, out[-2000:]
    s = pretrain.Settings.from_config(cfg)
    spec = load_blend(str(blend)).datasets[0]  # 21 files: one document each, one left to train on
    assert pretrain.text_documents_problem(str(blend), spec, "text", 21, s) is None


def test_held_out_hint_can_be_followed():
    s = pretrain.Settings.from_config(compile_stage("data-prep-pretrain", "tiny", output_dir="/nonexistent/o"))
    spec = load_blend(str(ROOT / "stages/ultra3/data_prep_pretrain/blends/tiny.json"),
                               path_vars={"stdlib": "/x", "shared_data": "/y"}).datasets[0]
    dp = pretrain.DatasetPlan(spec, [], 0, 4.0)
    _, hint = pretrain._no_train_tokens(s, dp, {"train": 0, "valid": 1, "test": 0}, Counter())
    assert "1 record, all held out" in hint and "give it more records" in hint and "lower them" not in hint


# --------------------------------------------------------------------------------------------------
# 6. a stale RAY_ADDRESS fails in seconds


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_stale_ray_address_fails_fast(tmp_path, tok_cache):
    port = closed_port()
    cfg = compile_stage("data-prep-rl", "tiny", output_dir=str(tmp_path / "out"))
    r, seconds = run_py("data-prep-rl", cfg, tmp_path, env={"RAY_ADDRESS": f"127.0.0.1:{port}"}, timeout=120)
    assert r.returncode == 1 and seconds < 30, (seconds, r.stderr[-2000:])  # a correctness bound: not 800 s of retries
    assert f"RAY_ADDRESS=127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in r.stderr
    assert "unset RAY_ADDRESS" in r.stderr and "Traceback" not in r.stderr
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "NEMOTRON_HOME": str(tmp_path)}
    d = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert d.returncode == 0 and "warning: RAY_ADDRESS=" in d.stdout + d.stderr and "unset RAY_ADDRESS" in d.stdout + d.stderr


class _Listener:
    """A TCP server on 127.0.0.1 that is not Ray: ``http`` answers any request as a web server does (HTTP/1.1 400),
    ``silent`` accepts connections and never says a word."""

    def __init__(self, kind: str) -> None:
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.kind, self.conns = kind, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.kind == "http":
                try:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.mark.parametrize("kind", ["http", "silent"])
def test_ray_address_of_something_else_fails_fast(tmp_path, tok_cache, kind):
    """RAY_ADDRESS naming a port where a web server (or a silent one) listens: one line in seconds, not Ray's
    minutes of C++ retries; the dry-run warns the same way."""
    server = _Listener(kind)
    try:
        address = f"127.0.0.1:{server.port}"
        cfg = compile_stage("data-prep-rl", "tiny", output_dir=str(tmp_path / "out"))
        r, seconds = run_py("data-prep-rl", cfg, tmp_path, env={"RAY_ADDRESS": address}, timeout=120)
        assert r.returncode == 1 and seconds < 30, (seconds, r.stderr[-2000:])
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and f"{address} is not a Ray cluster's address" in errors[0], r.stderr[-2000:]
        assert ("'HTTP/1.1 400 Bad Request'" if kind == "http" else "sent nothing back") in errors[0]
        assert "Traceback" not in r.stderr
        env = {**os.environ, "RAY_ADDRESS": address, "NEMOTRON_HOME": str(tmp_path)}
        d = subprocess.run([sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert d.returncode == 0 and "is not a Ray cluster's address" in d.stdout + d.stderr
    finally:
        server.close()


def test_probe_accepts_a_real_ray_head(tmp_path):
    """The probe's gRPC test passes on a real Ray GCS (a local Ray started for the test)."""
    code = ("import ray; from nemotron.data.raypool import probe_address; "
            "ray.init(address='local', num_cpus=1, include_dashboard=False, logging_level='ERROR'); "
            "gcs = ray.get_runtime_context().gcs_address; print('probe', gcs, probe_address(gcs)); ray.shutdown()")
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("probe ")), "")
    assert line.endswith(" None"), done.stdout[-2000:] + done.stderr[-2000:]


# --------------------------------------------------------------------------------------------------
# 7. Ctrl-C says that a rerun resumes


@pytest.mark.slow
def test_ctrl_c_says_rerun_resumes(tmp_path, tok_cache):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "nemotron", "ultra3", "data", "prep", "pretrain", "-c", "tiny", f"output_dir={out}",
            f"tokenizer.cache_dir={tok_cache}", "shards.target_tokens=300000", "run.env.cpus=2"]
    env = {**os.environ, "NEMOTRON_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # Ctrl-C as a terminal has it
    deadline = time.monotonic() + 240
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        if line.startswith("tokenizing") or not line:
            break
    assert "tokenizing" in seen, seen + proc.stderr.read()
    while time.monotonic() < deadline and not list((out / "data").rglob("*.receipt.json")):
        time.sleep(0.2)  # some shards finished: resumable work is there
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, stderr[-2000:])
    assert "interrupted" in stderr and "run the same command again to resume" in stderr, stderr[-2000:]
    again = subprocess.run(args, capture_output=True, text=True, env=env, timeout=400)
    assert again.returncode == 0 and "resuming" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]


# --------------------------------------------------------------------------------------------------
# 8 and 10. missing optional datasets and paths from another folder are warnings in the dry-run


def test_dry_run_from_another_folder_warns(tmp_path, shared_data):
    """``-c tiny`` finds the shared sample beside the checkout from any folder (``${project:../shared/data}``); a
    relative path of the user's is taken from the working directory, and from another folder the warning names
    the project folder where it would match."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd in (elsewhere, ROOT):
        code, out = cli("ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run", cwd=cwd, home=tmp_path)
        assert code == 0 and "optional dataset left out" not in out, out[-2000:]
    code, out = cli("ultra3", "data", "prep", "pretrain", "-c", "tiny", "--dry-run", "path_vars.shared_data=../shared/data",
                    cwd=elsewhere, home=tmp_path)
    assert code == 0 and "2 warnings" in out, out[-2000:]
    assert "datasets (wikitext2): optional dataset left out" in out
    assert f"run from the project folder {ROOT} it matches {shared_data / 'pretrain' / 'wikitext2-valid.jsonl'}" in out


def test_optional_missing_and_skipped_are_warnings_not_errors(tmp_path):
    blend = write_blend(tmp_path / "b.json", [
        {"name": "here", "path": str(ROOT / "stages/ultra3/data_prep_rl/samples/math_sample.jsonl"), "weight": 1.0},
        {"name": "maybe", "path": str(tmp_path / "absent.jsonl"), "weight": 1.0, "optional": True}])
    code, out = cli("ultra3", "data", "prep", "rl", "-c", "tiny", f"blend_path={blend}",
                    f"output_dir={tmp_path / 'o'}", "--dry-run", home=tmp_path)
    assert code == 0 and "warning: " in out and "datasets (maybe): optional dataset left out" in out, out[-2000:]


# --------------------------------------------------------------------------------------------------
# 9. plurals


def test_counts_agree_with_their_nouns(tmp_path, ray_instance, tok_cache, capsys):
    assert driver.count(1, "shards") == "1 shard" and driver.count(2, "shards") == "2 shards"
    assert driver.count(1, "final windows") == "1 final window" and driver.count(1_000, "files") == "1,000 files"
    cfg = sft_cfg(tmp_path, tok_cache, [{"name": "transcripts", "path": str(FIXTURES / "transcripts.jsonl"), "weight": 1.0}],
                  split__validation_fraction=0.0)
    sft.prepare(sft.Settings.from_config(cfg), live_progress=False)
    out = capsys.readouterr().out
    assert "tokenizing 1 shard on" in out and "1 of 1 shard tokenized" in out, out
    assert "1 shards" not in out and "1 windows" not in out and "1 workers" not in out


# --------------------------------------------------------------------------------------------------
# a data prep output copied or moved (to a cluster's storage) reads its own files


def test_a_copied_output_reads_its_own_shards_and_tokenizer(outputs, tmp_path, monkeypatch):
    """data prep wrote blend.json and the manifest's tokenizer folder with absolute paths: a copy of the output named
    the original's shards, so ``data import`` of a damaged copy (its .bin files deleted) passed and training would
    have read the other folder. Now both are relative to the output folder and resolved on read; an older output's
    absolute paths still read, and ``data import`` refuses a copy whose files name another folder."""
    import shutil

    from nemotron.data.outputs import data_manifest, megatron_tokenizer

    src = Path(outputs["a"]["path"])
    copy = tmp_path / "moved" / "a"
    shutil.copytree(src, copy)
    flat = json.loads((copy / "blend.json").read_text())
    assert all(not Path(p).is_absolute() for split in flat.values() for p in split[1::2]), flat
    # resolved from the blend's folder, even from a working directory holding the same relative prefixes
    monkeypatch.chdir(src)
    for pairs in read_blend_pairs(copy / "blend.json").values():
        assert all(prefix.is_relative_to(copy) for _w, prefix in pairs), pairs
    m, where = data_manifest(str(copy / "blend.json"))
    assert megatron_tokenizer(m, where)["tokenizer_model"] == str(copy / "tokenizer")
    code, out = cli("ultra3", "data", "import", str(copy), "--as", "pretrain-data", "-c", "tiny", home=tmp_path / "h")
    assert code == 0 and f"artifact pretrain-data v1: {copy}" in out, out

    damaged = tmp_path / "damaged"
    shutil.copytree(src, damaged)
    for f in (damaged / "data" / "wiki").glob("*.bin"):
        f.unlink()
    [p] = training_data_problems("pretrain", {"data": {"per_split_data_args_path": str(damaged / "blend.json")}})
    assert str(damaged / "data" / "wiki") in p.message and ".bin does not exist" in p.message, p.message
    code, out = cli("ultra3", "data", "import", str(damaged), "--as", "pretrain-data", home=tmp_path / "h")
    assert code == 2 and str(damaged / "data" / "wiki") in out and "nothing was recorded" in out, out

    # an output of an older data prep: absolute paths. In place it still reads; a copy of it is refused at import
    old = tmp_path / "old"
    shutil.copytree(src, old)
    absolute = {k: [x if i % 2 == 0 else str(src / x) for i, x in enumerate(v)] for k, v in flat.items()}
    (old / "blend.json").write_text(json.dumps(absolute))
    assert all(prefix.is_relative_to(src) for pairs in read_blend_pairs(old / "blend.json").values() for _w, prefix in pairs)
    code, out = cli("ultra3", "data", "import", str(old), "--as", "pretrain-data", home=tmp_path / "h")
    assert code == 2 and f"error: {old / 'blend.json'}: names" in out and "outside the folder you import" in out, out
    assert "re-run the data prep stage (force=true)" in out
    (old / "blend.json").write_text(json.dumps(flat))
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["tokenizer"]["megatron"]["tokenizer_model"] = str(src / "tokenizer")
    (old / "manifest.json").write_text(json.dumps(manifest))
    code, out = cli("ultra3", "data", "import", str(old), "--as", "pretrain-data", home=tmp_path / "h")
    assert code == 2 and "tokenizer.megatron.tokenizer_model=" in out and "outside the folder you import" in out, out
    m, where = data_manifest(str(old / "blend.json"))
    assert megatron_tokenizer(m, where)["tokenizer_model"] == str(src / "tokenizer")  # old absolute: still read
