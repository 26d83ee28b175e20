"""Inventories read by pyinfra's own code (as `pyinfra ... debug-inventory` reads them), without
monkey-patching the process, and the names in them checked before anything connects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet.errors import BadInput
from fleet.remote.inventory import load_inventory_file

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "data" / "inventories"
PYINFRA = Path(sys.executable).parent / "pyinfra"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_groups_host_data_and_group_data(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "import os\n"
        "_helper = ['ignored']\n"
        "canary = [('gpu-01', {'gpu_model': 'H100'})]\n"
        "wave1 = (['gpu-02', 'gpu-03'], {'wave': 1})\n"
    ))
    write(tmp_path / "group_data" / "all.py", "ssh_user = 'ops'\n")
    write(tmp_path / "group_data" / "canary.py", "from os import path\nbake = 5\n")
    inventory = load_inventory_file(inv)
    names = sorted(h.name for h in inventory)
    assert names == ["gpu-01", "gpu-02", "gpu-03"]
    g1, g2 = inventory.get_host("gpu-01"), inventory.get_host("gpu-02")
    assert g1.data.gpu_model == "H100" and g1.data.bake == 5 and g1.data.ssh_user == "ops"
    assert g2.data.wave == 1 and g2.data.get("bake") is None
    assert "path" not in g1.data.dict()  # imported names are not data
    assert {"canary", "prod"} <= set(g1.groups)


def test_does_not_monkey_patch(tmp_path: Path) -> None:
    """pyinfra_cli/__init__.py patches the stdlib for gevent; loading an inventory must not."""
    inv = write(tmp_path / "i.py", "hosts = ['a']\n")
    code = (
        "import sys\n"
        "from fleet.remote.inventory import load_inventory_file\n"
        f"load_inventory_file({str(inv)!r})\n"
        "from gevent import monkey\n"
        "print(monkey.is_module_patched('socket'), 'pyinfra_cli' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as e:
        load_inventory_file(write(tmp_path / "bad.py", "hosts = [\n"))
    assert e.value.problems[0].file.endswith("bad.py") and e.value.problems[0].line == 1
    with pytest.raises(BadInput, match="no hosts"):
        load_inventory_file(write(tmp_path / "empty.py", "x = 1\n"))
    with pytest.raises(BadInput, match="no such inventory"):
        load_inventory_file(tmp_path / "missing.py")


# ------------------------------------------------------------------- the same as pyinfra reads it
def _pyinfra_view(inventory: str, cwd: Path, env: dict[str, str] | None = None,
                  ) -> dict[str, Any]:
    if not PYINFRA.exists():
        pytest.skip(f"no pyinfra CLI beside {sys.executable}")
    out = subprocess.run([str(PYINFRA), inventory, "debug-inventory", "--json"],
                         capture_output=True, text=True, cwd=cwd, timeout=120,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return {h["name"]: (h["groups"], h["data"]) for h in json.loads(out.stdout)}


def _fleet_view(inventory: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(cwd)
    inv = load_inventory_file(inventory)
    return {h.name: (list(h.groups), json.loads(json.dumps(h.data.dict())))
            for h in inv}


@pytest.mark.parametrize("inventory", [
    "inventories/prod.py",  # group_data at the root and beside it, a host in two groups, @local
    "@local,gpu-01,gpu-02",  # a comma-separated host list (root group_data/all.py applies)
    "gpu-01,gpu-02",
])
def test_fleet_and_pyinfra_debug_inventory_agree(inventory: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = FIXTURES / "project"
    expected = _pyinfra_view(inventory, cwd)
    assert _fleet_view(inventory, cwd, monkeypatch) == expected


def test_pyinfra_precedence_on_the_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The points where fleet used to differ from pyinfra, spelled out."""
    view = _fleet_view("inventories/prod.py", FIXTURES / "project", monkeypatch)
    groups, data = view["gpu-h100-001"]
    assert groups[:2] == ["h100_canary", "h100"]  # one host, two groups
    assert data["ssh_user"] == "ops"  # group_data/ at the project root
    assert data["region"] == "inventory"  # beside the inventory wins over the root
    assert data["gpu_model"] == "H100-root"  # a group data file wins over the group's tuple
    assert view["gpu-h100-002"][1]["gpu_count"] == 8  # ditto (the tuple says 4)
    assert data["pool"] == "h100-canary" and data["gpu_count"] == 8  # host data wins
    assert "@local" in view


def test_the_lab_inventory_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = [
        {"name": f"lab-{i:02d}", "address": f"10.77.0.{i + 10}", "port": 22,
         "pool": "h100-canary" if i == 0 else "h100", "wave": "canary" if i == 0 else "wave1",
         "gpu_model": "H100", "gpu_count": 8, "unit": f"u{i // 2}"}
        for i in range(4)
    ]
    write(tmp_path / "lab.json", json.dumps({"hosts": hosts, "slurm_conf": "/x/slurm.conf"}))
    monkeypatch.setenv("FLEET_LAB_DIR", str(tmp_path))
    expected = _pyinfra_view("inventories/lab.py", ROOT, {"FLEET_LAB_DIR": str(tmp_path)})
    view = _fleet_view("inventories/lab.py", ROOT, monkeypatch)
    assert view == expected
    groups, data = view["lab-00"]
    assert {"lab", "h100-canary", "canary"} <= set(groups)
    assert data["scheduler"] == "slurm" and data["ssh_hostname"] == "10.77.0.10"


def test_the_lab_inventory_names_its_kubeconfig(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A lab with Kubernetes: every host carries the lab's kubeconfig; the scheduler is
    kubernetes unless the lab also runs Slurm (then `--scheduler kubernetes` picks it)."""
    host = {"name": "h1", "address": "10.77.0.11", "port": 22, "pool": "h100", "wave": "wave1",
            "gpu_model": "H100", "gpu_count": 8, "unit": "u0"}
    monkeypatch.setenv("FLEET_LAB_DIR", str(tmp_path))
    for extra, scheduler in (({}, "kubernetes"), ({"slurm_conf": "/x/slurm.conf"}, "slurm")):
        write(tmp_path / "lab.json", json.dumps({"hosts": [host], "kubeconfig": "/x/kubeconfig",
                                                 **extra}))
        _, data = _fleet_view("inventories/lab.py", ROOT, monkeypatch)["h1"]
        assert data["kubeconfig"] == "/x/kubeconfig" and data["scheduler"] == scheduler


def test_host_lists_and_local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    inv = load_inventory_file("@local,gpu-01")
    assert sorted(h.name for h in inv) == ["@local", "gpu-01"]
    with pytest.raises(BadInput, match="no such inventory file"):
        load_inventory_file("gpu-01")  # one bare name is a file name (pyinfra would resolve DNS)


def test_group_data_edits_are_seen_on_the_next_load(tmp_path: Path) -> None:
    inv = write(tmp_path / "i.py", "hosts = ['a']\n")
    write(tmp_path / "group_data" / "all.py", "x = 1\n")
    assert load_inventory_file(inv).get_host("a").data.x == 1
    write(tmp_path / "group_data" / "all.py", "x = 2\n")
    write(inv, "hosts = ['b']\n")
    assert load_inventory_file(inv).get_host("b").data.x == 2


# -------------------------------------------------------------------- files that fail to load
@pytest.mark.parametrize(("text", "line", "words"), [
    ("hosts = ['a']\n\nraise RuntimeError('no [/x] access')\n", 3,
     "RuntimeError: no [/x] access"),
    ("import sys\nhosts = ['a']\nsys.exit(3)\n", 3, "exit(3)"),
    ("def f():\n    return {}['k']\n\nhosts = [f()]\n", 2, "KeyError"),
    ("hosts = (['a'], {}, 'extra')\n", 1, "group 'hosts': a tuple must be (hosts, data)"),
    ("hosts = ['@nosuchconnector/x']\n", None, "Invalid connector"),
])
def test_a_file_that_raises_is_a_located_error(tmp_path: Path, text: str, line: int | None,
                                               words: str) -> None:
    inv = write(tmp_path / "inv.py", text)
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    problem = e.value.problems[0]
    assert problem.file == str(inv) and problem.line == line and words in problem.message


def test_a_group_data_file_that_raises_names_that_file(tmp_path: Path) -> None:
    inv = write(tmp_path / "inv.py", "hosts = ['a']\n")
    bad = write(tmp_path / "group_data" / "all.py", "x = 1\ny = 1 / 0\n")
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    problem = e.value.problems[0]
    assert problem.file == str(bad) and problem.line == 2 and "ZeroDivisionError" in problem.message


def test_cli_exit_2_without_traceback(tmp_path: Path) -> None:
    inv = write(tmp_path / "inv.py", "hosts = ['a']\nraise RuntimeError('boom')\n")
    out = subprocess.run([sys.executable, "-m", "fleet", "exec", "-i", str(inv), "--", "true"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "inv.py" in out.stderr and "boom" in out.stderr


def test_backend_host_refs_from_the_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.remote.backend import SshBackend

    monkeypatch.chdir(FIXTURES / "project")
    refs = {r.name: r for r in SshBackend("inventories/prod.py").hosts()}
    assert refs["gpu-h100-001"].pool == "h100-canary"  # explicit pool data
    assert refs["gpu-h100-002"].pool == "h100" and refs["gpu-h100-002"].gpu_count == 8
    assert refs["@local"].pool == "local"  # not the connector's own `@local` group
    assert refs["@local"].groups == ("@local", "local", "prod")
