#!/usr/bin/python3
# FAKE nvidia-mig-parted from the fleet lab: `apply` and `assert` (-f/--config-file,
# -c/--selected-config, -m/--mode-only, -a/--valid-config for assert) and `version`, on the lab's
# fake GPUs. It reads mig-parted's config format v1 with the real parser's rules (version v1,
# only `version` and `mig-configs`, every config non-empty, each entry with `devices` ("all" or
# indices) and `mig-enabled`, optional `device-filter` (PCI device ids, 0xDDDDVVVV), mig-devices
# required when enabled and refused when disabled, no other field) and applies it as the real
# tool walks it: every entry, in order, to every GPU it matches (overlapping entries apply one
# after the other), MIG mode first (clearing the instances of a MIG GPU when a mode changes),
# then the MIG devices. A profile the GPU does not offer (NVML lists its profiles) is refused.
# GPUs are read through pynvml (the fake NVML); changes go into the fake NVML's state file, as
# the fake nvidia-smi writes them (fleet/lab/nvml/nvidia_smi.py). The host's python3 has no
# PyYAML: a config is read as JSON (which fleet writes, and which is YAML too), else refused.
# Messages follow the real tool's where known; exit 1 on every error.
import json
import os
import re
import sys
from typing import Any, NoReturn

import pynvml as n

STATE = os.environ.get("GPUSIM_STATE") or "/var/lib/gpusim/state"
SLICES = 7


def fail(msg: str) -> NoReturn:
    print(f'time="0" level=fatal msg="{msg}"', file=sys.stderr)
    sys.exit(1)


def parse_spec(text: str) -> dict[str, list[dict[str, Any]]]:
    """The mig-configs of a v1 file, checked as mig-parted's api/spec/v1 checks them."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        fail(f"error parsing config file: unmarshal error: {e}")
    if not isinstance(doc, dict):
        fail("error parsing config file: unmarshal error: not a mapping")
    if "version" not in doc and doc:
        fail("error parsing config file: unmarshal error: unable to parse with missing "
             "'version' field")
    if doc.get("version") != "v1":
        fail(f"error parsing config file: unmarshal error: unknown version: {doc.get('version')}")
    for k in doc:
        if k not in ("version", "mig-configs"):
            fail(f"error parsing config file: unmarshal error: unexpected field: {k}")
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        fail("error parsing config file: unmarshal error: at least one entry in 'mig-configs' "
             "is required")
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            fail(f"error parsing config file: unmarshal error: at least one entry in '{name}' "
                 "is required")
        for entry in entries:
            check_entry(entry)
    return configs


def check_entry(e: Any) -> None:
    def bad(msg: str) -> NoReturn:
        fail(f"error parsing config file: unmarshal error: {msg}")

    if not isinstance(e, dict):
        bad("an entry is not a mapping")
    for r in ("devices", "mig-enabled"):
        if r not in e:
            bad(f"missing required field: {r}")
    for k, v in e.items():
        if k == "devices":
            if isinstance(v, str):
                if v != "all":
                    bad(f"invalid string input for 'devices': {v}")
            elif not (isinstance(v, list) and all(type(i) is int for i in v)):
                bad(f"cannot unmarshal devices: {v!r}")
        elif k == "device-filter":
            if not (isinstance(v, str) or isinstance(v, list) and all(isinstance(s, str)
                                                                        for s in v)):
                bad(f"cannot unmarshal device-filter: {v!r}")
        elif k == "mig-enabled":
            if type(v) is not bool:
                bad(f"cannot unmarshal mig-enabled: {v!r}")
        elif k == "mig-devices":
            if not isinstance(v, dict) or not all(
                    re.fullmatch(r"\d+(c\.\d+)?g\.\d+gb(\+[a-z]+)*", p) and type(c) is int
                    and c >= 0 for p, c in v.items()):
                bad(f"error validating values in 'mig-devices' field: {v!r}")
        else:
            bad(f"unexpected field: {k}")
    if e["mig-enabled"] and e.get("mig-devices") is None:
        bad("missing required field 'mig-devices' when 'mig-enabled' is true")
    if not e["mig-enabled"] and e.get("mig-devices"):
        bad("MIG devices included when 'mig-enabled' is false")


def device_id(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def matches(e: dict[str, Any], i: int, dev_id: int) -> bool:
    filt = e.get("device-filter")
    wanted = [filt] if isinstance(filt, str) and filt else filt if isinstance(filt, list) else []
    if wanted and dev_id not in [device_id(f) for f in wanted]:
        return False
    return e["devices"] == "all" or i in e["devices"]


def read_state() -> dict[str, str]:
    with open(STATE) as f:
        return dict(re.findall(r"^([^#=\s]+)=(.*)$", f.read(), re.M))


def write_state(changes: dict[str, str | None]) -> None:
    """Set (or, for None, drop) keys of the fake NVML's state file, atomically."""
    with open(STATE) as f:
        lines = f.read().splitlines()
    out, seen = [], set()
    for line in lines:
        key = line.partition("=")[0].strip()
        if not line.startswith("#") and key in changes:
            seen.add(key)
            if changes[key] is not None:
                out.append(f"{key}={changes[key]}")
            continue
        out.append(line)
    out += [f"{k}={v}" for k, v in changes.items() if k not in seen and v is not None]
    with open(STATE + ".parted", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(STATE + ".parted", STATE)


class Gpu:
    def __init__(self, i: int, h: Any) -> None:
        self.i, self.h = i, h
        self.id = n.nvmlDeviceGetPciInfo(h).pciDeviceId
        self.profiles: dict[str, Any] = {}
        for idx in range(10):
            try:
                p = n.nvmlDeviceGetGpuInstanceProfileInfo(h, idx)
            except n.NVMLError:
                continue
            name = p.name.decode() if isinstance(p.name, bytes) else p.name
            self.profiles[name.replace("MIG ", "")] = p
        self.capable = bool(self.profiles)

    def mode(self) -> bool:
        return bool(n.nvmlDeviceGetMigMode(self.h)[0])

    def devices(self) -> dict[str, int]:
        by_id = {str(p.id): name for name, p in self.profiles.items()}
        out: dict[str, int] = {}
        for gi in (read_state().get(f"gpu{self.i}.mig.gi") or "").split(","):
            if gi:
                name = by_id.get(gi.partition(":")[0], gi)
                out[name] = out.get(name, 0) + 1
        return out


def walk(configs: list[dict[str, Any]], gpus: list[Gpu]) -> list[tuple[dict[str, Any], Gpu]]:
    return [(e, g) for e in configs for g in gpus if matches(e, g.i, g.id)]


def mode_applied(pairs: list[tuple[dict[str, Any], Gpu]]) -> bool:
    return all(g.mode() == e["mig-enabled"] for e, g in pairs if g.capable)


def config_applied(pairs: list[tuple[dict[str, Any], Gpu]]) -> bool:
    return all(not e["mig-enabled"] or g.devices() == {k: c for k, c in e["mig-devices"].items()
                                                       if c}
               for e, g in pairs if g.capable)


def apply_mode(pairs: list[tuple[dict[str, Any], Gpu]]) -> None:
    for e, g in pairs:
        if not g.capable:
            if e["mig-enabled"] and e["devices"] != "all":
                fail("error applying MIG configuration with hooks: cannot set MIG mode on non "
                     "MIG-capable GPU")
            continue
        if n.nvmlDeviceGetComputeRunningProcesses(g.h):
            fail("error applying MIG configuration with hooks: error setting MIG mode: In use "
                 "by another client")
        on = str(int(e["mig-enabled"]))
        write_state({f"gpu{g.i}.mig.current": on, f"gpu{g.i}.mig.pending": on,
                     f"gpu{g.i}.mig.gi": None})  # clearing a MIG GPU's instances first


def apply_config(pairs: list[tuple[dict[str, Any], Gpu]]) -> None:
    for e, g in pairs:
        if not g.capable:
            if e["mig-enabled"] and e["devices"] != "all":
                fail("error applying MIG configuration with hooks: cannot set MIG config on non "
                     "MIG-capable GPU")
            continue
        if e["mig-enabled"] and not g.mode():
            fail("error applying MIG configuration with hooks: unable to apply MIG config with "
                 "MIG mode disabled")
        if not e["mig-enabled"]:
            if g.mode():
                fail("error applying MIG configuration with hooks: MIG mode is currently "
                     "enabled, but the configuration specifies it should be disabled")
            continue
        want = {k: c for k, c in e["mig-devices"].items() if c}
        if g.devices() == want:
            continue
        gis, used = [], 0
        for name, count in sorted(want.items()):
            p = g.profiles.get(name)
            if p is None:
                fail(f"error applying MIG configuration with hooks: error setting MIGConfig: "
                     f"error validating MIG config: invalid MIG profile '{name}' for GPU {g.i}")
            for _ in range(count):
                if used + p.sliceCount > SLICES:
                    fail("error applying MIG configuration with hooks: error setting MIGConfig: "
                         f"error creating GPU instance for '{name}': Insufficient Resources")
                gis.append(f"{p.id}:{used}")
                used += p.sliceCount
        write_state({f"gpu{g.i}.mig.gi": ",".join(gis)})


def flags(args: list[str]) -> dict[str, str | bool]:
    names = {"-f": "file", "--config-file": "file", "-c": "config", "--selected-config": "config",
             "-k": "hooks", "--hooks-file": "hooks"}
    bools = {"-m": "mode_only", "--mode-only": "mode_only", "-a": "valid", "--valid-config":
             "valid", "-s": "skip_reset", "--skip-reset": "skip_reset", "-d": "debug",
             "--debug": "debug"}
    out: dict[str, str | bool] = {"file": os.environ.get("MIG_PARTED_CONFIG_FILE", ""),
                                  "config": os.environ.get("MIG_PARTED_SELECTED_CONFIG", "")}
    it = iter(args)
    for a in it:
        key, _, val = a.partition("=")
        if key in names:
            out[names[key]] = val or next(it, "")
        elif a in bools:
            out[bools[a]] = True
        else:
            fail(f"flag provided but not defined: {a}")
    return out


def main(args: list[str]) -> None:
    if args[:1] in (["version"], ["--version"], ["-v"]):
        print("nvidia-mig-parted version 0.12.1 (fleet lab fake)")
        return
    if args[:1] not in (["apply"], ["assert"]):
        fail(f"No help topic for '{args[0] if args else ''}' (fleet lab fake: apply, assert)")
    cmd, f = args[0], flags(args[1:])
    if not f["file"]:
        fail("missing required flags 'config-file'")
    try:
        with open(str(f["file"])) as fh:
            text = fh.read()
    except OSError as e:
        fail(f"error parsing config file: read error: {e}")
    configs = parse_spec(text)
    chosen = str(f["config"])
    if len(configs) > 1 and not chosen:
        fail("error selecting MIG config: missing required flag 'selected-config' when more than "
             "one config available")
    chosen = chosen or next(iter(configs))
    if chosen not in configs:
        fail(f"error selecting MIG config: selected mig-config not present: {chosen}")
    if cmd == "assert" and f.get("valid"):
        print("Selected MIG configuration is valid")
        return
    n.nvmlInit()
    gpus = [Gpu(i, n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())]
    pairs = walk(configs[chosen], gpus)
    if cmd == "assert":
        if not mode_applied(pairs) or not f.get("mode_only") and not config_applied(pairs):
            fail("Assertion failure: selected configuration not currently applied")
        print("Selected MIG configuration currently applied")
        return
    if not mode_applied(pairs):
        apply_mode(pairs)
    if not f.get("mode_only") and not config_applied(pairs):
        apply_config(pairs)
    print("MIG configuration applied successfully")


if __name__ == "__main__":
    main(sys.argv[1:])
