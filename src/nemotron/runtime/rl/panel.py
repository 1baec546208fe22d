"""The MOPD teacher panel as the local runtimes read it (stdlib only): ``mopd`` (:mod:`nemotron.runtime.rl.rl_settings`)
and ``mopd-warmup`` (:mod:`nemotron.runtime.rl.warmup`, whose cluster job imports this in the nemo-rl image) route each
prompt by its task through the same table."""

from __future__ import annotations

from pathlib import Path

from nemotron.runtime.common.settings import SettingsError, config_path


def panel(cfg: dict, unresolved_ok: bool) -> tuple[dict[str, Path], str]:
    """``({agent alias: teacher checkpoint}, default alias)`` as the cluster runtime builds NeMo RL's
    ``teacher_model_by_agent_name`` / ``default_teacher_alias`` (:func:`nemotron.runtime.rl.nemo_rl.teacher_map`, on
    the config ``validation.prepare`` filled: unset slots fall back to ``general``)."""
    from nemotron.errors import ConfigError
    from nemotron.layout.rules import resolve_teachers
    from nemotron.runtime.rl.nemo_rl import teacher_map

    teachers = cfg.get("_teachers") if isinstance(cfg.get("_teachers"), dict) else {}
    panel, _ = resolve_teachers(teachers)
    if not panel.get("general"):
        raise SettingsError("_teachers.general is not set: the panel needs a general teacher (every unset slot and "
                            "every unrouted task falls back to it)")
    try:
        by_agent, alias = teacher_map({**cfg, "on_policy_distillation": {**(cfg.get("on_policy_distillation") or {}),
                                                                         "enabled": True}})
    except ConfigError as exc:
        raise SettingsError(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None
    out: dict[str, Path] = {}
    for agent, ckpt in by_agent.items():
        p = config_path(ckpt, f"_teachers (agent {agent})") if not (unresolved_ok and "${" in str(ckpt)) else Path(str(ckpt))
        assert p is not None
        out[agent] = p
    assert alias is not None
    return out, alias


def route(agent: str | None, teachers: dict[str, Path], default_alias: str) -> str:
    """The teacher alias that scores a prompt of task/agent ``agent``: its own entry of
    ``teacher_model_by_agent_name``, else ``default_teacher_alias`` (NeMo RL's fallback; ours maps it to the
    general teacher unless ``teacher_routing.default_slot`` says otherwise)."""
    return agent if agent is not None and agent in teachers else default_alias


__all__ = ["panel", "route"]
