"""The base root filesystem: Debian bookworm minbase + sshd + python3 + pynvml + slurmd, built once.

The recipe (suite, package list, mirror, pynvml version, this module's format version) is hashed;
the tarball and its unpacked copy are cached under that key, so a second `fleet lab up` only
mounts overlays. Changing the recipe builds a new base beside the old one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from fleet.errors import CouldNotComplete
from fleet.lab.paths import LabPaths
from fleet.lab.sysutil import run

FORMAT = 2  # bump when the build steps below change in a way the key must see
PYTHON_SITE = "usr/lib/python3/dist-packages"


def _pynvml_version() -> str:
    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:  # pragma: no cover - it is a project dependency
        return "13.615.71"


@dataclass(frozen=True)
class BaseRecipe:
    suite: str = "bookworm"
    mirror: str = field(
        default_factory=lambda: os.environ.get("FLEET_LAB_MIRROR", "http://deb.debian.org/debian")
    )
    packages: tuple[str, ...] = (
        "python3",
        "openssh-server",
        "openssh-sftp-server",
        "iproute2",
        "procps",
        "hostname",
        # the same Debian Slurm as the controller's slurmctld: one slurmd per host (`--slurm`)
        "slurmd",
        "slurm-client",
        "munge",
    )
    pynvml: str = field(default_factory=_pynvml_version)
    format: int = FORMAT

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


# el9 hosts: Debian's own dnf 4, its versionlock plugin (in dnf-plugins-core) and rpm, over the
# same userland; /etc/os-release then says Rocky Linux 9 (`fleet.lab.rpmrepo.OS_RELEASE`).
EL9_PACKAGES = ("dnf", "dnf-plugins-core", "rpm")


def recipe_for(os_name: str) -> BaseRecipe:
    """The base of a host flavor: `debian` (the default) or `el9` (a second cached base)."""
    plain = BaseRecipe()
    if os_name == "el9":
        return BaseRecipe(packages=plain.packages + EL9_PACKAGES)
    return plain


Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


def pynvml_wheel(paths: LabPaths, version: str) -> Path | None:
    """The nvidia-ml-py wheel in the cache, downloaded with pip once; None if pip cannot."""
    paths.wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(paths.wheels.glob(f"nvidia_ml_py-{version}-*.whl"))
    if found:
        return found[0]
    cp = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(paths.wheels),
            f"nvidia-ml-py=={version}",
        ],
        capture_output=True,
        timeout=300,
        check=False,
    )
    found = sorted(paths.wheels.glob(f"nvidia_ml_py-{version}-*.whl"))
    return found[0] if cp.returncode == 0 and found else None


def install_pynvml(rootfs: Path, paths: LabPaths, version: str) -> None:
    """Put pynvml where the host's plain `python3` finds it (no pip inside the host)."""
    target = rootfs / PYTHON_SITE
    target.mkdir(parents=True, exist_ok=True)
    wheel = pynvml_wheel(paths, version)
    if wheel is not None:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target)
        return
    # offline fallback: copy the files of the controller's installed distribution (same version)
    dist = metadata.distribution("nvidia-ml-py")
    for f in dist.files or []:
        src = Path(str(dist.locate_file(f)))
        if src.is_file() and ".." not in f.parts:
            dst = target / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def ensure_base(
    paths: LabPaths, recipe: BaseRecipe | None = None, progress: Progress = _noop
) -> Path:
    """Return the unpacked base rootfs for the recipe, building and caching it if needed."""
    recipe = recipe or BaseRecipe()
    key = recipe.key()
    rootfs = paths.base_rootfs(key)
    marker = rootfs / ".fleet-lab-base"
    if marker.is_file():
        return rootfs
    tarball = paths.base_tarball(key)
    paths.cache.mkdir(parents=True, exist_ok=True)
    if not tarball.is_file():
        progress(f"building base rootfs {key} with mmdebstrap (once, ~30 s)")
        _build_tarball(paths, recipe, tarball)
    progress(f"unpacking base rootfs {key}")
    tmp = Path(tempfile.mkdtemp(prefix=f"base-{key}.", dir=paths.cache))
    try:
        run(["tar", "-C", tmp, "--numeric-owner", "-I", "zstd", "-xf", tarball])
        (tmp / ".fleet-lab-base").write_text(json.dumps(asdict(recipe), sort_keys=True) + "\n")
        if rootfs.exists():
            shutil.rmtree(rootfs)
        os.replace(tmp, rootfs)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return rootfs


def _build_tarball(paths: LabPaths, recipe: BaseRecipe, tarball: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="mmdebstrap.", dir=paths.cache))
    root = work / "root"
    try:
        cp = subprocess.run(
            [
                "mmdebstrap",
                "--mode=root",
                "--variant=minbase",
                "--quiet",
                "--include=" + ",".join(recipe.packages),
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "--dpkgopt=path-include=/usr/share/doc/*/copyright",
                '--customize-hook=rm -f "$1"/etc/ssh/ssh_host_*',
                '--customize-hook=chroot "$1" apt-get clean',
                recipe.suite,
                str(root),
                recipe.mirror,
            ],
            capture_output=True,
            timeout=900,
            check=False,
        )
        if cp.returncode != 0:
            raise CouldNotComplete(
                "mmdebstrap failed (is the Debian mirror reachable? set FLEET_LAB_MIRROR): "
                + cp.stderr.decode(errors="replace")[-1500:]
            )
        install_pynvml(root, paths, recipe.pynvml)
        part = tarball.with_name(tarball.name + ".part")
        run(
            [
                "tar",
                "-C",
                root,
                "--numeric-owner",
                "--xattrs",
                "-I",
                "zstd -T0 -3",
                "-cf",
                part,
                ".",
            ]
        )
        os.replace(part, tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
