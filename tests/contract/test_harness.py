"""The contract layer itself: the interpreter sees the pinned sources, Transformer Engine is absent for
Megatron-Core and Model Optimizer (they take their non-TE paths), and the stand-in given to the modules that
import TE unconditionally refuses to be used (so no contract can pass through it by accident)."""

from __future__ import annotations

import os

import pytest

SCRIPT = '''
import sys
from upstream import write_result
import megatron.core, megatron.bridge, nemo_rl
from megatron.core.extensions import transformer_engine as mte
import megatron.bridge.peft.lora_layers  # imports transformer_engine.pytorch unconditionally
te = sys.modules['megatron.bridge.peft.lora_layers'].te
try:
    te.Linear(8, 8)
    refused = False
except RuntimeError as exc:
    refused = "stand-in" in str(exc)
boot = sys.modules["contract_boot"]
try:
    import transformer_engine  # this script is not an importer that gets the stand-in
    late = "found"
except ModuleNotFoundError:
    late = "ModuleNotFoundError"
assert "transformer_engine" not in sys.modules
write_result({
    "files": {m: sys.modules[m].__file__ for m in ("megatron.core", "megatron.bridge", "nemo_rl")},
    "megatron_core_have_te": mte.HAVE_TE,
    "standin_refuses": refused,
    "standin_users": sorted({user for _, user in boot.STANDIN_USERS}),
    "standin_for": list(boot.STANDIN_FOR),
    "late_probe": late,
})
'''


@pytest.fixture(scope="module")
def probe(upstream):
    return upstream.run(SCRIPT)


def test_sources_are_the_pinned_archives(upstream, probe):
    roots = {"megatron.core": upstream.megatron_lm, "megatron.bridge": upstream.megatron_bridge,
             "nemo_rl": upstream.nemo_rl}
    for module, root in roots.items():
        assert probe["files"][module].startswith(str(root)), (module, probe["files"][module])


def test_transformer_engine_absent_for_megatron_core(probe):
    assert probe["megatron_core_have_te"] is False


def test_standin_refuses_use_and_names_its_importers(probe):
    assert probe["standin_refuses"] is True
    assert "megatron.bridge.peft.lora_layers" in probe["standin_users"], probe["standin_users"]
    assert set(probe["standin_users"]) <= set(probe["standin_for"]), probe["standin_users"]


def test_transformer_engine_absent_for_everyone_else(probe):
    """A module that probes for TE after the stand-in was handed out still finds none."""
    assert probe["late_probe"] == "ModuleNotFoundError"


# ---------------------------------------------------------------------------------------------------------------
# The runner: each script runs in a fork of one contract interpreter that imported the frameworks once
# (upstream._ForkServer). What a script sees must be what a fresh `python boot.py SCRIPT` would see.

SEES = '''
import os, signal, sys, threading
from upstream import read_payload, write_result
payload = read_payload()
print("to stdout")
write_result({"payload": payload, "cwd": os.getcwd(), "argv0": sys.argv[0], "main": __name__,
              "offline": os.environ.get("HF_HUB_OFFLINE"), "result_env": "CONTRACT_RESULT" in os.environ,
              "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
              "sigint_python": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
              "threads": threading.active_count(), "boot": sys.modules["contract_boot"].__file__,
              "pid_is_new": os.getpid() != int(payload["parent"])})
'''


def test_a_script_gets_its_payload_folder_environment_and_default_signals(upstream, tmp_path):
    got = upstream.run(SEES, {"x": [1, 2], "parent": os.getpid()}, cwd=tmp_path)
    assert got["payload"]["x"] == [1, 2] and got["cwd"] == str(tmp_path) and got["main"] == "__main__"
    assert got["argv0"].endswith("script.py") and got["offline"] == "1" and got["result_env"] is True
    assert got["sigterm_default"] is True and got["sigint_python"] is True and got["threads"] == 1
    assert got["boot"].endswith("boot.py") and got["pid_is_new"] is True


def test_a_failing_script_reports_its_exit_status_and_output(upstream):
    from upstream import UpstreamError

    script = 'import sys\nprint("said on stdout")\nprint("said on stderr", file=sys.stderr)\nsys.exit(3)\n'
    with pytest.raises(UpstreamError) as info:
        upstream.run(script)
    assert "exited 3" in str(info.value) and "said on stdout" in str(info.value) and "said on stderr" in str(info.value)
    with pytest.raises(UpstreamError, match=r"exited 1:(.|\n)*ZeroDivisionError"):
        upstream.run("x = 1\ny = x / 0\n")


def test_a_script_past_its_timeout_is_killed_and_the_next_one_runs(upstream):
    import subprocess

    with pytest.raises(subprocess.TimeoutExpired):
        upstream.run("import time\ntime.sleep(120)\n", timeout=2)
    assert upstream.run("from upstream import write_result\nwrite_result(7)\n") == 7


def test_a_server_that_cannot_start_says_why(upstream, tmp_path):
    """Without the upstream sources on its path the server's imports fail: one error with the traceback's tail."""
    from upstream import UpstreamError, _ForkServer

    env = {**upstream.env(), "PYTHONPATH": str(tmp_path)}
    with pytest.raises(UpstreamError, match=r"boot.py --serve did not start:(.|\n)*No module named 'megatron"):
        _ForkServer(upstream.python, env)
