"""Boot facts: the kernel a host boots next, its nvidia module, Secure Boot and its keys.

What the probe's `boot` section (`fleet.probe.hostprobe.probe_boot`) reports, validated. The
pre-reboot gate (`fleet.domain.reboot_gate`) and the `node.next_boot` check judge these; nothing
here knows the target driver. Unreadable values follow `fleet.domain.facts`: None plus a reason
in `unreadable`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from fleet.domain.fact_base import FactsModel


class KernelModule(BaseModel):
    """`modinfo -k KVER nvidia`: the module modprobe would load on that kernel."""

    filename: str | None = None
    version: str | None = None
    vermagic: str | None = None
    license: str | None = None
    flavor: Literal["open", "proprietary"] | None = None
    signer: str | None = None
    sig_key: str | None = None
    sig_hashalgo: str | None = None


class InstalledKernel(FactsModel):
    version: str
    module: KernelModule | None = None
    """None with no reason: no nvidia module for this kernel; None with a reason: unreadable."""
    headers: bool | None = None
    """/lib/modules/KVER/build exists: DKMS can build a module for this kernel."""


class DkmsEntry(BaseModel):
    module: str
    version: str
    kernel: str | None = None
    arch: str | None = None
    state: str


class EnrolledKey(BaseModel):
    """One Machine Owner Key (`mokutil --list-enrolled`); ids are bare lower-case hex."""

    sha1: str | None = None
    serial: str | None = None
    skid: str | None = None
    subject_cn: str | None = None


class KernelKey(BaseModel):
    """An asymmetric key the running kernel holds (/proc/keys): its CN and key id."""

    name: str
    skid: str


class BootFacts(FactsModel):
    running_kernel: str | None = None
    installed_kernels: list[str] | None = None
    next_kernel: str | None = None
    next_source: str | None = None
    """grubby, grubenv saved_entry / next_entry, GRUB_DEFAULT, newest, none."""
    next_entry: str | None = None
    kernels: list[InstalledKernel] | None = None
    dkms: list[DkmsEntry] | None = None
    secure_boot: bool | None = None
    secure_boot_source: str | None = None
    enrolled_keys: list[EnrolledKey] | None = None
    kernel_keys: list[KernelKey] | None = None
    nouveau_blacklisted: bool | None = None
    nouveau_blacklist: list[str] = Field(default_factory=list)

    def kernel(self, version: str) -> InstalledKernel | None:
        return next((k for k in self.kernels or [] if k.version == version), None)
