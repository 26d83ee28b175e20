"""slurm.conf, gres.conf and the per-boot services script of `fleet lab up --slurm` (pure text)."""

from __future__ import annotations

import re
from pathlib import Path

from fleet.lab import hostfleet
from fleet.lab import slurm as S
from fleet.lab.model import plan_hosts

POOLS = {"h100-canary": ("H100", True), "h100": ("H100", False), "a100": ("A100", False),
         "l40s": ("L40S", False)}
SP = S.SlurmPaths(Path("/run/fleet-lab-x/slurm"))


def _conf(n: int = 5, interval: int = 10) -> dict[str, list[str]]:
    """slurm.conf as {key: [values]} (NodeName and PartitionName lines keep the whole line)."""
    text = S.slurm_conf(plan_hosts(n, "netns", POOLS), SP, "ctl", health_interval=interval)
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_controller_side_never_uses_default_ports_or_the_system_munge() -> None:
    c = _conf()
    assert c["SlurmctldHost"] == ["ctl(10.77.0.1)"]
    assert c["SlurmctldPort"] == ["6917"] and c["SlurmdPort"] == ["6918"]
    assert c["AuthInfo"] == ["socket=/run/fleet-lab-x/slurm/munge-run/munge.socket.2"]
    for key in ("StateSaveLocation", "SlurmctldPidFile", "SlurmctldLogFile"):
        assert c[key][0].startswith("/run/fleet-lab-x/slurm/ctld/"), key
    # slurmd's own files live inside each host (it runs chrooted there)
    assert c["SlurmdSpoolDir"] == ["/var/spool/slurmd"]


def test_health_check_reboot_and_return_to_service() -> None:
    c = _conf(interval=7)
    assert c["HealthCheckProgram"] == ["/usr/local/sbin/fleet-lab-healthcheck"]
    assert c["HealthCheckInterval"] == ["7"] and c["HealthCheckNodeState"] == ["ANY"]
    assert c["RebootProgram"] == ["/sbin/reboot"]
    assert c["ReturnToService"] == ["2"]
    assert c["SlurmdParameters"] == ["config_overrides"]
    assert int(c["MinJobAge"][0]) <= 60


def test_one_node_per_host_with_its_address_and_gpus() -> None:
    nodes = _conf()["NodeName"]
    assert len(nodes) == 5
    first = dict(kv.split("=", 1) for kv in ("NodeName=" + nodes[0]).split())
    assert first["NodeName"] == "h1" and first["NodeHostname"] == "lab-h1"
    assert first["NodeAddr"] == "10.77.0.11" and first["Gres"] == "gpu:h100:8"
    assert "Gres=gpu:l40s:4" in nodes[3] and "Gres=gpu:a100:8" in nodes[2]


def test_a_partition_per_pool_and_lab_default() -> None:
    parts = {v.split()[0]: v for v in _conf()["PartitionName"]}
    assert list(parts) == ["h100-canary", "h100", "a100", "l40s", "lab"]
    assert "Nodes=h2,h5 " in parts["h100"] and "Default=NO" in parts["h100"]
    assert "Nodes=h1,h2,h3,h4,h5 " in parts["lab"] and "Default=YES" in parts["lab"]


def test_partitions_keep_lab_json_pools_even_without_matrix_pools() -> None:
    hosts = plan_hosts(3, "netns", {})  # no matrix pools: hosts carry their wave names
    assert S.partitions(hosts) == {"canary": ["h1"], "wave1": ["h2"], "wave2": ["h3"],
                                   "lab": ["h1", "h2", "h3"]}


def test_gres_conf_is_static_with_stable_device_nodes() -> None:
    text = S.gres_conf(plan_hosts(4, "netns", POOLS))
    assert "AutoDetect=off" in text.splitlines()
    lines = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert lines[0] == "NodeName=h1 Name=gpu Type=h100 File=/var/lib/gpusim/dev/nvidia[0-7]"
    assert lines[3] == "NodeName=h4 Name=gpu Type=l40s File=/var/lib/gpusim/dev/nvidia[0-3]"
    assert not any("/dev/nvidia" in ln and "gpusim" not in ln for ln in lines)


def test_services_script_binds_then_starts_slurmd_at_each_boot() -> None:
    conf = SP.conf
    text = S.services_script("h2", conf, [SP.etc, SP.munge_run, Path("/work/x y")], cgroup=True)
    lines = text.splitlines()
    assert 'mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"' in lines
    assert "mount --bind '/work/x y' \"$root\"'/work/x y'" in lines
    assert "mount -o remount,bind,ro \"$root\"'/work/x y'" in lines
    start = lines[-1]
    assert "exec chroot \"$root\" /usr/sbin/slurmd -D -b -N h2 -f " + str(conf) in start
    assert start.endswith("&") and "date +%s" not in start


def test_slurmd_waits_for_the_next_second_after_a_reboot() -> None:
    text = S.services_script("h2", SP.conf, [], cgroup=True, not_before=1_700_000_001)
    assert re.search(r'while \[ "\$\(date \+%s\)" -lt 1700000001 \]', text)


def test_no_slurm_means_only_the_fleet_binds() -> None:
    text = S.services_script(None, None, [Path("/work/main")], cgroup=False)
    assert "slurmd" not in text and "cgroup" not in text
    assert "mount --bind /work/main \"$root\"/work/main" in text


def test_fleet_wrapper_runs_the_hosts_python_on_the_controllers_fleet() -> None:
    site = Path("/work/main/.venv/lib/python3.11/site-packages")
    text = hostfleet.fleet_wrapper([Path("/work/main"), site])
    assert text.startswith("#!/bin/sh\n")
    assert "PYTHONPATH=/work/main:/work/main/.venv/lib/python3.11/site-packages" in text
    assert 'exec /usr/bin/python3 -m fleet "$@"' in text


def test_fleet_dirs_are_not_nested() -> None:
    dirs = hostfleet.fleet_dirs()
    assert dirs and all(not any(o != d and o in d.parents for o in dirs) for d in dirs)


def test_health_interval_changed_in_place() -> None:
    """The lab tests that wait on health checks shorten the running lab's interval (issue 28)."""
    from fleet.lab.slurm_health import with_health_interval

    text = S.slurm_conf(plan_hosts(5, "netns", POOLS), SP, "ctl", health_interval=30)
    fast = with_health_interval(text, 3)
    assert fast.replace("HealthCheckInterval=3\n", "HealthCheckInterval=30\n") == text
    assert "HealthCheckInterval=3\n" in fast and "HealthCheckInterval=30" not in fast
    import pytest

    with pytest.raises(ValueError, match="at least 1"):
        with_health_interval(text, 0)
    with pytest.raises(ValueError, match="0 HealthCheckInterval lines"):
        with_health_interval("ClusterName=x\n", 3)
