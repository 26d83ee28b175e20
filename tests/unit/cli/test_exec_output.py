"""`fleet exec` output: each group's header, then what its hosts printed, on one stream, a last
line without its newline kept apart from the next header (issue 28)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.remote import ssh_exec
from fleet.remote.ssh_exec import ExecResult

INVENTORY = 'lab = [("gpu-01", {}), ("gpu-02", {}), ("gpu-03", {})]\n'


def test_groups_and_their_output_in_order_on_stdout(tmp_path: Path, fleet_run: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(INVENTORY)

    def fake(targets: Any, line: str, **kw: Any) -> list[ExecResult]:
        return [ExecResult("gpu-01", 0, "550.54.15", "", None, 0.1),  # no final newline
                ExecResult("gpu-02", 0, "550.54.15", "", None, 0.1),
                ExecResult("gpu-03", 0, "535.129.03\n\n", "no nvidia-smi", None, 0.1)]

    monkeypatch.setattr(ssh_exec, "run_everywhere", fake)
    code, out, err = fleet_run("exec", "-i", str(inv), "--", "cat", "/x")
    assert code == 0, out + err
    assert out.splitlines() == [
        "2 host(s): gpu-01, gpu-02  (exit 0)",
        "550.54.15",
        "1 host(s): gpu-03  (exit 0)",
        "535.129.03",
        "no nvidia-smi",
    ]
    assert "host(s)" not in err
