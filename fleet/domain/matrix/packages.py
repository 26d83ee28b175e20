"""Package truth: the names and version strings NVIDIA's apt and dnf repositories use.

The rules are data (`fleet/data/nvidia/packages.yaml`, each row with its source) so a renamed
package is a data edit. Three questions are answered here and nowhere else:

- which names a component of a release gets on an OS family (`default_names`, used by
  `Release.packages` after the matrix's own `package_names`);
- how a package's version is written (`version_form`): NVIDIA ships DCGM with epoch 1 on both
  families (`1:3.3.6`, with no Debian revision for DCGM 3) and the EL driver with epoch 3, so an
  apt pin on `3.3.6-*` matches nothing and apt installs the newest; `apt_pin_version` and
  `dnf_spec` write the epoch;
- which installed names belong to a component at all (`component_of`), so a pin can remove
  another release's toolkit, cuDNN or DCGM and the checks can flag one left behind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

from fleet.domain.versions import compare, cuda_major_minor

Family = Literal["debian", "rhel"]
FAMILIES: tuple[Family, ...] = ("debian", "rhel")
_PLACEHOLDER = re.compile(r"\{(branch|cuda_major|cuda_minor|cudnn_major)\}")


@dataclass(frozen=True)
class NameRule:
    """Default names of one component on some OS families, under conditions."""

    component: str
    families: tuple[Family, ...]
    names: tuple[str, ...]
    source: str
    flavor: str | None = None
    branch_from: str | None = None
    branch_below: str | None = None
    version_from: str | None = None
    version_below: str | None = None
    unverified: tuple[str, ...] = ()
    note: str = ""

    def fits(self, family: Family, flavor: str, branch: str, version: str) -> bool:
        if family not in self.families or (self.flavor and self.flavor != flavor):
            return False
        if self.branch_from and int(branch) < int(self.branch_from):
            return False
        if self.branch_below and int(branch) >= int(self.branch_below):
            return False
        if self.version_from and compare(version, self.version_from) < 0:
            return False
        return not (self.version_below and compare(version, self.version_below) >= 0)

    def patterns(self) -> tuple[re.Pattern[str], ...]:
        """Each name template as an anchored pattern: any branch, CUDA or cuDNN major (built
        once per rule: the checks ask for every package of every host)."""
        return _name_patterns(self.names)


@cache
def _name_patterns(names: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    out = []
    for name in names:
        parts = _PLACEHOLDER.split(name)
        rx = "".join(re.escape(p) if i % 2 == 0 else "[0-9]+" for i, p in enumerate(parts))
        out.append(re.compile(f"^{rx}$"))
    return tuple(out)


@dataclass(frozen=True)
class VersionForm:
    """How one family writes a package's version: epoch, and Debian revision / RPM release."""

    epoch: int | None
    revision: str | None  # None: the version has no revision (DCGM 3 on apt: `1:3.3.6`)


@dataclass(frozen=True)
class VersionRule:
    match: re.Pattern[str]
    forms: Mapping[Family, VersionForm]
    source: str
    unverified: tuple[str, ...] = ()
    note: str = ""


DEFAULT_FORM = VersionForm(None, "1")


@dataclass(frozen=True)
class PackageTruth:
    names: tuple[NameRule, ...]
    versions: tuple[VersionRule, ...]
    sources: Mapping[str, Mapping[str, Any]]
    _components: dict[tuple[str, Family], str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def rule_for(self, component: str, family: Family, flavor: str, branch: str,
                 version: str) -> NameRule | None:
        return next((r for r in self.names if r.component == component
                     and r.fits(family, flavor, branch, version)), None)

    def version_rule(self, name: str) -> VersionRule | None:
        return next((r for r in self.versions if r.match.search(name)), None)

    def version_form(self, name: str, family: Family) -> VersionForm:
        rule = self.version_rule(name)
        return rule.forms.get(family, DEFAULT_FORM) if rule else DEFAULT_FORM

    def component_of(self, name: str, family: Family) -> str | None:
        """The component whose default names (any branch, any version) include `name`. Worked
        out once per name: the checks and the pin ask about every package of every host, and
        a fleet has a few dozen distinct names."""
        key = (name, family)
        try:
            return self._components[key]
        except KeyError:
            pass
        found = next((rule.component for rule in self.names if family in rule.families
                      and any(p.match(name) for p in rule.patterns())), None)
        if len(self._components) < 8192:  # bounded, whatever names a host reports
            self._components[key] = found
        return found


def _families(value: str) -> tuple[Family, ...]:
    if value == "both":
        return FAMILIES
    if value not in FAMILIES:
        raise RuntimeError(f"shipped table packages.yaml: unknown family {value!r}")
    return (value,)


def _form(spec: Mapping[str, Any] | None, family: Family) -> VersionForm:
    if spec is None:
        return DEFAULT_FORM
    key = "revision" if family == "debian" else "release"
    return VersionForm(spec.get("epoch"), spec.get(key))


def parse(doc: Mapping[str, Any]) -> PackageTruth:
    """The parsed table; RuntimeError when a row names no known source (a damaged package)."""
    sources = doc.get("sources") or {}
    missing = [f"{sec}[{i}]" for sec in ("names", "versions")
               for i, row in enumerate(doc.get(sec) or []) if row.get("source") not in sources]
    if missing:
        raise RuntimeError(f"shipped table packages.yaml: rows without a source: {missing}")
    names = tuple(
        NameRule(component=r["component"], families=_families(r["family"]),
                 names=tuple(r["names"]), source=r["source"], flavor=r.get("flavor"),
                 branch_from=r.get("branch_from"), branch_below=r.get("branch_below"),
                 version_from=r.get("version_from"), version_below=r.get("version_below"),
                 unverified=tuple(r.get("unverified", ())), note=r.get("note", ""))
        for r in doc["names"])
    versions = tuple(
        VersionRule(match=re.compile(r["match"]),
                    forms={f: _form(r.get(f), f) for f in FAMILIES if f in r},
                    source=r["source"], unverified=tuple(r.get("unverified", ())),
                    note=r.get("note", ""))
        for r in doc["versions"])
    return PackageTruth(names, versions, sources)


@lru_cache(maxsize=1)
def load() -> PackageTruth:
    """The shipped table, parsed once per process."""
    from fleet.domain.yaml_source import load_shipped

    text = resources.files("fleet.data.nvidia").joinpath("packages.yaml").read_text("utf-8")
    return parse(load_shipped(text))


# ------------------------------------------------------------------------- default names
def default_names(component: str, version: str, family: Family, *, flavor: str, branch: str,
                  cuda: str, cudnn: str | None) -> list[str]:
    """The data's names for one component of a release; [] when no row fits."""
    return list(_default_names(component, version, family, flavor, branch, cuda, cudnn))


@lru_cache(maxsize=4096)
def _default_names(component: str, version: str, family: Family, flavor: str, branch: str,
                   cuda: str, cudnn: str | None) -> tuple[str, ...]:
    """`default_names`, worked out once per distinct question: a rollout asks
    `Release.packages` for every host at every step, always about the same few releases (the
    shipped table it reads is itself loaded once per process)."""
    rule = load().rule_for(component, family, flavor, branch, version)
    if rule is None:
        return ()
    major, minor = cuda_major_minor(cuda)
    ctx = {"branch": branch, "cuda_major": str(major), "cuda_minor": str(minor),
           "cudnn_major": cudnn.split(".", 1)[0] if cudnn else ""}
    return tuple(_render(n, ctx) for n in rule.names)


def _render(template: str, ctx: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: ctx[m.group(1)], template)


# ---------------------------------------------------------------------- versions as written
def version_form(name: str, family: Family) -> VersionForm:
    return load().version_form(name, family)


def apt_pin_version(name: str, upstream: str) -> str:
    """The `Pin: version` pattern that matches exactly `upstream` as NVIDIA writes it.

    `1:3.3.6` (DCGM 3: epoch, no revision), `1:4.4.1-*` (DCGM 4), `580.95.05-*` (most).
    """
    form = version_form(name, "debian")
    epoch = f"{form.epoch}:" if form.epoch is not None else ""
    return f"{epoch}{upstream}" + ("-*" if form.revision is not None else "")


def deb_version(name: str, upstream: str, ctx: Mapping[str, str] | None = None) -> str:
    """The full Debian version NVIDIA publishes (`1:3.3.6`, `1:4.4.1-1`,
    `10.9.0.34-1+cuda12.8`); `ctx` fills a revision's placeholders (the lab's repository)."""
    form = version_form(name, "debian")
    epoch = f"{form.epoch}:" if form.epoch is not None else ""
    rev = "" if form.revision is None else "-" + _render(form.revision, ctx or {})
    return f"{epoch}{upstream}{rev}"


def rpm_epoch(name: str) -> int | None:
    return version_form(name, "rhel").epoch


def rpm_release(name: str, ctx: Mapping[str, str] | None = None) -> str:
    """The RPM release without the dist tag (`1`, `1.cuda12.8`)."""
    return _render(version_form(name, "rhel").revision or "1", ctx or {})


def dnf_spec(name: str, upstream: str) -> str:
    """`name-[epoch:]version` as dnf and its versionlock plugin parse it (NEV form)."""
    epoch = rpm_epoch(name)
    return f"{name}-{epoch}:{upstream}" if epoch is not None else f"{name}-{upstream}"


def component_of(name: str, family: Family) -> str | None:
    """The component a package name belongs to by NVIDIA's naming, any branch or version."""
    return load().component_of(name, family)


# ------------------------------------------------------------------ other releases' packages
def extraneous(installed: Iterable[str], wanted: Sequence[tuple[str, str]],
               family: Family) -> dict[str, str]:
    """Installed packages of another release: name -> component.

    A name counts when its component is one the release manages, it is not wanted, and NVIDIA's
    naming says it belongs to another release: a variant of a wanted name's template (another
    branch, CUDA or cuDNN major: `cuda-toolkit-12-8` next to a wanted `cuda-toolkit-13-0`), or a
    name of the component's other generation (`datacenter-gpu-manager` when DCGM 4 is wanted).
    A name the release's own override leaves out but its template does not vary is kept: fleet
    does not guess at what a hand-picked package list means.
    """
    t = load()
    wanted_names = {n for n, _ in wanted}
    managed = {c for _, c in wanted}
    out: dict[str, str] = {}
    for name in installed:
        if name in wanted_names:
            continue
        for rule in t.names:
            if rule.component not in managed or family not in rule.families:
                continue
            pats = rule.patterns()
            hit = next((p for p in pats if p.match(name)), None)
            if hit is None:
                continue
            wanted_here = [n for n, c in wanted if c == rule.component]
            rule_in_use = any(p.match(n) for p in pats for n in wanted_here)
            variant = "[0-9]+" in hit.pattern and any(hit.match(n) for n in wanted_here)
            if variant or not rule_in_use:
                out[name] = rule.component
                break
    return out
