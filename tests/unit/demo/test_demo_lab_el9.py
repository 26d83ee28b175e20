"""`fleet demo --lab`'s EL9 pool (issue 14): one whole pool of the demo's lab runs EL9."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.jobs import demo as D
from fleet.jobs import demo_lab as L
from fleet.lab import lab
from fleet.lab.model import plan_hosts


def test_the_demo_labs_el9_pool_is_whole_and_the_incidents(tmp_path: Path) -> None:
    m = tmp_path / "lab.yaml"
    m.write_text(L.lab_matrix_from_demo())
    _r, _g, pools = lab.load_releases(m)
    hosts = plan_hosts(L.HOSTS, "netns", pools, el9_pools=(L.EL9_POOL,))
    by_os = {h.name: (h.pool, h.os) for h in hosts}
    assert L.EL9_POOL == D.INCIDENT_POOL == "l40s"
    assert {n for n, (p, os) in by_os.items() if os == "el9"} == \
        {n for n, (p, _os) in by_os.items() if p == "l40s"} == {"h4", "h8"}
    assert by_os["h1"] == ("h100-canary", "debian")  # the canary stays Debian
    # `--os el9:N` alone takes the last hosts, which straddle two pools
    assert {h.pool for h in plan_hosts(L.HOSTS, "netns", pools, 2) if h.os == "el9"} == \
        {"a100", "l40s"}


def test_an_el9_pool_the_matrix_lacks_is_bad_input(tmp_path: Path, monkeypatch) -> None:
    m = tmp_path / "lab.yaml"
    m.write_text(L.lab_matrix_from_demo())
    monkeypatch.setattr(lab, "require_root", lambda _what: None)
    monkeypatch.setattr(lab, "require_tools", lambda: None)
    monkeypatch.setattr(lab, "is_up", lambda _p: False)
    from fleet.lab.paths import LabPaths

    paths = LabPaths(cache=tmp_path / "cache", run=tmp_path / "run")
    with pytest.raises(BadInput, match=r"el9 pools \['h200'\] are not pools of the matrix"):
        lab.up(paths, lab.UpConfig(hosts=8, matrix=m, mode="loopback", el9_pools=("h200",)))


def test_the_hand_install_is_said_with_the_hosts_package_manager() -> None:
    cast = D.Cast("lab", D.GOLDEN, D.CANDIDATE_A, D.CANDIDATE_B, 0.75, {"l40s": 2}, (),
                  D.ECC_RAMP, "h8", "nvidia-container-toolkit", "1.17.8", "l40s",
                  el9_pools=("l40s",), el9_hosts=("h4", "h8"))
    assert cast.hand_install("h8") == ("dnf versionlock delete nvidia-container-toolkit && "
                                       "dnf install nvidia-container-toolkit-1.17.8")
    assert cast.hand_install("h3") == "apt-get install nvidia-container-toolkit=1.17.8-1"
    assert D.SIM_CAST.el9_pools == ()
