"""Where the lab keeps things: a cache keyed by recipe (survives `down`) and a run directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/var/cache/fleet-lab")
DEFAULT_RUN = Path("/run/fleet-lab")


@dataclass(frozen=True)
class LabPaths:
    cache: Path
    run: Path

    @classmethod
    def from_env(cls) -> LabPaths:
        cache = Path(os.environ.get("FLEET_LAB_CACHE") or DEFAULT_CACHE)
        run = Path(os.environ.get("FLEET_LAB_DIR") or DEFAULT_RUN)
        return cls(cache=cache, run=run)

    # --- cache (kept across labs) ---
    @property
    def wheels(self) -> Path:
        return self.cache / "wheels"

    def base_tarball(self, key: str) -> Path:
        return self.cache / f"base-{key}.tar.zst"

    def base_rootfs(self, key: str) -> Path:
        """The unpacked base, the read-only lower layer of every host."""
        return self.cache / f"base-{key}"

    # --- run directory (one lab) ---
    @property
    def state_file(self) -> Path:
        return self.run / "lab.json"

    @property
    def ssh(self) -> Path:
        return self.run / "ssh"

    @property
    def client_key(self) -> Path:
        return self.ssh / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh / "known_hosts"

    @property
    def repo(self) -> Path:
        return self.run / "repo"

    @property
    def layer(self) -> Path:
        """Shared lab layer (sshd config, apt source, tools) between base and each host's upper."""
        return self.run / "layer"

    @property
    def logs(self) -> Path:
        return self.run / "logs"

    @property
    def daemon_pid(self) -> Path:
        return self.run / "daemon.pid"

    @property
    def host_init(self) -> Path:
        return self.run / "host-init.sh"

    @property
    def slurm(self) -> Path:
        """The lab's Slurm on the controller side: config, munge, slurmctld state (`--slurm`)."""
        return self.run / "slurm"

    def host_dir(self, name: str) -> Path:
        return self.run / "hosts" / name

    def host_root(self, name: str) -> Path:
        """The host's merged overlay, as the controller sees it."""
        return self.host_dir(name) / "root"
