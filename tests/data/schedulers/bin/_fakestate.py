"""State file shared by the fake scontrol, squeue and kubectl (see ../README.md)."""

import json
import os
import sys


def load():
    path = os.environ["FLEET_FAKE_STATE"]
    with open(path) as f:
        return path, json.load(f)


def save(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def logged(tool):
    path, state = load()
    state.setdefault("log", []).append([tool] + sys.argv[1:])
    return path, state


def fail(msg, rc=1):
    sys.stderr.write(msg + "\n")
    sys.exit(rc)
