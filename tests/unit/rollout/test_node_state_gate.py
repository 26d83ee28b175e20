"""The rollout's health gate judges the pool's node profile (issue 23): a host that moved to
the new release but whose GPUs differ from the profile in a way that fails (NVLink links down)
fails its wave, as any other failing health check does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.profiles import NodeProfile
from fleet.domain.node_facts import NvLinkLink
from tests.unit.rollout.helpers import Rig, Wrap


def with_profile(matrix: Matrix, pool: str, profile: dict[str, Any]) -> Matrix:
    pools = dict(matrix.pools)
    pools[pool] = pools[pool].model_copy(update={"profile": "p"})
    return matrix.model_copy(update={"profiles": {"p": NodeProfile.model_validate(profile)},
                                     "pools": pools})


def test_nvlink_down_after_the_move_fails_the_health_gate(matrix: Matrix,
                                                          tmp_path: Path) -> None:
    m = with_profile(matrix, "h100-canary", {"links": {"nvlink_active": 2}})
    rig = Rig(m, tmp_path, pools={"h100-canary": 3})
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    start = rig.fleet.installed_release(first)
    links = [NvLinkLink(link=0, active=True), NvLinkLink(link=1, active=True)]
    down = [NvLinkLink(link=0, active=True), NvLinkLink(link=1, active=False)]

    def probe(hosts: Any, **kw: Any) -> Any:
        out = rig.fleet.probe(hosts, **kw)
        for name, got in out.items():
            if got.value is None:
                continue
            moved = rig.fleet.installed_release(name) != start
            bad = name == first and moved  # one GPU of the first canary loses a link
            gpus = [g.model_copy(update={"nvlink_links": down if bad and g.index == 0
                                         else links}) for g in got.value.gpus]
            got.value = got.value.model_copy(update={"gpus": gpus})
        return out

    backend = Wrap(rig.fleet)
    backend.probe = probe
    rig.backend = backend
    res = rig.start()
    assert res.status == "rolled_back", res.reason
    assert "health gate" in res.reason
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert steps[first].detail["failed_at"] == "verify"
    assert "NVLink links up 1, wanted 2" in str(steps[first].detail.get("error"))
    assert rig.fleet.installed_release(first) == start
