"""Pre-installing a lab's initial release into the shared overlay layers (dpkg or dnf in a
chroot), once per `lab up`, so every host boots already on it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fleet.lab import hosts as H
from fleet.lab import repo, rpmrepo
from fleet.lab.paths import LabPaths
from fleet.lab.sysutil import overlay_build, run


def install_release(
    paths: LabPaths, base: Path, pkgs: list[repo.FakePackage], release: str, releases: list[Any]
) -> None:
    """Pre-install the initial release into the shared layer once (dpkg in a chroot)."""
    if release == "none":
        return
    rel = next(r for r in releases if r.name == release)
    wanted = [(s.name, s.version) for s in rel.packages("debian")]  # upstream versions
    debs = [
        paths.repo / p.deb_name for n, v in wanted for p in pkgs if (p.name, p.upstream) == (n, v)
    ]
    with overlay_build(base, paths.layer, paths.run / "layer") as build:
        tmp = build / "tmp/fleet-lab-debs"
        tmp.mkdir(parents=True, exist_ok=True)
        for d in debs:
            shutil.copy(d, tmp / d.name)
        run(["chroot", build, "dpkg", "-i", *[f"/tmp/fleet-lab-debs/{d.name}" for d in debs]])
        shutil.rmtree(tmp)


def install_release_el9(paths: LabPaths, base: Path, release: str, releases: list[Any]) -> None:
    """Pre-install the initial release into the el9 layer with dnf in a chroot, from a copy of
    the lab's RPM repository (the HTTP server is not up yet): the rpm database is dnf's."""
    specs = [rpmrepo.SYSTEM_PACKAGE]
    stream = None
    if release != "none":
        rel = next(r for r in releases if r.name == release)
        specs += [f"{s.name}-{s.version}" for s in rel.packages("rhel")]
        stream = rel.driver_module_stream()
    with overlay_build(base, H.el9_layer(paths), paths.run / "layer-el9") as build:
        seed = build / "tmp/fleet-lab-rpms"
        shutil.copytree(paths.repo / rpmrepo.DIST, seed)
        dnf: list[str | Path] = ["chroot", build, "dnf", "-y", "-q", "--disablerepo=*",
               "--repofrompath=seed,file:///tmp/fleet-lab-rpms", "--setopt=seed.gpgcheck=0"]
        if stream:  # modular filtering hides the driver until its stream is enabled
            run([*dnf, "module", "enable", f"nvidia-driver:{stream}"])
        run([*dnf, "install", *specs])
        run(["chroot", build, "dnf", "-q", "clean", "all"], check=False)
        shutil.rmtree(seed)
