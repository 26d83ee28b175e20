"""The weekly benchmark's dcgmi level over real SSH on the lab (issue 13 §8): the parameters the
hygiene job builds (`fleet.jobs.hygiene_bench._params`) go through the SSH backend, the runner
shipped inline to the host picks DCGM, and `dcgmi diag -r N -j` is what runs there.

Lab hosts have no DCGM: the test installs a fake `dcgmi` (a GPU tool, the one thing faked) that
records its arguments and prints a recorded `dcgmi diag -j` document, and removes it afterwards
so that the lab's other tests keep their benchmark sources.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "lab.py"
DOC = ROOT / "tests" / "data" / "bench" / "dcgm_pass.json"
FAKE = "/usr/local/bin/dcgmi"
ARGV = "/tmp/fake-dcgmi.argv"
SCRIPT = f"""#!/bin/sh
printf '%s\\n' "$*" >> {ARGV}
cat /tmp/fake-dcgmi.json
"""


@pytest.fixture
def host(lab_paths, hosts) -> Iterator:  # noqa: ANN001 - conftest types
    h = next(iter(hosts.values()))
    for path, text in ((FAKE, SCRIPT), ("/tmp/fake-dcgmi.json", DOC.read_text())):
        b64 = base64.b64encode(text.encode()).decode()
        h.sh(f"echo {b64} | base64 -d > {path}")
    h.sh(f"chmod 755 {FAKE}; rm -f {ARGV}")
    old = os.environ.get("FLEET_LAB_DIR")
    os.environ["FLEET_LAB_DIR"] = str(lab_paths.run)  # inventories/lab.py reads it
    try:
        yield h
    finally:
        h.sh(f"rm -f {FAKE} {ARGV} /tmp/fake-dcgmi.json")
        if old is None:
            os.environ.pop("FLEET_LAB_DIR", None)
        else:
            os.environ["FLEET_LAB_DIR"] = old


@pytest.mark.parametrize("level", [1, 3])
def test_dcgmi_runs_at_the_level_asked(host, level: int) -> None:  # noqa: ANN001
    from fleet.jobs.hygiene_bench import _params
    from fleet.remote.backend import SshBackend

    backend = SshBackend(INVENTORY, limit=[host.name])
    try:
        res = backend.benchmark([host.name], "synthetic", _params({}, 3, level))[host.name]
    finally:
        backend.close()
    assert res.ok, res.error
    assert res.value is not None and res.value.get("dcgm_pcie_gbps") == [25.31, 24.90]
    _rc, out, _err = host.sh(f"cat {ARGV}")
    assert out == f"diag -r {level} -j\n"  # once: repeats never re-run a DCGM diag
