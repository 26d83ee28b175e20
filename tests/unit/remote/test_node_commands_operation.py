"""The node-state operation through pyinfra's engine, on its `@fake` connector (no host): the
mig-parted layout is written before the commands (`nvidia-mig-parted apply -f` reads it), the
boot unit's files after them, and a file that is not one of the boot unit's is refused."""

from __future__ import annotations

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage

from fleet.domain.node_plan import BOOT_SCRIPT, BOOT_UNIT, BOOT_WANTS, MIG_PARTED_FILE
from fleet.remote.operations import node_commands

APPLY = ["nvidia-mig-parted", "apply", "-f", MIG_PARTED_FILE, "-c", "halves"]


def run(files: dict[str, str], *, commands: list[list[str]] | None = None,
        remove_boot: bool = False, present: list[str] | None = None) -> list[str]:
    absent = [f"{p} -" for p in sorted([*files, BOOT_WANTS])]
    data = {"fake_delay": 0, "fake_delay_jitter": 0,
            "fake_responses": {"for f in": absent, "for p in": present or []}}
    inventory = Inventory(([("@fake/gpu-01", data)], {}))
    state = State(inventory, Config())
    state.set_stage(StateStage.Connect)
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_op(state, node_commands, commands=[APPLY] if commands is None else commands,
           files=files, remove_boot=remove_boot)
    state.set_stage(StateStage.Execute)
    run_ops(state)
    host = inventory.get_host("@fake/gpu-01")
    return [str(c) for c in host.connector.executed_commands]


def test_the_mig_parted_layout_is_written_before_the_command_that_reads_it() -> None:
    ran = run({BOOT_UNIT: "[Unit]\n", BOOT_SCRIPT: "#!/bin/sh\n", MIG_PARTED_FILE: "{}\n"})

    def at(text: str) -> int:
        return next(i for i, c in enumerate(ran) if text in c)

    layout, script = (f'install -m 644 "$d/f" {MIG_PARTED_FILE}',
                      f'install -m 755 "$d/f" {BOOT_SCRIPT}')
    assert at(layout) < at("nvidia-mig-parted apply") < at(script)


def test_a_file_outside_the_boot_unit_is_refused() -> None:
    with pytest.raises(Exception, match="not a boot-unit file"):
        run({"/etc/passwd": "x"})


def test_an_obsolete_boot_unit_is_removed_and_a_removed_one_left_alone() -> None:
    """The profile declares nothing a reboot forgets: what is left of the unit goes (a
    dangling enabling link included), and a second run, with nothing left, runs nothing."""
    ran = run({}, commands=[], remove_boot=True, present=[BOOT_WANTS, BOOT_SCRIPT])
    (rm,) = [c for c in ran if "rm -f" in c]
    assert BOOT_WANTS in rm and BOOT_SCRIPT in rm and BOOT_UNIT not in rm
    assert any("daemon-reload" in c for c in ran)
    assert not [c for c in run({}, commands=[], remove_boot=True, present=[])
                if "rm -f" in c or "daemon-reload" in c]


def test_the_boot_unit_is_never_both_written_and_removed() -> None:
    with pytest.raises(Exception, match="either written or removed"):
        run({BOOT_UNIT: "[Unit]\n"}, remove_boot=True)
