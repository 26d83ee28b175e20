"""Build the lab's kube-apiserver and kube-controller-manager once, from Debian's source package.

No registry ships a kube-apiserver binary: Debian 12's `kubernetes` source package (1.20.2, with its
whole `vendor/` tree) builds offline with `golang-1.19-go` and `rsync` (see
shared/spikes/kubernetes/README.md). The build takes about 9-10 minutes and 1.3 GB of memory, so the
two binaries are cached outside any clone, under `/var/cache/fleet-lab/kubernetes-1.20.2/`, with a
manifest of their sha256; a later run (or CI on the same machine) checks the manifest and reuses
them.

The source is fetched with a private sources.list, lists and cache (apt's `Dir::*` options): the
machine's /etc/apt and /var/cache/apt are never written. The scratch tree (2.2 GB) is removed after
the build, whatever its outcome.

Run as `python -m fleet.lab.kube_build` (scripts/test does, before the lab tests); `--check` only
says whether the cache is good.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fleet.errors import CouldNotComplete

K8S_VERSION = "1.20.2"
DEBIAN_SOURCE = "kubernetes"
DEBIAN_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"
BINARIES = ("kube-apiserver", "kube-controller-manager")
CACHE_NAME = f"kubernetes-{K8S_VERSION}"
GO_BIN = Path("/usr/lib/go-1.19/bin")
TOOLS = {"go": "golang-1.19-go", "rsync": "rsync", "dpkg-source": "dpkg-dev"}
MIRRORS = (
    "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    "http://deb.debian.org/debian bookworm main",
    "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    "http://deb.debian.org/debian-security bookworm-security main",
)
MANIFEST = "manifest.json"


def cache_dir() -> Path:
    """Where the binaries live: beside the lab's other caches ($FLEET_LAB_CACHE, default
    /var/cache/fleet-lab); FLEET_KUBE_CACHE names the folder itself."""
    if os.environ.get("FLEET_KUBE_CACHE"):
        return Path(os.environ["FLEET_KUBE_CACHE"])
    return Path(os.environ.get("FLEET_LAB_CACHE") or "/var/cache/fleet-lab") / CACHE_NAME


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached(where: Path | None = None) -> dict[str, Path] | None:
    """The cached binaries when the manifest names this version and every sha256 matches."""
    where = where or cache_dir()
    try:
        manifest = json.loads((where / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("version") != K8S_VERSION:
        return None
    if manifest.get("debian_version") != DEBIAN_VERSION:
        return None
    sums = manifest.get("sha256")
    if not isinstance(sums, dict):
        return None
    found: dict[str, Path] = {}
    for name in BINARIES:
        path = where / name
        if not path.is_file() or sums.get(name) != _sha256(path):
            return None
        found[name] = path
    return found


def sources_list(lines: tuple[str, ...] = MIRRORS) -> str:
    """The private sources.list text: source lines only, for bookworm and its security updates."""
    return "".join(line + "\n" for line in lines)


def apt_options(scratch: Path) -> list[str]:
    """apt-get options that keep every list, cache and lock under `scratch`."""
    return [
        "-o", f"Dir::Etc::SourceList={scratch / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/nonexistent",
        "-o", f"Dir::State::Lists={scratch / 'lists'}",
        "-o", f"Dir::Cache={scratch / 'apt-cache'}",
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip


def missing_tools() -> list[str]:
    """The Debian packages whose tools the build needs and this machine lacks."""
    path = f"{GO_BIN}:{os.environ.get('PATH', '')}"
    return [pkg for tool, pkg in TOOLS.items() if shutil.which(tool, path=path) is None]


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[None]:
    """One build at a time per cache (two CI runs on one machine wait for each other)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    print("== " + " ".join(argv), flush=True)
    done = subprocess.run(argv, cwd=cwd, env=env, check=False)
    if done.returncode != 0:
        raise CouldNotComplete(f"kube build: {argv[0]} exited {done.returncode} in {cwd}")


def _fetch_source(scratch: Path) -> Path:
    (scratch / "sources.list").write_text(sources_list())
    for sub in ("lists/partial", "apt-cache/archives/partial"):
        (scratch / sub).mkdir(parents=True)
    opts = apt_options(scratch)
    _run(["apt-get", *opts, "-qq", "update"], scratch)
    dl = scratch / "dl"
    dl.mkdir()
    _run(["apt-get", *opts, "-qq", "source", "--download-only",
          f"{DEBIAN_SOURCE}={DEBIAN_VERSION}"], dl)  # fmt: skip
    dscs = sorted(dl.glob("*.dsc"))
    if len(dscs) != 1:
        raise CouldNotComplete(f"kube build: expected one .dsc in {dl}, found {len(dscs)}")
    tree = scratch / "k8s"
    _run(["dpkg-source", "--no-check", "-x", str(dscs[0]), str(tree)], dl)
    return tree


def _find_output(tree: Path, name: str) -> Path:
    for candidate in (tree / "_output/bin" / name, tree / "_output/local/bin/linux/amd64" / name):
        if candidate.is_file() and candidate.stat().st_size > 0:
            return candidate
    raise CouldNotComplete(f"kube build: make produced no {name} under {tree / '_output'}")


def build(where: Path | None = None) -> dict[str, Path]:
    """The binaries: from the cache when good, else built from source and cached (minutes)."""
    where = where or cache_dir()
    with _locked(where):
        found = cached(where)
        if found is not None:
            return found
        lacking = missing_tools()
        if lacking:
            raise CouldNotComplete(
                "kube build needs these Debian packages: " + " ".join(lacking)
                + " (scripts/test installs them)"
            )
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix="fleet-kube-build-", dir="/var/tmp"))
        try:
            tree = _fetch_source(scratch)
            env = dict(os.environ)
            env.update(
                PATH=f"{GO_BIN}:{env.get('PATH', '')}", CGO_ENABLED="0", GOFLAGS="-mod=vendor",
                GOPROXY="off", GOCACHE=str(scratch / "gocache"), GOPATH=str(scratch / "gopath"),
                HOME=str(scratch), TMPDIR=str(scratch),
            )  # fmt: skip
            shutil.rmtree(tree / "_output", ignore_errors=True)  # trap 6: a half-made tool
            _run(["make", "WHAT=" + " ".join(f"cmd/{b}" for b in BINARIES)], tree, env)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=where.parent))
            os.chmod(staging, 0o755)  # mkdtemp's 0700 would hide the cache from other users
            for name in BINARIES:
                shutil.copy2(_find_output(tree, name), staging / name)
            manifest = {
                "version": K8S_VERSION, "debian_version": DEBIAN_VERSION,
                "sha256": {name: _sha256(staging / name) for name in BINARIES},
                "build_seconds": round(time.monotonic() - started),
            }  # fmt: skip
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            shutil.rmtree(where, ignore_errors=True)
            staging.rename(where)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        found = cached(where)
        if found is None:
            raise CouldNotComplete(f"kube build: the cache at {where} does not verify")
        print(f"== kube build: {K8S_VERSION} cached in {where} "
              f"after {time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
        return found


def main(argv: list[str]) -> int:
    """`--check`: 0 when the cache is good, 1 when not; no argument: build when needed."""
    if argv[:1] == ["--check"]:
        good = cached()
        print(cache_dir() if good else f"no good kubernetes {K8S_VERSION} cache at {cache_dir()}")
        return 0 if good else 1
    try:
        build()
    except CouldNotComplete as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(cache_dir())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
