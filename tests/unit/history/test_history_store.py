"""The repository API other layers call: hosts, snapshots with counters and findings, events."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet.history import (
    FindingRecord,
    GpuCounters,
    History,
    add_snapshot,
    count_events,
    findings_of,
    get_host,
    gpu_samples,
    list_events,
    list_hosts,
    open_history,
    os_actor,
    record_event,
    upsert_host,
)
from fleet.history.models import Host

T0 = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[History]:
    with open_history(str(tmp_path / "fleet.db")) as history:
        yield history


def test_upsert_host_creates_then_updates_only_given_fields(h: History) -> None:
    hid = upsert_host(h, "gpu01", pool="h100", gpu_model="H100", gpu_count=8,
                      labels={"rack": "r1"}, seen_at=T0)
    assert upsert_host(h, "gpu01", labels={"rack": "r9"}, seen_at=T0 + dt.timedelta(hours=1)) == hid
    upsert_host(h, "gpu01", seen_at=T0 - dt.timedelta(days=1))  # older: last_seen stays
    host = get_host(h, "gpu01")
    assert host is not None
    assert (host.pool, host.gpu_model, host.gpu_count) == ("h100", "H100", 8)
    assert host.labels == {"rack": "r9"}  # reassigned dict, so the change is stored
    assert host.first_seen == T0
    assert host.last_seen == T0 + dt.timedelta(hours=1)


def test_list_hosts_by_pool_then_name(h: History) -> None:
    for name, pool in [("b", "l40s"), ("a", "h100"), ("c", "h100")]:
        upsert_host(h, name, pool=pool)
    assert [x.name for x in list_hosts(h)] == ["a", "c", "b"]
    assert [x.name for x in list_hosts(h, pool="h100")] == ["a", "c"]


def test_add_snapshot_with_counters_and_findings(h: History) -> None:
    sid = add_snapshot(
        h, "gpu01", taken_at=T0, source="nvml", pool="h100", gpu_model="H100",
        driver_nvml="550.54.15", driver_kmod="550.54.15", driver_package="550.54.15-1",
        release="r550", facts={"kernel": "6.1.0"},
        gpus=[GpuCounters(gpu_index=0, uuid="GPU-a", pci_bus_id="0000:9b:00.0",
                          ecc_uncorrected_aggregate=2, remapped_pending=True,
                          xid_counts={"79": 1}),
              {"gpu_index": 1, "uuid": "GPU-b"}],
        findings=[FindingRecord(check_id="remap_pending", severity="fail", gpu_index=0,
                                message="row remap pending", remediation="reset GPU",
                                details={"pending": True})],
    )
    host = get_host(h, "gpu01")
    assert host is not None and host.gpu_count == 2 and host.last_seen == T0
    [f] = findings_of(h, sid)
    assert (f.check_id, f.severity, f.remediation, f.details) == (
        "remap_pending", "fail", "reset GPU", {"pending": True})
    a = gpu_samples(h, uuid="GPU-a")
    assert len(a) == 1 and a[0].ecc_uncorrected_aggregate == 2 and a[0].xid_counts == {"79": 1}
    assert a[0].retired_sbe is None  # unread counters stay None, never a silent 0


def test_unreachable_snapshot_does_not_move_last_seen(h: History) -> None:
    add_snapshot(h, "gpu01", taken_at=T0, source="nvml", gpus=[{"gpu_index": 0}])
    add_snapshot(h, "gpu01", taken_at=T0 + dt.timedelta(hours=1), source="none",
                 reachable=False)
    host = get_host(h, "gpu01")
    assert host is not None and host.last_seen == T0 and host.gpu_count == 1


def test_gpu_trend_query_by_host_gpu_and_window(h: History) -> None:
    for day in range(5):
        add_snapshot(h, "gpu01", taken_at=T0 + dt.timedelta(days=day), source="nvml",
                     gpus=[{"gpu_index": 0, "ecc_corrected_volatile": day * 10},
                           {"gpu_index": 1, "ecc_corrected_volatile": 0}])
    add_snapshot(h, "gpu02", taken_at=T0, source="nvml", gpus=[{"gpu_index": 0}])
    trend = gpu_samples(h, host="gpu01", gpu_index=0, since=T0 + dt.timedelta(days=1),
                        until=T0 + dt.timedelta(days=4))
    assert [s.ecc_corrected_volatile for s in trend] == [10, 20, 30]


def test_invalid_gpu_counters_rejected_before_writing(h: History) -> None:
    with pytest.raises(ValidationError):
        add_snapshot(h, "gpu01", taken_at=T0, source="nvml",
                     gpus=[{"gpu_index": "zero", "ecc_corrected_volatile": "many"}])
    assert list_hosts(h) == []  # nothing half-written


def test_events_newest_first_with_limit_and_kind(h: History) -> None:
    for i in range(5):
        record_event(h, "probe" if i % 2 else "rollout", f"host{i}", f"m{i}",
                     at=T0 + dt.timedelta(minutes=i))
    assert [e.message for e in list_events(h, limit=3)] == ["m4", "m3", "m2"]
    assert [e.message for e in list_events(h, kind="probe")] == ["m3", "m1"]
    assert count_events(h) == 5 and count_events(h, kind="rollout") == 3


def test_event_actor_is_the_os_user_unless_given(h: History,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    record_event(h, "k", "s", "m")
    record_event(h, "k", "s", "m", actor="alice")
    assert [e.actor for e in list_events(h)] == ["alice", os_actor()]
    monkeypatch.setattr("os.getuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", "bob")
    monkeypatch.setattr("getpass.getuser", lambda: "root")
    assert os_actor() == "bob"


def test_event_in_the_callers_transaction_is_atomic(h: History) -> None:
    with pytest.raises(RuntimeError), h.write() as s:
        upsert_host(h, "gpu01", pool="h100", session=s)
        record_event(h, "quarantine", "gpu01", "opened", session=s)
        raise RuntimeError("crash before commit")
    assert list_hosts(h) == [] and count_events(h) == 0
    with h.write() as s:
        upsert_host(h, "gpu01", session=s)
        record_event(h, "quarantine", "gpu01", "opened", {"why": "xid 79"}, session=s)
    assert count_events(h) == 1 and len(list_hosts(h)) == 1


def test_json_reassignment_is_stored(h: History) -> None:
    upsert_host(h, "gpu01", labels={"rack": "r1"})
    with h.write() as s:
        from sqlmodel import select

        host = s.exec(select(Host)).one()
        host.labels = {**host.labels, "rack": "r2"}
        s.add(host)
    got = get_host(h, "gpu01")
    assert got is not None and got.labels == {"rack": "r2"}
