"""The bundle parsers: good captures parse, a corrupt file is a located error (file, line,
field), a missing file is "could not judge" for what needs it and never a crash."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fleet.domain.diagnose.bundle import BUNDLE_FILES, evidence
from fleet.domain.diagnose.parse_host import (
    parse_df,
    parse_loadavg,
    parse_meminfo,
    parse_prometheus,
    parse_ps,
    parse_stat,
)
from fleet.domain.diagnose.parse_smi import parse_smi_text, parse_smi_xml
from fleet.domain.diagnose.parse_streams import cpu_list, parse_dmon, parse_pmon, parse_topo
from fleet.domain.diagnose.questions import diagnose
from fleet.errors import BadInput

DATA = Path(__file__).parents[2] / "data"
HEALTHY = DATA / "diagnose" / "bundles" / "healthy"
REAL_XML = DATA / "realdata" / "nvidia-smi-xml"


def _files(d: Path = HEALTHY) -> dict[str, str]:
    return {p.name: p.read_text() for p in d.iterdir()}


def test_xml_processes_and_utilization_from_a_real_capture() -> None:
    snap = parse_smi_xml((REAL_XML / "telegraf__tesla-t4.xml").read_text())
    g = snap.gpus[0]
    assert snap.driver and g.name == "Tesla T4"
    assert g.fb_total_mib and g.fb_total_mib > 15000
    assert g.util_gpu == 0 and g.pcie_width == 8 and g.pcie_width_max == 16
    assert len(g.processes) == 2 and all(p.used_mib for p in g.processes)


def test_text_processes_every_entry_not_only_the_first() -> None:
    snap = parse_smi_text((HEALTHY / "nvidia-smi-q.txt").read_text())
    g = snap.gpus[0]
    assert [p.pid for p in g.processes] == [11327, 11328, 11345]
    assert [p.used_mib for p in g.processes] == [2566, 1542, 15690]
    assert g.util_gpu == 100 and g.util_mem == 11 and g.pstate == "P0"
    assert g.clock_sm == 1980 and g.clock_sm_max == 1980 and g.power_limit_w == 700.0


def test_dmon_columns_by_name_and_dash_as_missing() -> None:
    text = ("# gpu    pwr  gtemp  mtemp     sm    mem   mclk   pclk\n"
            "# Idx      W      C      C      %      %    MHz    MHz\n"
            "    0     70     35      -     12     40   2619   1980\n"
            "    1     71     36      -      0      0   2619    345\n")
    s = parse_dmon(text)
    assert [x.gpu for x in s] == [0, 1]
    assert s[0].values == {"pwr": 70, "gtemp": 35, "sm": 12, "mem": 40, "mclk": 2619,
                           "pclk": 1980}


def test_pmon_passes_and_processless_rows() -> None:
    text = ("# gpu         pid   type     sm    mem    enc    dec    command\n"
            "# Idx           #    C/G      %      %      %      %    name\n"
            "    0        100     C     50     10      -      -    python3 serve.py\n"
            "    1          -     -      -      -      -      -    -\n"
            "    0        100     C     55     10      -      -    python3 serve.py\n"
            "    1          -     -      -      -      -      -    -\n")
    rows = parse_pmon(text)
    assert [(r.pid, r.sample, r.sm) for r in rows] == [(100, 0, 50), (100, 1, 55)]
    assert rows[0].command == "python3 serve.py" and rows[0].fb_mib is None


def test_topo_affinity() -> None:
    text = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNV18\tSYS\t0-55,112-167\t0\t\tN/A\n"
            "GPU1\tNV18\t X \tSYS\t56-111,168-223\t1\t\tN/A\n"
            "NIC0\tSYS\tSYS\t X \t\t\t\t\n\nLegend:\n")
    t = parse_topo(text)
    assert [(x.gpu, x.numa) for x in t] == [(0, 0), (1, 1)]
    assert t[0].cpus is not None and 55 in t[0].cpus and 56 not in t[0].cpus
    assert t[1].links["GPU0"] == "NV18"
    assert cpu_list("N/A") is None


def test_stat_two_copies_give_the_busy_share() -> None:
    one = "cpu  100 0 0 900 0 0 0 0\ncpu0 100 0 0 900 0 0 0 0\n"
    two = one + "cpu  190 0 0 910 0 0 0 0\ncpu0 190 0 0 910 0 0 0 0\n"
    assert parse_stat(one).busy is None
    c = parse_stat(two)
    assert (c.cpus, c.busy, c.total) == (1, 90, 100)


def test_df_skips_pseudo_and_snap_filesystems() -> None:
    mounts = [d.mount for d in parse_df((HEALTHY / "df.txt").read_text())]
    assert mounts == ["/", "/boot/efi"]


def test_prometheus_queue_metrics() -> None:
    q = parse_prometheus('tgi_queue_size 3\n# c\ntgi_request_queue_duration_sum 6\n'
                         'tgi_request_queue_duration_count 2\nother{a="b"} 1\n')
    assert (q.waiting, q.wait_seconds_mean) == (3, 3.0)


CORRUPT = [
    (parse_smi_xml, "<nvidia_smi_log>\n<gpu>\n</nvidia_smi_log>\n", 3, "nvidia_smi_log"),
    (parse_smi_xml, "<?xml version='1.0'?>\n<html></html>\n", 1, "nvidia_smi_log"),
    (parse_smi_text, "\nhello world\n", 2, "GPU"),
    (parse_dmon, "# gpu sm mem\n# Idx % %\n 0 10 20\n 0 10\n", 4, "row"),
    (parse_dmon, "# gpu sm mem\n 0 ten 20\n", 2, "sm"),
    (parse_dmon, " 0 10 20\n", 1, "header"),
    (parse_pmon, "# gpu pid type sm command\n 0 12x C 5 python\n", 2, "pid"),
    (parse_topo, "nothing here\n", 1, "header"),
    (parse_topo, "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-a\t0\n", 2,
     "CPU Affinity"),
    (parse_meminfo, "MemTotal: 100 kB\nMemAvailable: lots kB\n", 2, "MemAvailable"),
    (parse_meminfo, "SwapTotal: 0 kB\n", 1, "MemTotal"),
    (parse_loadavg, "0.5 high 0.1 1/2 3\n", 1, "loadavg"),
    (parse_loadavg, "-1 0 0 1/2 3\n", 1, "loadavg"),
    (parse_stat, "cpu  1 2 x 4\n", 1, "cpu"),
    (parse_stat, "cpu  10 0 0 10\ncpu  1 0 0 1\n", 1, "cpu"),
    (parse_df, "Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/sda1 1 2 3\n",
     2, "Capacity"),
    (parse_ps, "  PID PSR %CPU RSS COMMAND\n  12 0 lots 10 x\n", 2, "%CPU"),
    (parse_ps, "hello\n", 1, "header"),
    (parse_prometheus, "metric_a NaNx\n", 1, "metric_a"),
]


@pytest.mark.parametrize(("parser", "text", "line", "field"), CORRUPT,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CORRUPT)])
def test_corrupt_file_is_a_located_error(parser, text, line, field) -> None:  # noqa: ANN001
    with pytest.raises(BadInput) as info:
        parser(text, "bundle/f")
    p = info.value.problems[0]
    assert (p.file, p.line, p.field) == ("bundle/f", line, field)


def test_corrupt_file_named_with_its_bundle_folder() -> None:
    files = _files()
    files["dmon.txt"] += "    0  12  x\n"
    with pytest.raises(BadInput) as info:
        evidence(files, "/tmp/b")
    assert info.value.file == "/tmp/b/dmon.txt"
    assert info.value.line == len(files["dmon.txt"].splitlines())


def test_nvidia_smi_failure_is_evidence_not_an_error() -> None:
    snap = parse_smi_xml("Failed to initialize NVML: Driver/library version mismatch\n")
    assert snap.failure and not snap.gpus
    d = diagnose(evidence({"nvidia-smi-q.xml": snap.failure}))
    assert {f.cls for f in d.findings} == {"drift", "fallback"}
    assert d.verdict == "drift"


@pytest.mark.parametrize("missing", sorted(BUNDLE_FILES))
def test_each_missing_file_is_could_not_judge_never_a_crash(missing: str) -> None:
    files = _files()
    files.pop(missing, None)
    d = diagnose(evidence(files))
    assert d.files[missing] == "missing"
    assert d.verdict == "healthy"


NEEDS = {"topo.txt": "numa", "df.txt": "disk", "kernel.log": "nvlink"}


@pytest.mark.parametrize(("missing", "question"), sorted(NEEDS.items()))
def test_missing_file_answers_could_not_judge(missing: str, question: str) -> None:
    files = _files()
    del files[missing]
    answer = next(a for a in diagnose(evidence(files)).answers if a.cls == question)
    assert answer.status == "could_not_judge" and answer.reason


def test_any_two_files_alone_never_crash() -> None:
    files = _files()
    for pair in itertools.combinations(sorted(files), 2):
        d = diagnose(evidence({k: files[k] for k in pair}))
        assert len(d.answers) == 14


def test_empty_bundle_could_not_judge() -> None:
    d = diagnose(evidence({}))
    assert d.verdict == "could_not_judge" and not d.findings
    assert all(a.status == "could_not_judge" for a in d.answers)


def test_kernel_log_file_judged_for_this_boot_only() -> None:
    boot = "Nov 30 10:00:00 h1 kernel: [    0.000000] Linux version 6.1.0-18-amd64\n"
    xid = ("Nov 30 10:05:00 h1 kernel: [  300.1] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>',"
           " name=<unknown>, GPU has fallen off the bus.\n")
    old = boot + xid
    d = diagnose(evidence({"kernel.log": old + boot}))
    assert not d.findings
    d = diagnose(evidence({"kernel.log": old + boot + xid}))
    f = next(f for f in d.findings if f.cls == "hardware")
    assert f.evidence["lines"] == [4]
