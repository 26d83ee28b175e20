"""Names that reach hosts and tools are refused at the inventory, with file and line, before any
SSH connection, `scontrol`, `srun` or `kubectl` call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.domain.ports import HostRef
from fleet.errors import BadInput
from fleet.remote.inventory import load_inventory_file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ the grammar
@pytest.mark.parametrize("name", [
    "gpu-01", "gpu-h100-001.dc1.example.com", "10.0.4.11", "node_7", "@local", "@ssh/10.0.0.5",
    "@docker/ubuntu:22.04", "@fake/gpu-01", "A" * 253,
])
def test_host_names_accepted(name: str) -> None:
    from fleet.domain.names import is_valid, name_problem

    assert is_valid("host", name) and name_problem("host", name) is None


@pytest.mark.parametrize(("name", "why"), [
    ("gpu-01;reboot", "contains ';'"),
    ("$(reboot)", "starts with '$'"),
    ("gpu-$(id)", "contains '$'"),
    ("gpu-01\nreboot", "control character '\\n'"),
    ("gpu-01\n", "control character"),
    ("-oProxyCommand=sh", "starts with '-'"),
    ("gpu 01", "contains ' '"),
    ("`id`", "starts with '`'"),
    ("", "is empty"),
    ("A" * 254, "longer than 253"),
    ("@local;id", "not a pyinfra connector"),
    ("@ssh/-oProxyCommand=x", "not a pyinfra connector"),
])
def test_host_names_refused(name: str, why: str) -> None:
    from fleet.domain.names import check_name, name_problem

    problem = name_problem("host", name)
    assert problem is not None and why in problem
    with pytest.raises(ValueError, match="refusing host name"):
        check_name("host", name)


@pytest.mark.parametrize("name", ["h100;x", "h100|x", "h&x", "-h100", "h100\n", "@local", "a" * 64,
                                  "h100 canary", "ü100"])
def test_pool_names_refused(name: str) -> None:
    from fleet.domain.names import is_valid, name_problem

    assert name_problem("pool", name) is not None and not is_valid("group", name)


def test_one_definition() -> None:
    from fleet.domain import versions
    from fleet.domain.names import NAME_RE, NODE_NAME_RE
    from fleet.schedulers import runner

    assert runner.NODE_NAME_RE is NODE_NAME_RE and versions.NAME_RE is NAME_RE
    assert NODE_NAME_RE.match("gpu-01\n") is None  # no trailing-newline loophole with match()


# ------------------------------------------------------------------------------ the inventory
BAD_HOSTS = [
    ("gpu-01;reboot", "';'"),
    ("$(reboot)", "'$'"),
    ("gpu-01\\nreboot", "'\\n'"),
    ("-oProxyCommand=touch /tmp/x", "'-'"),
]


@pytest.mark.parametrize(("literal", "why"), BAD_HOSTS)
def test_bad_host_name_refused_with_file_and_line(tmp_path: Path, literal: str, why: str) -> None:
    inv = write(tmp_path / "prod.py", (
        "h100 = [\n"
        "    'gpu-00',\n"
        f"    ('{literal}', {{'gpu_model': 'H100'}}),\n"
        "]\n"
    ))
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    [problem] = e.value.problems
    assert (problem.file, problem.line) == (str(inv), 3)
    assert "refusing host name" in problem.message and why in problem.message


def test_every_bad_name_is_reported_at_once(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "a = ['x;1']\n"
        "b = ['-x']\n"
        "c = [('ok-1', {'pool': 'h100;reboot'})]\n"
    ))
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    assert [p.line for p in e.value.problems] == [1, 2, 3]
    assert e.value.problems[2].field == "pool" and "pool name 'h100;reboot'" in str(e.value)


def test_bad_names_in_a_host_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as e:
        load_inventory_file("gpu-01,$(reboot)")
    [problem] = e.value.problems
    assert problem.file is None and problem.field == "--inventory" and "'$'" in problem.message
    with pytest.raises(BadInput, match="is empty"):
        load_inventory_file("gpu-01,")


def test_bad_pool_and_group_names(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", "h100 = [('gpu-01', {'slurm_node': 'n1;id'})]\n")
    bad_data = write(tmp_path / "group_data" / "h100$(id).py", "x = 1\n")
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    problems = {p.file: p for p in e.value.problems}
    assert "group name 'h100$(id)'" in problems[str(bad_data)].message
    node = problems[str(inv)]
    assert node.line == 1 and node.field == "slurm_node" and "node name 'n1;id'" in node.message


def test_bad_inventory_file_name_is_a_bad_group(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod;x.py", "h100 = ['gpu-01']\n")
    with pytest.raises(BadInput, match="inventory file's name"):
        load_inventory_file(inv)


def test_conflicting_duplicate_hosts_refused(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "h100 = [('gpu-01', {'gpu_model': 'H100', 'unit': 'a'})]\n"
        "canary = ['gpu-01']\n"  # listed again without data: fine
        "a100 = [\n"
        "    ('gpu-01', {'gpu_model': 'A100', 'unit': 'a'}),\n"
        "]\n"
    ))
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    [problem] = e.value.problems
    assert problem.line == 4
    assert "'gpu-01' is listed in h100 and in a100" in problem.message
    assert "gpu_model 'H100' vs 'A100'" in problem.message


def test_same_host_same_data_in_two_groups_is_fine(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "_e = ('gpu-01', {'gpu_model': 'H100'})\n"
        "h100 = [_e]\n"
        "wave1 = [_e, ('gpu-01', {'gpu_model': 'H100', 'unit': 'u1'})]\n"
    ))
    assert load_inventory_file(inv).get_host("gpu-01").data.unit == "u1"


# --------------------------------------------------------- refused before anything reaches a host
def test_ssh_backend_refuses_before_connecting(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.remote import backend, session

    def no_ssh(*args: object, **kwargs: object) -> None:
        raise AssertionError("connected to a host")

    monkeypatch.setattr(session, "connected", no_ssh)
    monkeypatch.setattr(backend, "connected", no_ssh)
    inv = write(tmp_path / "prod.py", "h100 = ['gpu-01', 'gpu-02;reboot']\n")
    with pytest.raises(BadInput, match=r"gpu-02;reboot"):
        backend.SshBackend(inv)


def test_cli_refuses_with_exit_2(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", "h100 = [\n    'gpu-01',\n    '$(touch /tmp/pwned)',\n]\n")
    out = subprocess.run([sys.executable, "-m", "fleet", "exec", "-i", str(inv), "--", "true"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "prod.py:3" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("scheduler", ["slurm", "kubernetes"])
def test_scheduler_refuses_host_names_that_are_not_node_names(scheduler: str) -> None:
    from fleet.schedulers import scheduler_for

    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, "", ""

    refs = [HostRef("gpu-01"), HostRef("@local"), HostRef("@ssh/10.0.0.5")]
    with pytest.raises(BadInput) as e:
        scheduler_for(scheduler, refs, runner=runner)
    assert "'@local'" in str(e.value) and "'@ssh/10.0.0.5'" in str(e.value) and not calls
    assert scheduler_for(scheduler, refs[:1], runner=runner) is not None
    assert scheduler_for("none", refs) is not None  # no scheduler: connector hosts are fine
