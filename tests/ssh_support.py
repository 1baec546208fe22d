"""A private OpenSSH server on localhost for the SSH-tunnel tests (Debian's openssh-server).

It never touches the system's sshd: its own config file, host key, authorized_keys and pid file live
in a temporary folder, it listens on a free high port of 127.0.0.1 only, runs in the foreground as a
child of the test (root: sshd must be able to switch to the logged-in user), and is stopped at the end.
The one system path it needs is sshd's compiled-in privilege-separation folder (``/run/sshd`` on
Debian), made when absent and removed afterwards if it was made here.

Clients reach it as a login node is reached: OpenSSH's ``ssh`` (used by rsync and by ``nemotron
status/logs/cancel``) reads a config file with the port, key and known host written here, passed with
``-F`` by a small ``ssh`` wrapper first on ``PATH``; Paramiko (NeMo-Run's ``SSHTunnel``) gets the port
and key from the profile. The server's ``SetEnv SLURM_CONF=...`` plays the part of a login node's
Slurm configuration.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # Debian's compiled-in privilege separation path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalSshd:
    """A running private sshd; ``env`` is what a client process needs (the ``ssh`` wrapper on PATH)."""

    folder: Path
    port: int
    user: str
    identity: Path
    proc: subprocess.Popen
    made_privsep: bool

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.folder / 'bin'}:{os.environ.get('PATH', '')}"}

    def ssh(self, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "127.0.0.1", command], check=False, env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.made_privsep:
            with contextlib.suppress(OSError):
                PRIVSEP_DIR.rmdir()

    def log(self) -> str:
        path = self.folder / "sshd.log"
        return path.read_text(errors="replace") if path.exists() else ""


def start_sshd(folder: Path, server_env: dict[str, str]) -> LocalSshd:
    """Start a private sshd serving the current user with a throwaway key; ``server_env`` is set in
    every session (``SetEnv``). Raises RuntimeError with sshd's own message when it does not come up."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    user = pwd.getpwuid(os.getuid()).pw_name
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"nemotron-test-{name}",
                        "-f", str(folder / name)], check=True, capture_output=True)
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    os.chmod(folder / "authorized_keys", 0o600)
    port = free_port()
    set_env = " ".join(f"{k}={v}" for k, v in server_env.items())
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\nPidFile {folder / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nAllowUsers {user}\nPubkeyAuthentication yes\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        "UsePAM no\nStrictModes no\nX11Forwarding no\nPrintMotd no\nSubsystem sftp internal-sftp\n"
        + (f"SetEnv {set_env}\n" if set_env else ""),
        encoding="utf-8")
    host_pub = (folder / "host_key.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (folder / "ssh_config").write_text(
        f"Host 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {folder / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        "  ConnectTimeout 10\n", encoding="utf-8")
    (folder / "bin").mkdir(exist_ok=True)
    wrapper = folder / "bin" / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh", path="/usr/bin:/bin") or "ssh"} '
                       f'-F {folder / "ssh_config"} "$@"\n')
    wrapper.chmod(0o755)
    made_privsep = not PRIVSEP_DIR.exists()
    if made_privsep:
        PRIVSEP_DIR.mkdir(mode=0o755)
    check = subprocess.run([SSHD, "-t", "-f", str(folder / "sshd_config")], check=False, capture_output=True,
                           text=True)
    if check.returncode != 0:
        raise RuntimeError(f"sshd -t refused the test config: {check.stderr.strip()}")
    with open(folder / "sshd.log", "wb") as log:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(folder / "sshd_config")], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)
    server = LocalSshd(folder, port, user, folder / "client_key", proc, made_privsep)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if server.ssh("true", timeout=10).returncode == 0:
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"the test sshd did not accept a login within 15 s: {server.log().strip()[-500:]}")
