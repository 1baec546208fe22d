"""Our config compiler under the OmegaConf of the pinned frameworks' stack (2.3.x: Megatron-Bridge and NeMo RL pin
``omegaconf>=2.3``; the NeMo containers ship 2.3), whose ``register_resolver`` is the deprecated 2.0 API: the
resolvers are registered through ``register_new_resolver`` there."""

from __future__ import annotations

SCRIPT = r'''
import omegaconf
from upstream import read_payload, write_result
from nemotron.config.compile import compile_config
from nemotron.config.registry import get_stage
c = compile_config(get_stage("pretrain"), "tiny", ["model.name=small"], check_paths=False)
write_result({"version": omegaconf.__version__, "name": c.config["model"]["name"],
              "save": c.config["checkpoint"]["save"]})
'''


def test_compile_under_omegaconf_2_3(upstream, tmp_path):
    out = upstream.run(SCRIPT, {})
    assert out["version"].startswith("2.3.")
    assert out["name"] == "small" and out["save"].endswith("ultra3-pretrain-tiny")
