"""Fixture: fleet and `pyinfra inventories/prod.py debug-inventory` must agree on every host."""

import os  # imported names are not groups

_spare = ["not-a-group"]
h100_canary = (
    [("gpu-h100-001", {"unit": "nvl-a1", "gpu_count": 8})],
    {"pool": "h100-canary", "gpu_model": "H100"},
)
h100 = (
    [("gpu-h100-002", {"unit": "nvl-a1"}), ("gpu-h100-003", {"unit": "nvl-a2"}), "gpu-h100-001"],
    {"gpu_model": "H100-tuple", "gpu_count": 4, "wave": 1},
)
a100 = [("gpu-a100-001", {"ssh_hostname": "10.0.4.11", "gpu_model": "A100", "gpu_count": 8})]
local = ["@local"]
home = os.sep
