"""Pin a matrix release onto hosts with the plain pyinfra CLI.

    pyinfra inventories/lab.py playbooks/pin_release.py \
        --data matrix=matrices/example.yaml --data release=r580-cuda13.0

Without `release`, each host gets its pool's golden release (`pool` host data). `fleet apply` runs
the same operation through pyinfra's Python API and adds refusals, verification and history.
A pool with `kernel: {hold: true}` gets its kernel packages held (released on a pool without).
A reboot goes through the pre-reboot gate (`fleet.remote.reboot_op.gated_reboot`): a host whose
next-boot kernel cannot load the release's module fails with the reason and is not rebooted.
Run from the project root, or with the package installed, so `fleet` imports.
"""

from pyinfra import host

from fleet.domain.matrix.loader import load_matrix
from fleet.remote.facts import OsFamily
from fleet.remote.operations import current_plan, pin_release
from fleet.remote.reboot_op import gated_reboot

_matrix = load_matrix(host.data.get("matrix") or "matrices/example.yaml").matrix
_name = host.data.get("release") or _matrix.golden_name(host.data.get("pool") or "")
_release = _matrix.release(_name)
_family = "rhel" if host.get_fact(OsFamily) == "rhel" else "debian"
_packages = [(p.name, p.version, p.component) for p in _release.packages(_family)]
_pool = _matrix.pools.get(host.data.get("pool") or "")
_hold = bool(_pool and _pool.kernel.hold)  # the pool's kernel.hold: kernel packages held too

_reboot = current_plan(_packages, kernel_hold=_hold).reboot_required
pin_release(name=f"Pin release {_release.name}", release=_release.name, packages=_packages,
            kernel_hold=_hold)
if _reboot:  # only through the pre-reboot gate: the next-boot kernel must load the module
    gated_reboot(name="Reboot: the kernel module changed (pre-reboot gate first)",
                 driver=_release.driver.version, flavor=_release.driver.flavor,
                 delay=2, interval=1, reboot_timeout=300)
