"""Fixtures shared by the tests: the local Slurm cluster, the shared real data, and a module's local Ray
and tokenizer cache.

The cluster and the data skip with a reason when their resource is absent, except under ``CI=true``, where an absent
resource fails the test: CI must exercise them. ``scripts/test.sh`` starts the cluster (as root) and
exports ``SLURM_CONF``, ``NEMOTRON_TEST_SLURM=1`` and ``NEMOTRON_SLURM_{PARTITION,ACCOUNT,...}``.
Tests that use the ``slurm`` fixture get the ``slurm`` marker automatically (``-m "not slurm"``).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
TERMINAL_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE",
}


def pytest_configure(config: pytest.Config) -> None:
    """Hermetic session: records, caches and jobs go to a fresh ``NEMOTRON_HOME`` (never ``~/.nemotron``, which may
    hold artifacts of other checkouts), no inherited terminal size, and SIGINT/SIGTERM have their default
    dispositions again. A shell starts a background job (``nohup bash scripts/test.sh &``) with SIGINT ignored, and
    an ignored signal stays ignored in every child it execs: the Ctrl-C tests' processes would never see theirs. A
    handler set here is reset to the default in each child at exec."""
    os.environ["NEMOTRON_HOME"] = tempfile.mkdtemp(prefix="nemotron-test-home-")
    # The data prep validation probes the Hugging Face hub (nemotron.data.hub) when a config names hub inputs: a
    # local stand-in answers for the whole session (every process the tests start inherits HF_ENDPOINT), so a
    # shipped `-c default` validates alike on a machine with or without network; tests of an unreachable hub set
    # their own (tests/hub_support.py). Nothing in the suite downloads from the real hub.
    from hub_support import serve

    os.environ["HF_ENDPOINT"], _ = serve(200)
    os.environ.pop("HF_HUB_OFFLINE", None)
    # The CLI's tables take their width from COLUMNS when it is set (else 120 off a terminal): a shell's COLUMNS,
    # or pytest-xdist's workers (which export COLUMNS=80), would rewrap every table the tests read
    for var in ("COLUMNS", "LINES"):
        os.environ.pop(var, None)
    # one message per line, as in a log, also when pytest runs at a terminal with -s (nemotron.report.wrapping)
    os.environ["NEMOTRON_WRAP"] = "0"
    if config.getoption("--quick") and not os.environ.get("NEMOTRON_QUICK_MODULES"):
        # the quick tier's module check (tests/quick_tier.py): the processes the tests start report their modules
        # too (tests/quick_probe/sitecustomize.py); pytest-xdist's workers inherit both variables
        os.environ["NEMOTRON_QUICK_MODULES"] = tempfile.mkdtemp(prefix="nemotron-quick-modules-")
        probe = str(REPO_ROOT / "tests" / "quick_probe")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (probe, os.environ.get("PYTHONPATH")) if p)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's ``NEMOTRON_HOME`` of :func:`pytest_configure` goes at the end: nothing of a run is left in the
    temporary folder (each test's ``tmp_path`` goes with pytest's own retention policy)."""
    home = os.environ.get("NEMOTRON_HOME", "")
    if Path(home).name.startswith("nemotron-test-home-"):
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """``os.environ`` as it was before the test, after it: code run in-process (the local entry sets
    ``CUDA_VISIBLE_DEVICES`` and ``OMP_NUM_THREADS`` for its one process) must not change what later tests, or the
    subprocesses they start, see. Taken after the module's and session's fixtures are up, so their variables stay."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _own_nemotron_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test its own ``NEMOTRON_HOME`` (a test may still set another one itself)."""
    monkeypatch.setenv("NEMOTRON_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator:
    """``module_tmp(name)``: a new folder (``tmp_path_factory.mktemp``) for a module-scoped fixture, removed once the
    module's tests are done, unless one of them failed. The local RL, MTP and quantize fixtures write checkpoints of
    0.3-1.2 GB each (model weights plus AdamW state); kept to the session's end they took the whole suite's temporary
    folder past 5 GB, and a run on a nearly full disk failed with ENOSPC."""
    made: list[Path] = []
    failed_before = request.session.testsfailed

    def make(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield make
    if request.session.testsfailed == failed_before:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (required under CI=true)", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class LocalSlurm:
    """The running test cluster, plus small helpers to submit and follow jobs with the CLI tools."""

    conf: Path
    partition: str
    account: str
    cluster: str
    gpus_per_node: int

    @property
    def env(self) -> dict[str, str]:
        """The environment for a subprocess (NeMo-Run's local tunnel, sbatch ...) that talks to it."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def sbatch(self, *args: str) -> str:
        """Submit with the cluster's partition and account; return the job id."""
        out = self.run("sbatch", "--parsable", "-p", self.partition, "-A", self.account, *args)
        return out.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        """The job's state as sacct reports it ('' while accounting has no record yet)."""
        out = self.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State", check=False)
        line = out.stdout.strip().splitlines()[:1]
        return line[0].split()[0] if line else ""  # "CANCELLED by 0" -> "CANCELLED"

    def wait(self, job_id: str, timeout: float = 60) -> str:
        """Poll sacct until the job reaches a terminal state; fail the test after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.state(job_id)
            if state in TERMINAL_STATES:
                return state
            time.sleep(0.5)
        queue = self.run("squeue", "-j", job_id, "-o", "%i %T %r", check=False).stdout
        pytest.fail(f"job {job_id} not finished after {timeout}s (sacct: {state or 'no record'}; squeue: {queue})")


@pytest.fixture(scope="session")
def slurm() -> LocalSlurm:
    if os.environ.get("NEMOTRON_TEST_SLURM") != "1":
        _unavailable(
            os.environ.get("NEMOTRON_TEST_SLURM_REASON")
            or "no local Slurm cluster: run the tests with `bash scripts/test.sh` as root (NEMOTRON_TEST_SLURM=1 unset)"
        )
    conf = Path(os.environ.get("SLURM_CONF", ""))
    if not conf.is_file():
        _unavailable(f"NEMOTRON_TEST_SLURM=1 but SLURM_CONF={str(conf)!r} is not a file")
    if shutil.which("sbatch") is None:
        _unavailable("NEMOTRON_TEST_SLURM=1 but sbatch is not on PATH")
    info = LocalSlurm(
        conf=conf,
        partition=os.environ.get("NEMOTRON_SLURM_PARTITION", "batch"),
        account=os.environ.get("NEMOTRON_SLURM_ACCOUNT", "nemotron"),
        cluster=os.environ.get("NEMOTRON_SLURM_CLUSTER", "nemotron"),
        gpus_per_node=int(os.environ.get("NEMOTRON_SLURM_GPUS_PER_NODE", "8")),
    )
    # a dry submission checks config, munge, controller, partition and account in one go
    probe = info.run("sbatch", "--test-only", "-p", info.partition, "-A", info.account, "--wrap", "true", check=False)
    if probe.returncode != 0:
        _unavailable(f"sbatch --test-only failed on the local Slurm cluster: {probe.stderr.strip()}")
    return info


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` beside the repository: the real public data sets (see its README)."""
    path = REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        _unavailable(f"shared data folder {path} is absent (expected ../shared/data beside the repository)")
    return path


@pytest.fixture
def sshd(slurm, tmp_path_factory):
    """A private sshd on a free port of 127.0.0.1 (tests/ssh_support.py), logging in to this user with a
    throwaway key, its sessions seeing the local Slurm cluster; stopped at the end of the test."""
    from ssh_support import SSHD, start_sshd

    if os.getuid() != 0:
        _unavailable("the SSH tests start their own sshd, which needs root")
    if not Path(SSHD).is_file() or shutil.which("rsync") is None:
        _unavailable(f"{SSHD} or rsync is missing: install openssh-server and rsync (scripts/local_slurm.sh start does)")
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"), {"SLURM_CONF": str(slurm.conf)})
    except RuntimeError as exc:
        _unavailable(str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray (2 CPUs) for a whole test module; the data prep pipelines join it instead of starting
    their own."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def tok_cache(tmp_path_factory) -> str:
    """A tokenizer cache folder for the whole session of a worker (each tokenizer is fetched or built once there:
    converting the 131,072-entry Tekken vocabulary takes about 3 CPU-seconds). The cache is read-only after its
    build; a test of the cache itself makes its own folder."""
    return str(tmp_path_factory.mktemp("tokenizers"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true", default=False,
                     help="the quick tier only (tests/quick_tier.py); fails when a module of src/nemotron was not "
                          "imported by its tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the Slurm tests; under ``--quick`` deselect what is not in the quick tier (``tests/quick_tier.py``);
    then put the files that hold a ``slow`` test first (in their own order, stable otherwise). ``scripts/test.sh``
    hands whole files to pytest-xdist's workers in this order: a long file started last would leave the other
    workers idle while it runs."""
    for item in items:
        if "slurm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
    if config.getoption("--quick"):
        from quick_tier import in_quick_tier

        keep, drop = [], []
        for item in items:
            rel = item.path.relative_to(REPO_ROOT).as_posix() if item.path.is_relative_to(REPO_ROOT) else ""
            name = getattr(item, "originalname", item.name)
            (keep if in_quick_tier(rel, name, (m.name for m in item.iter_markers())) else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


# --quick: every module of src/nemotron imported by the tier's tests. Each process reports its sys.modules at its
# session's end (a pytest-xdist worker through workeroutput); the main process takes the union and fails the session,
# naming each module, when one is missing.
_QUICK_SEEN: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # pytest-xdist, in the main process: a worker finished
    _QUICK_SEEN.update(getattr(node, "workeroutput", {}).get("nemotron_modules", ()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--quick"):
        return
    import sys

    from quick_tier import imported, untouched

    mine = sorted(imported(sys.modules))
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the main process checks the union
        workeroutput["nemotron_modules"] = mine
        return
    _QUICK_SEEN.update(mine)
    folder = Path(os.environ.get("NEMOTRON_QUICK_MODULES", ""))
    if folder.name.startswith("nemotron-quick-modules-"):
        for report in folder.glob("*.txt"):
            _QUICK_SEEN.update(report.read_text(encoding="utf-8").split())
        shutil.rmtree(folder, ignore_errors=True)
    if session.testscollected == 0 or exitstatus not in (0, 1):
        return  # nothing ran (or it was interrupted): nothing to judge
    missing = untouched(_QUICK_SEEN)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")  # after the progress line's "[100%]", which leaves the cursor on its line
    config = session.config
    # the whole tier ran: no test paths, -k or -m of the caller (a part of it, e.g. one file, names what it left out
    # without failing; NEMOTRON_QUICK_STRICT=1 fails a part too)
    whole = (config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.keyword
             and not config.option.markexpr)
    if missing and not whole and os.environ.get("NEMOTRON_QUICK_STRICT") != "1":
        if reporter is not None:
            reporter.write_line(f"quick tier (a part of it ran): {len(missing)} module(s) of src/nemotron not imported")
    elif missing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            reporter.write_line(
                f"quick tier: {len(missing)} module(s) of src/nemotron imported by no quick test (nor by a process one "
                f"started): "
                f"{', '.join(missing)} (add a test of it to a file of tests/quick_tier.py QUICK_FILES)", red=True)
    elif reporter is not None:
        reporter.write_line(f"quick tier: all {len(_QUICK_SEEN)} modules of src/nemotron imported by its tests")
