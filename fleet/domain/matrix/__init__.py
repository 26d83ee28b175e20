"""The version matrix: releases, policy and per-pool rollout settings, with NVIDIA's rules.

`models` holds the pydantic shapes, `loader` reads YAML with line numbers and validates,
`rules` holds the cross-field checks against NVIDIA's tables, `diff` compares two matrices.
"""

from fleet.domain.matrix.models import (
    BlockedVersion,
    Companions,
    Driver,
    GateSettings,
    GoldenPolicy,
    Matrix,
    PackageSpec,
    Policy,
    PoolSettings,
    Release,
    RolloutSettings,
    Thresholds,
    wave_sizes,
)

__all__ = [
    "BlockedVersion",
    "Companions",
    "Driver",
    "GateSettings",
    "GoldenPolicy",
    "Matrix",
    "PackageSpec",
    "Policy",
    "PoolSettings",
    "Release",
    "RolloutSettings",
    "Thresholds",
    "wave_sizes",
]
