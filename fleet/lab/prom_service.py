"""The lab's Prometheus (`fleet lab up --prometheus`): Debian's `prometheus` binary, no system
service, on a loopback port of its own, with its config and storage under the lab's run dir
(`RUN/prometheus/`), scraping every lab host's model server (`/metrics` on port 8000, see
`fleet.lab.serving`) every `SCRAPE_S` seconds. Each target carries the labels `host` (the
inventory name), `pool` and `gpu_model`. Its command line names the run dir, so `fleet lab
down` stops it with the lab's other processes and removes its storage with the run dir.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

from fleet.errors import BadInput, CouldNotComplete
from fleet.lab.model import MODEL_PORT, LabState
from fleet.lab.paths import LabPaths

BINARY = "prometheus"
SCRAPE_S = 1
HOST_LABEL = "host"


def check() -> None:
    if shutil.which(BINARY) is None:
        raise BadInput.single("--prometheus needs the Debian package prometheus (apt-get install "
                              "prometheus; the lab runs the binary, never its system service)",
                              field="--prometheus")


def config(state: LabState) -> dict[str, object]:
    """prometheus.yml (JSON is YAML): one static target per host, labelled with its name."""
    static = [{"targets": [f"{h.address}:{MODEL_PORT}"],
               "labels": {HOST_LABEL: h.name, "pool": h.pool, "gpu_model": h.gpu_model}}
              for h in state.hosts]
    return {"global": {"scrape_interval": f"{SCRAPE_S}s",
                       "scrape_timeout": f"{SCRAPE_S * 900}ms",
                       "evaluation_interval": f"{SCRAPE_S}s"},
            "scrape_configs": [{"job_name": "lab-serving", "static_configs": static}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start(paths: LabPaths, state: LabState, timeout: float) -> None:
    """Start the server, wait until it answers, and record its URL and start time (seconds
    from the start to `/-/ready`) in the state."""
    home = paths.run / "prometheus"
    (home / "data").mkdir(parents=True, exist_ok=True)
    (home / "prometheus.yml").write_text(json.dumps(config(state), indent=1) + "\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(paths.logs / "prometheus.log", "ab")  # noqa: SIM115 (the child keeps it)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [BINARY, f"--config.file={home / 'prometheus.yml'}",
         f"--storage.tsdb.path={home / 'data'}", "--storage.tsdb.retention.time=2d",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, cwd=home)
    log.close()
    (home / "pid").write_text(f"{proc.pid}\n")
    deadline = t0 + max(timeout, 30.0)
    while not _ready(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (paths.logs / "prometheus.log").read_text(errors="replace")[-1500:]
            raise CouldNotComplete(f"the lab's Prometheus did not start (exit "
                                   f"{proc.poll()}); see {paths.logs / 'prometheus.log'}:\n{tail}")
        time.sleep(0.1)
    state.prometheus_url = url
    state.prometheus_ready_s = round(time.monotonic() - t0, 2)
