# Sourced by scripts/setup_upstream.sh: install packages into a venv with uv's pip interface, falling back to pip. uv is installed into the venv with pip first (one small wheel), and it is given the indexes pip
# is configured with (`pip config list`, PIP_* variables): find-links, index-url, extra-index-url, cert. Every package
# index pip would use is used, in pip's way of choosing among them (--index-strategy unsafe-best-match: the best
# version of a package on any index, not the first index that has it), so a local wheel that pip would take (a CPU
# build of torch, say) is the one uv takes too.
#
# Measured on a 2-core machine (2026-12-03), tests/contract/requirements.txt into an empty venv: pip 2.5 min, uv 17 s,
# and the two venvs hold the same versions of all 189 packages (every top-level one is pinned there). scripts/setup.sh
# stays on pip: the project's ranges resolve differently (uv took mistral-common 1.9.1 and numpy 2.4.6 where pip, and
# uv.lock, have 1.13.1 and 2.3.5), and the lock's torch is not the CPU build this machine image carries.
#
#   venv_install PY [ARGS...]     # ARGS as for `pip install`
#
# NEMOTRON_INSTALLER=pip skips uv. Messages go to stdout prefixed with $INSTALL_TAG.

_uv_index_args() {
  # pip's configured indexes as uv options, one per line
  "$1" - <<'PYEOF'
import shlex, subprocess, sys

out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
flags = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url"}
seen = []
for line in out.splitlines():
    key, sep, value = line.partition("=")
    if not sep:
        continue
    flag = flags.get(key.rsplit(".", 1)[-1])
    if flag is None:
        continue
    for v in shlex.split(value):
        for item in v.split():
            if (flag, item) not in seen and not (flag == "--index-url" and any(f == flag for f, _ in seen)):
                seen.append((flag, item))
for flag, item in seen:
    print(flag)
    print(item)
PYEOF
}

_pip_cert() {
  "$1" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p" | head -n 1
}

venv_install() {
  local py=$1
  shift
  local venv_bin
  venv_bin=$(dirname "$py")
  if [[ "${NEMOTRON_INSTALLER:-uv}" != pip ]]; then
    if [[ -x "$venv_bin/uv" ]] || "$py" -m pip --quiet --disable-pip-version-check install uv >/dev/null 2>&1; then
      local args=() env=(UV_NO_PROGRESS=1) cert
      mapfile -t args < <(_uv_index_args "$py")
      cert=$(_pip_cert "$py")
      [[ -z "${SSL_CERT_FILE:-}" && -n "$cert" ]] && env+=("SSL_CERT_FILE=$cert")
      if env "${env[@]}" "$venv_bin/uv" pip install --quiet --python "$py" --index-strategy unsafe-best-match \
          "${args[@]}" "$@"; then
        return 0
      fi
      printf '%s uv could not install %s: trying pip\n' "${INSTALL_TAG:-[install]}" "$*"
    else
      printf '%s uv did not install: using pip\n' "${INSTALL_TAG:-[install]}"
    fi
  fi
  "$py" -m pip --quiet --disable-pip-version-check install --upgrade pip >/dev/null 2>&1 || true
  "$py" -m pip --quiet --disable-pip-version-check install "$@" 2>&1 \
    | { grep -v -E "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}
