"""The quick tier: a selection of the suite for the edit-test loop (``bash scripts/test.sh --quick``).

The whole suite stays the CI gate; ``--quick`` only deselects. It keeps the tests of the files in :data:`QUICK_FILES`
that are neither ``slow`` nor ``slurm``: the in-process tests of config compilation, validation rules, profiles,
dry-run rendering, data prep units, the runtimes' pure parts and the docs, about 3 CPU-minutes (measured per test
with ``--durations``; docs/testing.md gives the wall times). Left out: the Slurm and SSH tests, the contract tests
(one upstream interpreter each), the real data prep runs on Ray, the local training runs and the Ctrl-C tests.

It must still touch every module of ``src/nemotron``: at the end of a ``--quick`` session every module must have
been imported by the tests, in the pytest processes (each pytest-xdist worker reports its own ``sys.modules``) or in
a Python process a test started (``tests/quick_probe/sitecustomize.py``, first on their ``PYTHONPATH``, writes each
one's modules when it exits); the union counts. A module none of them imported fails the session, named
(:func:`untouched`): add a quick test that runs it (or its test file to :data:`QUICK_FILES`), not an import alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "nemotron"

#: Test files of the quick tier (paths from the repository root), or one test of a file (``path::function``): their
#: tests that are neither ``slow`` nor ``slurm``.
QUICK_FILES: tuple[str, ...] = (
    "tests/test_layers.py",
    "tests/test_docs_links.py",
    "tests/test_assets.py",
    "tests/test_quick_tier.py",
    "tests/config/test_artifacts_latest.py",
    "tests/config/test_catalogue.py",
    "tests/config/test_image_census.py",
    "tests/config/test_images.py",
    "tests/config/test_keys.py",
    "tests/config/test_long_context.py",
    "tests/config/test_registry.py",
    "tests/config/test_yamlio.py",
    "tests/profiles/test_env_settings.py",
    "tests/profiles/test_profile_setup.py",
    "tests/profiles/test_profiles.py",
    "tests/profiles/test_seed_profile.py",
    "tests/validation/test_cluster_storage.py",
    "tests/validation/test_estimate.py",
    "tests/validation/test_output_folders.py",
    "tests/validation/test_validation.py",
    "tests/data/test_data_prep_pretrain_units.py",
    "tests/data/test_data_prep_sft_chat.py",
    "tests/runtime/test_quantize.py",
    "tests/runtime/test_rl.py",
    "tests/runtime/test_curves.py",
    "tests/runtime/test_mtp_boost.py",
    "tests/runtime/test_mopd_warmup.py",
    "tests/cli/test_pipe_cycles.py",
    # a real local pretrain run, resumed (the trainer, its loss and MoE parts, the curves), and two cheap refusals
    "tests/runtime/test_runtime_local_refusals.py::test_resumed_run_summary_spans_the_whole_run",
    "tests/runtime/test_runtime_local_refusals.py::test_a_second_run_on_a_held_checkpoint_folder_is_refused",
    "tests/runtime/test_runtime_local_refusals.py::test_paths_of_the_wrong_kind_are_refused_by_run_and_dry_run",
    "tests/runtime/test_exit_signal.py",
    "tests/runtime/test_runtime_convert.py",
    "tests/runtime/test_export_check.py",
    "tests/runtime/test_rl_reward.py",
    "tests/runtime/test_rl_local.py",
    # its other tests share a module fixture that quantizes the small model (30 s): this one runs the entry's checks
    "tests/runtime/test_quantize_local.py::test_export_folder_that_is_holds_or_lies_in_the_source_is_refused_before_loading",
    "tests/launch/test_backends.py",
    "tests/launch/test_cluster_scripts.py",
    "tests/launch/test_why.py",
    "tests/cli/test_dryrun_golden.py",
    "tests/cli/test_cli_help_completion.py",
    "tests/cli/test_json_schemas.py",
    "tests/cli/test_artifacts_command.py",
    # the dry run refuses what the run refuses; did-you-mean; list/--help marks (in process, about 10 s)
    "tests/cli/test_cli_refusals.py",
)

#: Modules the check does not ask for, with the reason: ``python -m nemotron`` runs the CLI on import.
NOT_IMPORTED = {"nemotron.__main__": "importing it runs the CLI (python -m nemotron); console.py is its body"}


def package_modules(package: Path = PACKAGE) -> list[str]:
    """Dotted names of every module of the package (``nemotron.cli.main``; a package as its own name)."""
    out = []
    for path in sorted(package.rglob("*.py")):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def imported(modules: Iterable[str], package: str = "nemotron") -> set[str]:
    """The names in ``modules`` (e.g. ``sys.modules``) that belong to ``package``."""
    return {m for m in modules if m == package or m.startswith(package + ".")}


def untouched(seen: Iterable[str], package: Path = PACKAGE) -> list[str]:
    """Modules of the package that are not in ``seen`` (nor in :data:`NOT_IMPORTED`), sorted."""
    seen = set(seen)
    return [m for m in package_modules(package) if m not in seen and m not in NOT_IMPORTED]


def in_quick_tier(rel_path: str, name: str, markers: Iterable[str]) -> bool:
    """Whether a test (its file relative to the repository root, its function's name without parameters, its
    marker names) is in the quick tier: its file, or ``file::name``, is listed, and it is neither slow nor Slurm."""
    names = set(markers)
    listed = rel_path in QUICK_FILES or f"{rel_path}::{name}" in QUICK_FILES
    return listed and "slow" not in names and "slurm" not in names
