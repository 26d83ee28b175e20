"""The pre-reboot gate as a pyinfra operation, for deploy files (`playbooks/pin_release.py`).

At run time, after the operations before it have put the packages in, it reads the host's boot
facts (the probe, shipped inline), asks `fleet.domain.reboot_gate.judge_next_boot` whether the
next-boot kernel will load the release's module, and fails the host with the gate's finding
(pyinfra then runs nothing more on it) instead of rebooting into a kernel without its driver.
Only then comes the reboot (`fleet.remote.reboot_wait`: back on a new boot id). `fleet apply`
takes the same decision through `fleet.jobs.reboot_gate.gated_reboot`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pyinfra.api.command import FunctionCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation

from fleet.remote.probe_fact import HostProbe
from fleet.remote.reboot_wait import reboot


@operation(is_idempotent=False)
def gated_reboot(driver: str, flavor: str | None = None, delay: int = 2, interval: int = 1,
                 reboot_timeout: int = 300) -> Generator[Any, None, None]:
    """
    Reboot only if the next-boot kernel will load an nvidia ``driver`` module.

    + driver: the release's driver version ("580.95.05")
    + flavor: ``open`` or ``proprietary`` (None: either)
    + delay, interval, reboot_timeout: as ``fleet.remote.reboot_wait.reboot``
    """

    def pre_reboot_gate(state: Any, host: Any) -> None:
        from fleet.domain.facts import HostFacts
        from fleet.domain.reboot_gate import judge_next_boot

        facts = HostFacts.model_validate(host.get_fact(HostProbe, frameworks=False))
        pk = facts.versions.packages
        family = "rhel" if pk is not None and pk.manager == "rpm" else "debian"
        verdict = judge_next_boot(host.name, facts.boot, driver, flavor=flavor,
                                  os_family=family)
        if not verdict.ok:
            raise OperationError(verdict.finding.message)

    yield FunctionCommand(pre_reboot_gate, (), {})
    yield from reboot._inner(delay=delay, interval=interval, reboot_timeout=reboot_timeout)
