"""GPU memory checks: ECC errors, retired pages and row remapping (NVIDIA's RMA criteria).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks.base import FAIL, WARN, Check, finding, profile_of, registrar
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check(
    "ecc.mode",
    ("gpus.ecc_mode_current", "gpus.ecc_mode_pending", "gpus.ecc_*"),
    "ECC is on, and its counters can be read",
)
def ecc_mode(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    profile = profile_of(facts, exp)
    # A node profile that declares ECC judges the mode itself (node.ecc, node.ecc_pending).
    declared = profile is not None and profile.gpu is not None and profile.gpu.ecc is not None
    for g in facts.gpus:
        if g.ecc_mode_current is False:
            if declared:  # off as the profile wants (or node.ecc says otherwise)
                continue
            yield finding(
                "ecc.mode",
                FAIL,
                "reset_gpu",
                f"{g.label}: ECC is switched off: memory errors go uncounted and uncorrected "
                "(nvidia-smi -e 1, then reset the GPU)"
                + (" (pending on after the next reset)" if g.ecc_mode_pending else ""),
                g,
                facts=["gpus.ecc_mode_current"],
            )
            continue
        unread = {k: v for k, v in g.unreadable.items()
                  if k in ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected")}
        no_ecc = g.ecc_mode_current is None and g.unreadable.get(
            "ecc_mode_current", "").startswith(("not_supported", "not_available"))  # no ECC
        if unread and not no_ecc:
            yield finding(
                "ecc.mode",
                WARN,
                "none",
                f"{g.label}: uncorrectable ECC counters unreadable "
                f"({'; '.join(sorted(set(unread.values())))}): the ECC checks cannot judge it",
                g,
                facts=sorted(f"gpus.{k}" for k in unread),
            )
        if g.ecc_mode_pending is False and g.ecc_mode_current and not declared:
            yield finding(
                "ecc.mode",
                WARN,
                "reset_gpu",
                f"{g.label}: ECC will be off after the next GPU reset (pending mode off)",
                g,
                facts=["gpus.ecc_mode_pending"],
            )


@check(
    "ecc.uncorrectable",
    ("gpus.ecc_*_uncorrected", "gpus.ecc_sram_threshold_exceeded"),
    "no uncorrectable ECC errors",
)
def ecc_uncorrectable(
    facts: HostFacts, exp: Expectations, th: Thresholds
) -> Iterable[Finding]:
    for g in facts.gpus:
        if (g.ecc_volatile_uncorrected or 0) > th.ecc_uncorrectable_max:
            yield finding(
                "ecc.uncorrectable",
                FAIL,
                "drain",
                f"{g.label}: {g.ecc_volatile_uncorrected} uncorrectable ECC error(s) since "
                "driver load; drain and reset the GPU",
                g,
                facts=["gpus.ecc_volatile_uncorrected"],
                count=g.ecc_volatile_uncorrected,
            )
        elif g.ecc_aggregate_uncorrected:
            yield finding(
                "ecc.uncorrectable",
                WARN,
                "none",
                f"{g.label}: {g.ecc_aggregate_uncorrected} uncorrectable ECC error(s) in its "
                "lifetime; watch the remap state",
                g,
                facts=["gpus.ecc_aggregate_uncorrected"],
                count=g.ecc_aggregate_uncorrected,
            )
        if g.ecc_sram_threshold_exceeded:
            yield finding(
                "ecc.uncorrectable",
                FAIL,
                "rma",
                f"{g.label}: SRAM error threshold exceeded; run field diagnostics",
                g,
                facts=["gpus.ecc_sram_threshold_exceeded"],
            )


@check("ecc.corrected", ("gpus.ecc_*_corrected",), "corrected ECC errors below the thresholds")
def ecc_corrected(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        agg, vol = g.ecc_aggregate_corrected, g.ecc_volatile_corrected
        if agg is not None and agg > th.ecc_corrected_aggregate_max:
            yield finding(
                "ecc.corrected",
                FAIL,
                "rma",
                f"{g.label}: {agg} corrected ECC errors in its lifetime "
                f"(> {th.ecc_corrected_aggregate_max})",
                g,
                facts=["gpus.ecc_aggregate_corrected"],
                count=agg,
            )
        elif vol is not None and vol > th.ecc_corrected_volatile_max:
            yield finding(
                "ecc.corrected",
                WARN,
                "none",
                f"{g.label}: {vol} corrected ECC errors since driver load "
                f"(> {th.ecc_corrected_volatile_max}); trend it",
                g,
                facts=["gpus.ecc_volatile_corrected"],
                count=vol,
            )


@check("ecc.retired_pages", ("gpus.retired_pages_*",), "retired pages below the table limit")
def retired_pages(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        sbe, dbe = g.retired_pages_sbe or 0, g.retired_pages_dbe or 0
        if sbe + dbe >= th.retired_pages_limit:
            yield finding(
                "ecc.retired_pages",
                FAIL,
                "rma",
                f"{g.label}: {sbe + dbe} retired pages (limit {th.retired_pages_limit})",
                g,
                facts=["gpus.retired_pages_sbe", "gpus.retired_pages_dbe"],
                sbe=sbe,
                dbe=dbe,
            )
        elif dbe > th.retired_pages_dbe_max:
            yield finding(
                "ecc.retired_pages",
                WARN,
                "rma",
                f"{g.label}: {dbe} pages retired for double-bit errors",
                g,
                facts=["gpus.retired_pages_dbe"],
                dbe=dbe,
            )
        if g.retired_pages_pending:
            yield finding(
                "ecc.retired_pages",
                WARN,
                "reboot",
                f"{g.label}: page retirement pending; reload the driver or reboot",
                g,
                facts=["gpus.retired_pages_pending"],
            )


@check("remap.pending", ("gpus.remapped_rows_pending",), "no row remap waiting for a GPU reset")
def remap_pending(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if g.remapped_rows_pending:
            yield finding(
                "remap.pending",
                FAIL if th.fail_on_remap_pending else WARN,
                "reset_gpu",
                f"{g.label}: row remap pending ({g.remapped_rows_uncorrectable or 0} "
                f"uncorrectable, {g.remapped_rows_correctable or 0} correctable remaps); "
                + (
                    "drain the GPU and reset it to apply the remap"
                    if th.fail_on_remap_pending
                    else "reset the GPU at the next window"
                ),
                g,
                facts=["gpus.remapped_rows_pending"],
            )


@check(
    "remap.failure",
    ("gpus.remapped_rows_failure", "gpus.remapped_rows_uncorrectable", "gpus.remap_histogram"),
    "row remapping has not failed or run out",
)
def remap_failure(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if g.remapped_rows_failure:
            yield finding(
                "remap.failure",
                FAIL if th.fail_on_remap_failure else WARN,
                "rma",
                f"{g.label}: row remapping failed (NVIDIA's RMA criterion)",
                g,
                facts=["gpus.remapped_rows_failure"],
            )
        elif (g.remapped_rows_uncorrectable or 0) >= th.remapped_rows_uncorrectable_limit:
            yield finding(
                "remap.failure",
                FAIL,
                "rma",
                f"{g.label}: {g.remapped_rows_uncorrectable} uncorrectable remaps",
                g,
                facts=["gpus.remapped_rows_uncorrectable"],
            )
        elif g.remap_histogram and (g.remap_histogram.low or g.remap_histogram.none):
            yield finding(
                "remap.failure",
                WARN,
                "rma",
                f"{g.label}: {g.remap_histogram.low + g.remap_histogram.none} memory banks "
                "have few or no spare rows left",
                g,
                facts=["gpus.remap_histogram"],
            )
