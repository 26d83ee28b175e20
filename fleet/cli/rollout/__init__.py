"""`fleet rollout`: plan, start, resume, promote, keep-waiting, abort, status and history of staged
rollouts.

One module per responsibility: `plan` (waves, touching nothing), `start` (a new rollout),
`control` (resume, promote, keep-waiting, abort a recorded one), `views` (status, history),
with `drive` (the live display and exit codes), `wiring` (simulated fleet or SSH) and `common`
(options and their checks) under them. Importing the package registers the commands on `app`
in help order.
"""

from __future__ import annotations

import importlib

from fleet.cli.rollout.group import app

# imported in this order, their commands list in this order in `fleet rollout --help`
for _module in ("plan", "start", "control", "views"):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["app"]
