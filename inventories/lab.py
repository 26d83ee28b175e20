"""pyinfra inventory of the running lab (`fleet lab up` writes the state this file reads).

    pyinfra inventories/lab.py fact server.Hostname
    pyinfra inventories/lab.py playbooks/... --limit canary

Groups: each host's matrix pool (by GPU model: h100-canary, h100, a100 and l40s with the example
matrix), the rehearsal waves canary, wave1, wave2, ..., and lab (all hosts). Host data: ssh
settings with strict host-key checking against the lab's known_hosts, gpu_model, gpu_count, unit
(rack / NVLink domain), pool, wave; and, when the lab runs Slurm (`fleet lab up --slurm`),
scheduler "slurm" and slurm_conf (the SLURM_CONF path; Slurm node name = inventory host name);
when it runs Prometheus (`fleet lab up --prometheus`), prometheus_url;
when it runs Kubernetes (`--kubernetes`), kubeconfig (the lab's own API server; Node name = host
name) and, without Slurm, scheduler "kubernetes".
The lab's run directory is $FLEET_LAB_DIR (default /run/fleet-lab).
"""

import json
import os
from pathlib import Path

_RUN = Path(os.environ.get("FLEET_LAB_DIR") or "/run/fleet-lab")
_STATE = _RUN / "lab.json"
if not _STATE.exists():
    raise RuntimeError(f"no lab is up ({_STATE} missing): run `fleet lab up` first")
_lab = json.loads(_STATE.read_text())

_slurm = {"scheduler": "slurm", "slurm_conf": _lab["slurm_conf"]} if _lab.get("slurm_conf") else {}
_prom = {"prometheus_url": _lab["prometheus_url"]} if _lab.get("prometheus_url") else {}
_kube = ({"scheduler": "kubernetes", "kubeconfig": _lab["kubeconfig"]}
         if _lab.get("kubeconfig") else {})
_groups: dict[str, list] = {}
lab = []
for _h in _lab["hosts"]:
    _entry = (
        _h["name"],
        {
            "ssh_hostname": _h["address"],
            "ssh_port": _h.get("port", 22),
            "ssh_user": "root",
            "ssh_key": str(_RUN / "ssh" / "id_ed25519"),
            "ssh_known_hosts_file": str(_RUN / "ssh" / "known_hosts"),
            "ssh_strict_host_key_checking": "yes",
            "lab_name": _h["name"],
            "pool": _h["pool"],
            "wave": _h.get("wave", ""),
            "gpu_model": _h["gpu_model"],
            "gpu_count": _h["gpu_count"],
            "unit": _h["unit"],
            **_kube,
            **_slurm,
            **_prom,
        },
    )
    lab.append(_entry)
    _groups.setdefault(_h["pool"], []).append(_entry)
    if _h.get("wave") and _h["wave"] != _h["pool"]:
        _groups.setdefault(_h["wave"], []).append(_entry)

globals().update(_groups)
