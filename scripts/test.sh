#!/usr/bin/env bash
# The project's test command: set up .venv, start the local Slurm test cluster where possible, run pytest.
#
#   bash scripts/test.sh [PYTEST ARGS...]      # default: everything under tests/, on 2 pytest-xdist workers
#   bash scripts/test.sh --quick [PYTEST ARGS...]   # the quick tier (tests/quick_tier.py): under 5 minutes on 2
#                                              # cores, every module of src/nemotron imported; no Slurm, no contracts
#
# As root (or with CI=true) the one-node Slurm cluster of scripts/local_slurm.sh is started for the
# run; at exit the last test run still using it stops it (unless someone started it by hand before).
# Its tests then run against it; otherwise they skip with the reason, except under CI=true where a
# missing cluster fails them.
# Exits with pytest's code; "no tests collected" (5) is a failure too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# .venv and the contract tests' interpreter (tests/contract) are independent: installed side by side (on a fresh
# clone pip mostly waits on the package index and the disk; each script's lines carry its own prefix)
# --quick (a pytest option of tests/conftest.py, passed on) runs neither the contract tests nor the Slurm ones: it
# needs neither the contract interpreter nor the cluster
quick=0
for arg in "$@"; do
  [[ $arg == --quick ]] && quick=1
  if [[ $arg == -h || $arg == --help ]]; then  # help straight away: no set-up, no cluster
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    if [[ -x .venv/bin/python ]]; then echo; exec .venv/bin/python -m pytest --help; fi
    echo "(pytest's own options: after the set-up, .venv/bin/python -m pytest --help)"
    exit 0
  fi
done
bash scripts/setup.sh & setup=$!
if ((quick)); then upstream=; else bash scripts/setup_upstream.sh & upstream=$!; fi
rc_setup=0 rc_upstream=0
wait "$setup" || rc_setup=$?
[[ -z $upstream ]] || wait "$upstream" || rc_upstream=$?
if ((rc_setup || rc_upstream)); then
  echo "[test] set-up failed: scripts/setup.sh exited $rc_setup, scripts/setup_upstream.sh $rc_upstream (see above)" >&2
  exit 1
fi

SLURM_SCRIPT=scripts/local_slurm.sh
# shellcheck disable=SC2329  # called from the EXIT trap
stop_cluster_if_last() {
  # The last test run out stops the cluster, and only if a test run started it (not a person).
  # Trying for the exclusive lock drops our shared one first, so of two runs ending together one wins.
  if flock -x -n 9 && [[ -e "$marker" ]]; then bash "$SLURM_SCRIPT" stop 9>&- || true; fi
}

if ((quick)); then
  export NEMOTRON_TEST_SLURM_REASON="--quick: the quick tier has no Slurm tests"
elif [[ $(id -u) == 0 || "${CI:-}" == true ]]; then
  home=$(eval "$(bash "$SLURM_SCRIPT" env)"; echo "$NEMOTRON_SLURM_HOME")
  marker="$home/run/test-session.marker"
  # every test run holds a shared lock while it uses the cluster (fd 9, closed for the daemons)
  mkdir -p "$(dirname "$home")"
  exec 9>>"$home.users"
  flock -s 9
  trap stop_cluster_if_last EXIT
  was_up=0
  bash "$SLURM_SCRIPT" status >/dev/null 2>&1 9>&- && was_up=1
  if bash "$SLURM_SCRIPT" start 9>&-; then
    ((was_up)) || touch "$marker"
    eval "$(bash "$SLURM_SCRIPT" env)"
    export NEMOTRON_TEST_SLURM=1
  else
    echo "[test] the local Slurm cluster did not start: its tests will $([[ "${CI:-}" == true ]] && echo fail || echo skip)" >&2
    ((was_up)) || touch "$marker" 2>/dev/null || true   # stop whatever part of it did start
    export NEMOTRON_TEST_SLURM_REASON="scripts/local_slurm.sh start failed (see its message above the test session)"
  fi
else
  export NEMOTRON_TEST_SLURM_REASON="the local Slurm cluster needs root: run scripts/test.sh as root (e.g. in a container) to include the Slurm tests"
fi

# pytest-xdist: NEMOTRON_TEST_WORKERS processes (default 2; 0 runs in this one process), each test file whole on
# one of them (--dist loadfile: a module's shared fixture is built once), in the order of tests/conftest.py (the files
# with a `slow` test first; --no-loadscope-reorder, else pytest-xdist hands out the files with most tests first,
# which put the few long tests last and left one worker idle at the end). On the
# 2-core machine one process kept only 0.8 of the 2 cores busy (it waits on subprocesses, Slurm and Ray): 2 workers
# took the suite from 37 to 26 minutes, and 3 were no faster. An -n/--numprocesses/--dist or -p no:xdist of the
# caller wins.
workers=${NEMOTRON_TEST_WORKERS:-2}
parallel=()
if ((workers > 0)) && ! printf '%s\n' "$@" | grep -Eq -- '^(-n|--numprocesses|--dist|-n[0-9]+|--numprocesses=.*|no:xdist)$'; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi

# The suite writes checkpoints of the local RL, MTP and quantize tests to the temporary folder (each module's removed
# when its tests pass; about 3 GB at once): on a disk with less free space than that, say so before tests fail one by
# one with "No space left on device"
tmp_dir=${TMPDIR:-/tmp}
free_gib=$(df -Pk "$tmp_dir" | awk 'NR == 2 { print int($4 / 1048576) }')
if [[ -n $free_gib ]] && ((free_gib < 6)); then
  echo "[test] only $free_gib GiB free in $tmp_dir: the suite writes up to about 3 GB there at once; keep 6 GiB free (or set TMPDIR)" >&2
fi

rc=0
.venv/bin/python -m pytest "${parallel[@]}" "$@" 9>&- || rc=$?
if ((rc == 5)); then echo "[test] pytest collected no tests: treated as a failure" >&2; fi
exit "$rc"
