"""Experiment tracking of the training runtimes: TensorBoard always, Weights & Biases when configured.

Stdlib only (pure functions): the ``local`` runtime hands the result to transformers' ``Trainer``
(``report_to`` and the environment its TensorBoard / W&B callbacks read) and the Megatron-Bridge entry
to Megatron-Bridge's logger config; both go through :func:`wandb_identity`, so a run is the same W&B
run whichever job of it is logging.

* The W&B run id is derived from the checkpoint folder (``checkpoint.save``), which is stable per run
  name: a job that was requeued, a continuation job of ``run.chain`` and a resubmission all load from
  that folder, so they all log to the same W&B run (``resume="allow"``: created by the first, continued
  by the others).
* The W&B run name is the stage's ``logger.wandb_exp_name`` (per stage and config, e.g.
  ``ultra3-pretrain-local``) and the data version it trains on (``pretrain-data v2``).
* The API key is a profile secret (``WANDB_API_KEY`` in the profile's ``secrets``): it reaches the job
  through its secrets file, wandb reads it from the environment, and nothing here reads, prints or
  writes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WandbIdentity:
    """Who a training run is to W&B.

    Attributes:
        run_id: 16 hex digits (the first 64 bits of the SHA-1 of the checkpoint folder's absolute path).
        name: display name, ``<exp name> (<artifact> <version>)``.
        project, entity: from ``logger.wandb_project`` / ``logger.wandb_entity``.
        save_dir: where wandb keeps its local files (``logger.wandb_save_dir``, else ``<checkpoint.save>/wandb``).
    """

    run_id: str
    name: str
    project: str
    entity: str | None
    save_dir: Path

    def env(self) -> dict[str, str]:
        """The environment ``wandb.init`` reads (``WANDB_RUN_ID``, ``WANDB_RESUME=allow``, ``WANDB_PROJECT``,
        ``WANDB_ENTITY``, ``WANDB_NAME``, ``WANDB_DIR``); never the API key."""
        out = {"WANDB_RUN_ID": self.run_id, "WANDB_RESUME": "allow", "WANDB_PROJECT": self.project,
               "WANDB_NAME": self.name, "WANDB_DIR": str(self.save_dir)}
        if self.entity:
            out["WANDB_ENTITY"] = self.entity
        return out


def wandb_run_id(checkpoint_dir: Path | str) -> str:
    """The W&B run id of the run that saves to ``checkpoint_dir``: the same for every job of the run."""
    return hashlib.sha1(str(Path(checkpoint_dir).absolute()).encode()).hexdigest()[:16]


def data_label(version_dir: Path | str | None, artifact: str) -> str:
    """``"pretrain-data v2"`` for data in the version folder ``.../v2`` of a data prep output; a data prep
    output's first version is its ``output_dir`` itself (``nemotron.data.outputs``), so any other name
    is ``v1``. ``artifact`` alone when the data has no version folder (hand-made data: None)."""
    if version_dir is None:
        return artifact
    name = Path(version_dir).name
    return f"{artifact} {name if name[:1] == 'v' and name[1:].isdigit() else 'v1'}"


def wandb_identity(*, checkpoint_dir: Path | str, project: str | None, entity: str | None = None,
                   exp_name: str | None = None, stage: str = "", data: str | None = None,
                   save_dir: Path | str | None = None) -> WandbIdentity | None:
    """The W&B identity of a run, or None when ``project`` is not set (W&B off).

    ``exp_name``: ``logger.wandb_exp_name`` (default ``ultra3-<stage>``); ``data``: :func:`data_label`.
    """
    if not project:
        return None
    base = exp_name or f"ultra3-{stage}"
    return WandbIdentity(run_id=wandb_run_id(checkpoint_dir), name=f"{base} ({data})" if data else base,
                         project=str(project), entity=str(entity) if entity else None,
                         save_dir=Path(save_dir) if save_dir else Path(checkpoint_dir) / "wandb")


__all__ = ["WandbIdentity", "data_label", "wandb_identity", "wandb_run_id"]
