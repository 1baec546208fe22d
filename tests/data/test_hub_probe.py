"""What a data prep run needs from outside this machine is probed by its dry-run, and the run refuses in the same
words within seconds: the Hugging Face hub (HF_ENDPOINT, nemotron.data.hub) and a ray profile's address.

Hermetic: the hub is a local HTTP server, or a closed local port (tests/hub_support.py); nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import time

import pytest
from hub_support import closed_port, serve

from nemotron.cli.main import main
from nemotron.data import hub


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error: ")]


@pytest.fixture
def hub_down(monkeypatch) -> str:
    url = closed_port()
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return url


@pytest.fixture
def hub_up(monkeypatch):
    url, server = serve(200)
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield url
    server.shutdown()


# ------------------------------------------------------------------------------------------------ the probe
def test_probe_answers_within_seconds(monkeypatch):
    up, server = serve(200)
    busy, busy_server = serve(503)
    try:
        assert hub.probe(env={"HF_ENDPOINT": up}) is None
        assert hub.probe(env={"HF_ENDPOINT": up + "/"}) is None
        assert hub.probe(env={"HF_ENDPOINT": busy}) == f"{busy} answers HTTP 503"
    finally:
        server.shutdown()
        busy_server.shutdown()
    down = closed_port()
    t0 = time.monotonic()
    reason = hub.probe(env={"HF_ENDPOINT": down})
    assert time.monotonic() - t0 < hub.PROBE_SECONDS + 1
    assert reason is not None and reason.startswith(f"nothing answers at {down} (") and "refused" in reason.lower()
    assert hub.probe(env={"HF_ENDPOINT": up, "HF_HUB_OFFLINE": "1"}).startswith("HF_HUB_OFFLINE=1")
    assert hub.probe(env={"HF_ENDPOINT": "hub.internal:8080"}) == \
        "HF_ENDPOINT='hub.internal:8080' is not an http(s) URL"
    assert hub.endpoint({}) == hub.DEFAULT_ENDPOINT


def test_probe_of_a_silent_server_stops_at_its_timeout():
    """A port that accepts connections but never answers: the probe gives up at its timeout, not after minutes."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.monotonic()
        reason = hub.probe(timeout_s=0.5, env={"HF_ENDPOINT": url})
        took = time.monotonic() - t0
    assert reason is not None and reason.startswith(f"nothing answers at {url}"), reason
    assert took < 3, took


# -------------------------------------------------------------------------------- the dry-run and the run
@pytest.mark.parametrize("stage", ["pretrain", "sft", "rl"])
def test_default_data_prep_dry_run_refuses_an_unreachable_hub(capsys, hub_down, stage):
    """The shipped `-c default` configs fetch their tokenizer and blend from the hub: without it the dry-run is
    not valid, in one error line naming the key, what is fetched, the endpoint and the offline `-c tiny`."""
    code, out, err = _cli(capsys, "ultra3", "data", "prep", stage, "-c", "default", "--dry-run")
    assert code == 2, out[-2000:] + err[-2000:]
    assert "dry run: valid" not in out
    lines = [ln for ln in _errors(out + err) if "Hugging Face hub" in ln]
    assert len(lines) == 1, out[-3000:] + err[-3000:]
    line = lines[0]
    assert f"nothing answers at {hub_down}" in line and "the run would fail" in line, line
    assert f"`nemotron ultra3 data prep {stage} -c tiny`" in line, line
    if stage == "rl":  # its tokenizer is the model's own (the prompts are not tokenized here)
        assert "dapo_math.json:" in line and "1 hf:// dataset of dapo_math.json (line 6)" in line, line
    else:
        assert line.startswith("error: tokenizer.name='nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16': "
                               "the tokenizer and "), line
        assert " hf:// datasets of ultra3_" in line, line


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_default_data_prep_dry_run_is_valid_where_the_hub_answers(capsys, hub_up, stage):
    code, out, err = _cli(capsys, "ultra3", "data", "prep", stage, "-c", "default", "--dry-run")
    assert code == 0 and "dry run: valid" in out, out[-2000:] + err[-2000:]
    assert "Hugging Face hub" not in out + err


@pytest.mark.parametrize("stage", ["pretrain", "sft", "rl"])
def test_tiny_needs_no_hub(capsys, hub_down, stage):
    """The offline sample configs the hint names are valid with the hub down (no probe is made for them)."""
    code, out, err = _cli(capsys, "ultra3", "data", "prep", stage, "-c", "tiny", "--dry-run")
    assert code == 0 and "dry run: valid" in out, out[-2000:] + err[-2000:]


def test_the_run_refuses_as_its_dry_run_did_in_seconds(capsys, hub_down, tmp_path):
    """The run here goes through the same check: refused before anything starts, no 25-30 s of retries."""
    out_dir = tmp_path / "out"
    t0 = time.monotonic()
    code, out, err = _cli(capsys, "ultra3", "data", "prep", "sft", "-c", "default", f"output_dir={out_dir}")
    took = time.monotonic() - t0
    assert code == 2, out[-2000:] + err[-2000:]
    assert any("Hugging Face hub" in ln and f"nothing answers at {hub_down}" in ln for ln in _errors(out + err)), err
    assert took < 15 and not out_dir.exists(), took


def test_the_runtime_fetch_refuses_within_seconds(hub_down, tmp_path):
    """A job's own fetches (the tokenizer, an hf:// dataset) probe first: one message, within seconds."""
    from nemotron.data import tokenizer
    from nemotron.data.sources import resolve_remote
    from nemotron.errors import RuntimeFailure

    pytest.importorskip("huggingface_hub")
    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure) as info:
        tokenizer.resolve("someorg/not-cached-tokenizer-4242", cache_dir=tmp_path)
    assert "tokenizer.name='someorg/not-cached-tokenizer-4242' is fetched from the Hugging Face hub" in str(info.value)
    assert f"nothing answers at {hub_down}" in str(info.value) and "not cached" in str(info.value)
    assert "-c tiny" in (info.value.hint or "")
    pytest.importorskip("datasets")
    with pytest.raises(RuntimeFailure) as info:
        resolve_remote("hf://someorg/some-dataset", None, "train")
    assert f"hf://someorg/some-dataset is fetched from the Hugging Face hub" in str(info.value)
    assert time.monotonic() - t0 < 2 * hub.PROBE_SECONDS + 2


def test_a_cluster_profile_gets_a_warning_not_an_error():
    """From this machine the hub's reachability says nothing certain about a cluster's nodes: a warning there."""
    from types import SimpleNamespace

    from nemotron.profiles.profile import from_table
    from nemotron.validation.data import hub_problems

    s = SimpleNamespace(tokenizer_name="someorg/not-cached-tokenizer-4242", tokenizer_revision=None, blend_path=None)
    env = {"HF_ENDPOINT": closed_port()}
    here = hub_problems(s, None, None, env=env)
    assert [(p.rule, p.severity, p.key) for p in here] == [("data-hub", "error", "tokenizer.name")]
    slurm = hub_problems(s, None, from_table("c", {"executor": "slurm"}), env=env)
    assert [(p.rule, p.severity) for p in slurm] == [("data-hub", "warning")]
    assert "profile c runs on its own nodes" in slurm[0].message
    local = hub_problems(s, None, from_table("box", {"executor": "local"}), env=env)
    assert [p.severity for p in local] == ["error"]


# ---------------------------------------------------------------------------------------- a ray profile
@pytest.mark.parametrize("address", ["http://127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_ray_profile_address_is_probed_by_the_dry_run(capsys, tmp_path, address):
    port = closed_port().rsplit(":", 1)[1]
    address = address.format(port=port)
    env_file = tmp_path / "env.toml"
    env_file.write_text(f'[rp]\nexecutor = "ray"\naddress = "{address}"\n', encoding="utf-8")
    code, out, err = _cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run", "--run", "rp",
                          "--env-file", str(env_file))
    assert code == 2, out[-2000:] + err[-2000:]
    lines = _errors(out + err)
    assert any(ln.startswith(f"error: profile.rp.address='{address}': nothing answers at 127.0.0.1:{port}")
               and "the run submits its job there and would fail" in ln for ln in lines), lines


def test_ray_profile_address_that_answers_passes(capsys, tmp_path):
    url, server = serve(200)  # a listening port stands for the dashboard
    try:
        env_file = tmp_path / "env.toml"
        env_file.write_text(f'[rp]\nexecutor = "ray"\naddress = "{url}"\n', encoding="utf-8")
        code, out, err = _cli(capsys, "ultra3", "data", "prep", "rl", "-c", "tiny", "--dry-run", "--run", "rp",
                              "--env-file", str(env_file))
    finally:
        server.shutdown()
    assert "profile.rp.address" not in out + err, out[-2000:] + err[-2000:]
    assert code == 0, out[-2000:] + err[-2000:]
