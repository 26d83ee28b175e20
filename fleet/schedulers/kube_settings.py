"""The Kubernetes adapter's settings: `kubectl drain` options, kubeconfig and context names,
validated before anything reaches an argv (`fleet.schedulers.kubernetes` uses them)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fleet.domain.kube_selector import LabelSelector, parse_selector
from fleet.errors import BadInput

MAX_DRAIN_TIMEOUT_S = 7 * 24 * 3600.0


# ------------------------------------------------------------------------------ settings
_CONTEXT_RE = re.compile(r"[A-Za-z0-9_.:@/+=][A-Za-z0-9_.:@/+=~ -]{0,252}")


def _bad(field_name: str, message: str) -> BadInput:
    return BadInput.single(message, field=f"drain.{field_name}")


@dataclass(frozen=True)
class KubeDrainSettings:
    """How `kubectl drain` runs; validated before anything reaches an argv."""

    timeout_s: float = 30.0
    pod_selector: LabelSelector | None = None
    delete_emptydir_data: bool = False
    ignore_daemonsets: bool = True
    grace_period_s: int | None = None

    @classmethod
    def build(cls, *, timeout_s: float = 30.0, pod_selector: str | None = None,
              delete_emptydir_data: bool = False, ignore_daemonsets: bool = True,
              grace_period_s: int | None = None, disable_eviction: bool = False
              ) -> KubeDrainSettings:
        if disable_eviction:
            raise _bad("disable_eviction",
                       "fleet always evicts through the Eviction API so PodDisruptionBudgets "
                       "hold; --disable-eviction (and --force) are never passed")
        for name, flag in (("delete_emptydir_data", delete_emptydir_data),
                           ("ignore_daemonsets", ignore_daemonsets)):
            if not isinstance(flag, bool):
                raise _bad(name, f"expected true or false, got {flag!r}")
        if (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
                or not math.isfinite(timeout_s) or not 1 <= timeout_s <= MAX_DRAIN_TIMEOUT_S):
            raise _bad("timeout_s", f"expected seconds between 1 and {MAX_DRAIN_TIMEOUT_S:.0f}, "
                                    f"got {timeout_s!r}")
        if grace_period_s is not None and (
                isinstance(grace_period_s, bool) or not isinstance(grace_period_s, int)
                or not 1 <= grace_period_s <= 86400):
            raise _bad("grace_period_s",
                       f"expected whole seconds between 1 and 86400, got {grace_period_s!r} "
                       "(0 would delete pods at once, without graceful termination)")
        selector = None
        if pod_selector is not None:
            if not isinstance(pod_selector, str):
                raise _bad("pod_selector", f"expected a label selector string, "
                                           f"got {pod_selector!r}")
            if len(pod_selector) > 4096:
                raise _bad("pod_selector", "longer than 4096 characters")
            if pod_selector.strip():
                try:
                    selector = parse_selector(pod_selector)
                except ValueError as exc:
                    raise _bad("pod_selector", f"{pod_selector!r} is not a Kubernetes label "
                                               f"selector: {exc}") from None
        return cls(float(timeout_s), selector, delete_emptydir_data, ignore_daemonsets,
                   grace_period_s)

    def drain_args(self, timeout_s: int) -> list[str]:
        """`kubectl drain NODE` options for one run of at most `timeout_s` seconds."""
        args = []
        if self.ignore_daemonsets:
            args.append("--ignore-daemonsets")
        if self.delete_emptydir_data:
            args.append("--delete-emptydir-data")
        if self.pod_selector is not None:
            args.append(f"--pod-selector={self.pod_selector}")
        if self.grace_period_s is not None:
            args.append(f"--grace-period={self.grace_period_s}")
        args.append(f"--timeout={max(1, int(timeout_s))}s")
        return args


def check_context(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _CONTEXT_RE.fullmatch(value):
        raise _bad(name, f"{value!r}: expected a kubeconfig {name} name of plain characters, "
                         "not starting with '-'")
    return value


def check_path(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    if (not isinstance(value, str) or value.startswith("-") or len(value) > 4096
            or any(ord(c) < 32 or c == "\x7f" for c in value)):
        raise _bad(name, f"{value!r}: expected a file path (no control characters, not "
                         "starting with '-')")
    return value


bad_setting = _bad  # the adapter's own settings (command_timeout_s) fail the same way
