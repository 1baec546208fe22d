"""The contract layer itself: the interpreter sees the pinned sources, Transformer Engine is absent for
Megatron-Core and Model Optimizer (they take their non-TE paths), and the stand-in given to the modules that
import TE unconditionally refuses to be used (so no contract can pass through it by accident)."""

from __future__ import annotations

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
