"""A pool's `rollout.drain` and `rollout.reboot`: defaults; bad values refused, field named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleet.domain.matrix.rollout_settings import DrainSettings, RolloutSettings


def test_defaults_wait_an_hour_then_pause_and_reboot_over_ssh() -> None:
    s = RolloutSettings()
    assert (s.drain.timeout_minutes, s.drain.on_timeout, s.reboot) == (60.0, "pause", "ssh")
    assert s.drain.timeout_s == 3600.0


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("pod_selector", "a b", "not a Kubernetes label selector"),
    ("pod_selector", "app=x;rm -rf /", "not a Kubernetes label selector"),
    ("pod_selector", "$(reboot)", "not a Kubernetes label selector"),
    ("grace_period_seconds", 0, "greater than or equal to 1"),
    ("timeout_minutes", -1, "greater than or equal to 0"),
    ("timeout_minutes", float("nan"), ""),
    ("poll_seconds", 0, "greater than 0"),
    ("on_timeout", "kill", "'pause', 'skip', 'cancel' or 'requeue'"),
])
def test_bad_values_are_refused(field: str, value: object, needle: str) -> None:
    with pytest.raises(ValidationError) as e:
        DrainSettings(**{field: value})
    assert field in str(e.value) and needle in str(e.value)


def test_reboot_is_ssh_or_slurm() -> None:
    assert RolloutSettings(reboot="slurm").reboot == "slurm"
    with pytest.raises(ValidationError):
        RolloutSettings(reboot="ipmi")  # type: ignore[arg-type]


def test_a_real_selector_passes() -> None:
    assert DrainSettings(pod_selector="app=trainer,tier!=system").pod_selector
