"""The quick tier (``bash scripts/test.sh --quick``, tests/quick_tier.py): its list names real tests, and its check
that every module of ``src/nemotron`` was imported fails, naming the modules, when one was not."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from quick_tier import NOT_IMPORTED, QUICK_FILES, imported, in_quick_tier, package_modules, untouched

ROOT = Path(__file__).resolve().parents[1]


def test_every_entry_names_a_test_file_or_a_test_of_it() -> None:
    for entry in QUICK_FILES:
        path, _, name = entry.partition("::")
        assert (ROOT / path).is_file(), f"tests/quick_tier.py: {entry!r}: no such file"
        if name:
            tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
            tests = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            assert name in tests, f"tests/quick_tier.py: {entry!r}: {path} has no test {name}"
    assert len(set(QUICK_FILES)) == len(QUICK_FILES)


def test_selection_keeps_listed_tests_that_are_neither_slow_nor_slurm() -> None:
    assert in_quick_tier("tests/test_layers.py", "test_no_import_circles", [])
    assert not in_quick_tier("tests/test_layers.py", "test_no_import_circles", ["slow"])
    assert not in_quick_tier("tests/test_layers.py", "test_no_import_circles", ["parametrize", "slurm"])
    assert not in_quick_tier("tests/launch/test_submit_slurm.py", "test_x", [])
    one = next(e for e in QUICK_FILES if "::" in e)
    path, _, name = one.partition("::")
    assert in_quick_tier(path, name, []) and not in_quick_tier(path, name + "_other", [])


def test_untouched_lists_the_modules_not_seen(tmp_path: Path) -> None:
    pkg = tmp_path / "nemotron"
    (pkg / "sub").mkdir(parents=True)
    for rel in ("__init__.py", "__main__.py", "a.py", "sub/__init__.py", "sub/b.py"):
        (pkg / rel).write_text("")
    assert package_modules(pkg) == ["nemotron", "nemotron.__main__", "nemotron.a", "nemotron.sub", "nemotron.sub.b"]
    assert untouched({"nemotron", "nemotron.sub"}, pkg) == ["nemotron.a", "nemotron.sub.b"]  # __main__ excepted
    assert "nemotron.__main__" in NOT_IMPORTED
    assert imported(["nemotron", "nemotron.sub.b", "nemotronx", "json"]) == {"nemotron", "nemotron.sub.b"}
    assert "nemotron.cli.main" in package_modules() and "nemotron.runtime.common.curves" in package_modules()


def test_a_started_process_reports_its_modules(tmp_path: Path) -> None:
    """tests/quick_probe/sitecustomize.py: a Python process started with it first on PYTHONPATH writes the
    nemotron modules it imported when it exits."""
    env = {**os.environ, "NEMOTRON_QUICK_MODULES": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "quick_probe"), str(ROOT / "src")])}
    subprocess.run([sys.executable, "-c", "import nemotron.runtime.megatron.exit_signal"], env=env, check=True, timeout=60)
    reports = list(tmp_path.glob("*.txt"))
    assert len(reports) == 1
    assert "nemotron.runtime.megatron.exit_signal" in reports[0].read_text().split()


def test_quick_session_fails_naming_modules_no_test_imported(tmp_path: Path) -> None:
    """A --quick session whose tests pass but import none of the package fails (exit 1) and names the modules."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("NEMOTRON_QUICK_MODULES", None)
    env["NEMOTRON_QUICK_STRICT"] = "1"  # one test of the tier is a part of it: judged as the whole tier would be
    done = subprocess.run([sys.executable, "-m", "pytest", "--quick", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "tests/test_layers.py::test_every_folder_has_a_layer"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 passed" in done.stdout
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("quick tier: "))
    assert "imported by no quick test" in line and "nemotron.cli.main" in line and "nemotron.runtime.megatron.trainer" in line
    env.pop("NEMOTRON_QUICK_STRICT")  # without it a part of the tier only reports
    done = subprocess.run([sys.executable, "-m", "pytest", "--quick", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "tests/test_layers.py::test_every_folder_has_a_layer"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "quick tier (a part of it ran): " in done.stdout
