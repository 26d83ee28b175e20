"""`fleet rollout resume|promote|keep-waiting|abort`: act on a recorded rollout, reached the
way it recorded."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fleet.cli.rollout.common import ForceOpt, JsonFlag, PrometheusOpt, ReasonOpt, no_rollout
from fleet.cli.rollout.drive import drive
from fleet.cli.rollout.group import app
from fleet.errors import BadInput


def _recorded(ctx: typer.Context, rollout_id: int) -> tuple[str, dict[str, Any]]:
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import get_rollout, start_data

    with open_history(settings(ctx).db, create=False) as history:
        ro = get_rollout(history, rollout_id)
        if ro is None:
            raise no_rollout(history, rollout_id)
        data = start_data(history, rollout_id)
    source = data.get("source") or {}
    if not source:
        raise BadInput.single(f"rollout {rollout_id} did not record how to reach its hosts",
                              field="ID")
    return ro.matrix_path, source


def _options(ctx: typer.Context, rollout_id: int) -> dict[str, Any]:
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import start_data

    with open_history(settings(ctx).db, create=False) as history:
        opts = start_data(history, rollout_id).get("options") or {}
    return {k: v for k, v in opts.items() if k in ("rollback_scope", "stale_after_s",
                                                  "bench_hosts")}


@app.command("resume")
def resume_cmd(ctx: typer.Context, rollout_id: Annotated[int, typer.Argument(metavar="ID")],
               force: ForceOpt = False, prometheus: PrometheusOpt = None,
               json_out: JsonFlag = False) -> None:
    """Continue a rollout whose controller stopped (killed, crashed); a paused one stays paused."""
    mpath, source = _recorded(ctx, rollout_id)
    drive(ctx, mpath, source, json_out, lambda e: e.resume(rollout_id, force=force),
          options=_options(ctx, rollout_id), rollout_id=rollout_id, prometheus=prometheus)


@app.command("promote")
def promote_cmd(ctx: typer.Context, rollout_id: Annotated[int, typer.Argument(metavar="ID")],
                reason: ReasonOpt = None, force: ForceOpt = False,
                prometheus: PrometheusOpt = None, json_out: JsonFlag = False) -> None:
    """Pass the paused wave's inconclusive benchmark or live gate by hand and continue the
    rollout (refused for a wave paused on its drain: see keep-waiting)."""
    mpath, source = _recorded(ctx, rollout_id)
    drive(ctx, mpath, source, json_out,
          lambda e: e.promote(rollout_id, force=force, reason=reason),
          options=_options(ctx, rollout_id), rollout_id=rollout_id, prometheus=prometheus)


@app.command("keep-waiting")
def keep_waiting_cmd(ctx: typer.Context,
                     rollout_id: Annotated[int, typer.Argument(metavar="ID")],
                     reason: ReasonOpt = None, force: ForceOpt = False,
                     prometheus: PrometheusOpt = None, json_out: JsonFlag = False) -> None:
    """After a drain-timeout pause: wait a whole drain timeout again for the wave's jobs; the
    wave then goes through every gate (promote is refused there: no gate has run)."""
    mpath, source = _recorded(ctx, rollout_id)
    drive(ctx, mpath, source, json_out,
          lambda e: e.keep_waiting(rollout_id, force=force, reason=reason),
          options=_options(ctx, rollout_id), rollout_id=rollout_id, prometheus=prometheus)


@app.command("abort")
def abort_cmd(ctx: typer.Context, rollout_id: Annotated[int, typer.Argument(metavar="ID")],
              reason: ReasonOpt = None, force: ForceOpt = False,
              json_out: JsonFlag = False) -> None:
    """Roll back the current wave (or all moved hosts, per the rollout's scope) and stop."""
    mpath, source = _recorded(ctx, rollout_id)
    drive(ctx, mpath, source, json_out,
          lambda e: e.abort(rollout_id, force=force, reason=reason),
          options=_options(ctx, rollout_id), rollout_id=rollout_id)
