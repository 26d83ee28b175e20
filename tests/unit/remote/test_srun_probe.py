"""`fleet probe --via slurm`: the srun command, the parser of its labelled output, the runner.

The parser is fed fixture text (srun's own error lines as Slurm 22.05 prints them) and output
the real wrapper produced, cut the way slurmstepd cuts long lines. The runner is driven through
stand-in `sinfo`/`srun` executables that run the command locally once per node, like srun does.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.remote.srun_output import TAG, SinfoNode, parse_sinfo, parse_srun_output
from fleet.remote.srun_probe import CHUNK, SlurmInputError, slurm_env, srun_argv, srun_probe

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


# ------------------------------------------------------------------------------------ sinfo
SINFO = """\
h100-1|idle|none
h100-2|drained|ops: RMA 1
h100-3|mixed|none
h100-4|idle*|Not responding
h100-5|draining|fleet: xid: Xid 79
h100-6|down~|Powered down
h100-7|mixed@|Reboot ASAP
h100-8|allocated|none
h100-1|idle|none
"""


def test_parse_sinfo_states_suffixes_and_reasons() -> None:
    rows = parse_sinfo(SINFO)
    assert list(rows) == [f"h100-{i}" for i in range(1, 9)]  # a repeated row counts once
    assert [n for n, r in rows.items() if r.probeable] == ["h100-1", "h100-3"]
    assert rows["h100-4"].base == "idle" and rows["h100-4"].suffixes == "*"
    assert rows["h100-2"].reason == "ops: RMA 1" and rows["h100-1"].reason is None
    assert rows["h100-2"].why_not() == "not probed: Slurm says drained (ops: RMA 1)"
    assert SinfoNode("x", "idle~").why_not() == "not probed: Slurm says idle~"


# ------------------------------------------------------------------------------------- srun
def test_srun_argv_one_step_bounded_and_quoted() -> None:
    argv = srun_argv("h100", ["h100-1", "h100-3"], job_name="fleet-probe-x", timeout_s=90,
                     since={"h100-1": "journal:s=abc;i=1"}, frameworks=False)
    head = argv[: argv.index("/usr/bin/env")]
    assert head == ["srun", "-p", "h100", "-N", "2", "-w", "h100-1,h100-3",
                    "--ntasks-per-node=1", "-I5", "-l", "-v", "-k", "-J", "fleet-probe-x",
                    "-t", "2", "--chdir=/tmp", "--export=NONE"]
    env, path, python, dash_c, code, arg = argv[len(head):]
    assert (env, python, dash_c) == ("/usr/bin/env", "python3", "-c")
    assert path.startswith("PATH=/usr/local/sbin:")
    assert len(code) < 100_000 and "\n" in code
    assert json.loads(base64.b64decode(arg)) == {
        "frameworks": False, "since": {"h100-1": "journal:s=abc;i=1"}}


@pytest.mark.parametrize("bad", [
    {"partition": "h100; reboot"}, {"nodes": ["a b"]}, {"nodes": []},
    {"since": {"h100-1": "x'; reboot; '"}}])
def test_srun_argv_refuses_odd_input(bad: dict[str, Any]) -> None:
    kw: dict[str, Any] = {"partition": "h100", "nodes": ["h100-1"], "since": None} | bad
    with pytest.raises(ValueError):
        srun_argv(kw["partition"], kw["nodes"], job_name="j", timeout_s=10, since=kw["since"])


def test_partition_errors_are_bad_input() -> None:
    with pytest.raises(SlurmInputError):
        srun_argv("bad name", ["a"], job_name="j", timeout_s=10)
    with pytest.raises(SlurmInputError):
        slurm_env({"/a/slurm.conf", "/b/slurm.conf"}, {})
    assert slurm_env({"/a/slurm.conf"}, {"X": "1"}) == {"X": "1", "SLURM_CONF": "/a/slurm.conf"}
    assert slurm_env(set(), {"SLURM_CONF": "/etc/s.conf"}) == {"SLURM_CONF": "/etc/s.conf"}


# ------------------------------------------------------------------------------ the parser
def run_wrapper(node: str, since: dict[str, str] | None = None) -> str:
    """The program srun would run on `node`, run here: its raw stdout."""
    argv = srun_argv("p", [node], job_name="j", timeout_s=60, since=since)
    prog = argv[argv.index("/usr/bin/env"):]
    env = {"SLURMD_NODENAME": node, "PATH": os.environ["PATH"]}
    out = subprocess.run(prog, env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def label(task: int, text: str, piece: int = 1024) -> list[str]:
    """Lines as `srun -l` prints them, long lines cut into labelled pieces like slurmstepd."""
    out: list[str] = []
    for line in text.splitlines():
        for i in range(0, max(1, len(line)), piece):
            out.append(f"{task}: {line[i:i + piece]}")
    return out


def launched(*nodes: str, step: str = "StepId=41.0") -> str:
    """srun -v's own lines saying which node runs which task (task i on nodes[i])."""
    return "".join(f"srun: launching {step} on host {n}, 1 tasks: {i}\n"
                   for i, n in enumerate(nodes))


@pytest.fixture(scope="module")
def two_nodes() -> dict[str, str]:
    return {"n1": run_wrapper("n1"), "n2": run_wrapper("n2")}


def test_parser_reassembles_interleaved_tasks(two_nodes: dict[str, str]) -> None:
    a, b = label(0, two_nodes["n1"]), label(1, two_nodes["n2"])
    mixed = [x for pair in zip(a, b, strict=False) for x in pair] + a[len(b):] + b[len(a):]
    res = parse_srun_output("\n".join(mixed) + "\n", launched("n1", "n2"))
    assert res.errors == {} and set(res.docs) == {"n1", "n2"}
    assert res.tasks == {0: "n1", 1: "n2"}
    direct = json.loads(subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[3] / "fleet/probe/hostprobe.py"),
         "--no-frameworks"], capture_output=True, text=True, check=True).stdout)
    for key in ("source", "gpus", "gpu_count", "schema"):
        assert res.docs["n1"][key] == direct[key]
    assert res.docs["n1"]["versions"]["packages"] == direct["versions"]["packages"]


def test_wrapper_lines_stay_short(two_nodes: dict[str, str]) -> None:
    lines = two_nodes["n1"].splitlines()
    assert lines[0] == f"{TAG} n1 begin" and lines[-1].startswith(f"{TAG} n1 end ")
    assert max(len(x) for x in lines) < 1024 - len("99999: ")  # never cut by slurmstepd
    long = "n" * 200
    assert max(len(x) for x in run_wrapper(long).splitlines()) < 1024 - len("99999: ")
    assert CHUNK < 1024


def test_parser_names_what_went_wrong_per_node(two_nodes: dict[str, str]) -> None:
    good = label(0, two_nodes["n1"])
    cut = label(1, two_nodes["n2"])[:2]  # begin and one piece, then the task died
    stdout = "\n".join(good + cut + ["2: FLEET-PROBE n3 begin"]) + "\n"
    stderr = launched("n1", "n2", "n3") + (
        "srun: jobid 41: nodes(3):`n[1-3]', cpu counts: 1(x3)\n"
        "2: Traceback (most recent call last):\n"
        "2:   File \"hostprobe.py\", line 1, in <module>\n"
        "2: MemoryError\n"
        "srun: error: n3: task 2: Exited with exit code 1\n"
        "srun: error: Task launch for StepId=41.0 failed on node n4: Invalid node name\n"
        "srun: error: Application launch failed: Invalid node name specified\n"
    )
    res = parse_srun_output(stdout, stderr)
    assert set(res.docs) == {"n1"}
    assert res.errors["n2"].startswith("output cut short (1 piece(s), no end line)")
    assert res.errors["n3"].endswith("MemoryError") and "cut short" in res.errors["n3"]
    assert res.errors["n4"] == "Invalid node name"
    assert res.general == ["srun: error: Application launch failed: Invalid node name specified"]


def test_parser_missing_piece_and_garbage() -> None:
    enc = base64.b64encode(b"not zlib").decode()
    stdout = (f"0: {TAG} a begin\n0: {TAG} a 0 {enc}\n0: {TAG} a end 1\n"
              f"1: {TAG} b begin\n1: {TAG} b 1 xx\n1: {TAG} b end 2\n"
              "1: something else the node printed\nno label at all\n")
    res = parse_srun_output(stdout, launched("a", "b"))
    assert res.docs == {}
    assert res.errors["a"].startswith("output unreadable")
    assert res.errors["b"] == "output incomplete (1 of 2 piece(s))"


# ---------------------------------------------------------------------- srun_probe (I/O)
class FakeExec:
    """Plays sinfo, srun and scancel; records argv."""

    def __init__(self, sinfo: str, srun: tuple[int, str, str, bool] | None = None,
                 sinfo_rc: int = 0) -> None:
        self.sinfo, self.srun, self.sinfo_rc = sinfo, srun, sinfo_rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], env: Any, timeout: float) -> tuple[int, str, str, bool]:
        self.calls.append(argv)
        if argv[0] == "sinfo":
            return self.sinfo_rc, self.sinfo, "sinfo: error: boom" if self.sinfo_rc else "", False
        if argv[0] == "scancel":
            return 0, "", "", False
        assert self.srun is not None
        return self.srun


def test_not_ready_nodes_are_reported_never_sent_to_srun() -> None:
    fx = FakeExec(SINFO, (0, "\n".join(label(0, run_wrapper("h100-1"))) + "\n",
                          launched("h100-1", "h100-3"), False))
    nodes = ["h100-1", "h100-2", "h100-4", "h100-9", "h100-3"]
    rep = srun_probe("h100", nodes, env={}, run=fx, plain=fx)
    srun = [c for c in fx.calls if c[0] == "srun"]
    assert len(srun) == 1 and srun[0][srun[0].index("-w") + 1] == "h100-1,h100-3"
    assert rep.results["h100-1"].ok and rep.results["h100-1"].value is not None
    assert rep.results["h100-2"].error == "not probed: Slurm says drained (ops: RMA 1)"
    assert not rep.results["h100-2"].reachable
    assert "idle*" in (rep.results["h100-4"].error or "")
    assert rep.results["h100-9"].error == "not in Slurm partition h100"
    assert rep.results["h100-3"].error == "no answer from srun (exit 0): srun exited 0"
    assert rep.skipped == {"h100-2": "drained", "h100-4": "idle*"}
    assert "--export=NONE" in rep.argv_head


def test_timeout_reports_every_node_and_cancels_the_job() -> None:
    fx = FakeExec(SINFO, (124, "0: FLEET-PROBE h100-1 begin\n", launched("h100-1"), True))
    rep = srun_probe("h100", ["h100-1", "h100-3"], env={}, timeout_s=7, run=fx, plain=fx)
    for n in ("h100-1", "h100-3"):
        assert (rep.results[n].error or "").startswith("srun timed out after 7 s")
    assert "cut short" in (rep.results["h100-1"].error or "")
    job = next(c for c in fx.calls if c[0] == "srun")
    name = job[job.index("-J") + 1]
    assert ["scancel", "--name", name] in fx.calls


def test_srun_failure_and_sinfo_failure() -> None:
    fx = FakeExec(SINFO, (1, "", "srun: error: Unable to allocate resources: Requested nodes "
                                 "are busy\n", False))
    rep = srun_probe("h100", ["h100-1"], env={}, run=fx, plain=fx)
    assert "Requested nodes are busy" in (rep.results["h100-1"].error or "")
    fx = FakeExec("", sinfo_rc=1)
    rep = srun_probe("h100", ["h100-1"], env={}, run=fx, plain=fx)
    assert (rep.results["h100-1"].error or "").startswith("sinfo failed (exit 1)")
    assert not [c for c in fx.calls if c[0] == "srun"]


# --------------------------------------------------- the whole path, with stand-in commands
FAKE_SRUN = r'''
import os, subprocess, sys
args = sys.argv[1:]
nodes = args[args.index("-w") + 1].split(",")
prog = args[args.index("--export=NONE") + 1:]
open(os.environ["FAKE_LOG"], "a").write(
    os.environ.get("SLURM_CONF", "-") + " " + " ".join(args[:args.index("--export=NONE")]) + "\n")
for task, node in enumerate(nodes):
    if "-v" in args[:args.index("--export=NONE")]:
        print(f"srun: launching StepId=7.0 on host {node}, 1 tasks: {task}", file=sys.stderr)
    env = {"SLURMD_NODENAME": node, "PATH": os.environ["PATH"]}
    p = subprocess.run(prog, env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        for i in range(0, max(1, len(line)), 1024):
            print(f"{task}: {line[i:i + 1024]}")
'''


def fake_slurm(tmp_path: Path, sinfo: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "sinfo.txt").write_text(sinfo)
    for name, body in {
        "srun": FAKE_SRUN,
        "sinfo": f"import sys; sys.stdout.write(open({str(tmp_path / 'sinfo.txt')!r}).read())",
        "scancel": "pass",
    }.items():
        p = bin_dir / name
        p.write_text(f"#!{sys.executable}\n{body}\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_LOG": str(tmp_path / "srun.log")}


def test_probe_inventory_via_slurm_records_like_ssh(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.history import latest_snapshots, list_events, open_history
    from fleet.jobs.probe import probe_inventory

    for k, v in fake_slurm(tmp_path, "gpu-01|idle|none\ngpu-02|drained|ops: RMA 7\n"
                                     "gpu-03|idle|none\nother|idle|none\n").items():
        monkeypatch.setenv(k, v)
    inv = tmp_path / "inv.py"
    inv.write_text(
        "_d = {'slurm_conf': '/lab/slurm.conf'}\n"
        "h100 = [('gpu-01', _d), ('gpu-02', _d), ('gpu-03', {**_d, 'slurm_node': 'gpu-03'})]\n"
        "cpu = [('not-in-partition', _d)]\n")
    with open_history(str(tmp_path / "h.db")) as h:
        results = probe_inventory(inv, None, h, now=lambda: NOW, frameworks=False,
                                  via="slurm", partition="h100")
        by = {r.host: r for r in results}
        assert set(by) == {"gpu-01", "gpu-02", "gpu-03"}
        assert by["gpu-01"].facts is not None and by["gpu-03"].facts is not None
        assert not by["gpu-02"].reachable and "ops: RMA 7" in (by["gpu-02"].error or "")
        snaps = {host.name: snap for host, snap in latest_snapshots(h)}
        assert snaps["gpu-01"].reachable and snaps["gpu-01"].source == "none"
        assert snaps["gpu-02"].reachable is False
        [event] = list_events(h)
        assert event.kind == "probe" and (event.data or {}).get("via") == "slurm"
    [line] = (tmp_path / "srun.log").read_text().splitlines()  # one srun for the partition
    assert line.startswith("/lab/slurm.conf -p h100 -N 2 -w gpu-01,gpu-03 ")


def test_cli_via_slurm_needs_a_partition(fleet_cli: Any, tmp_path: Path) -> None:
    r = fleet_cli("probe", "-i", str(tmp_path / "none.py"), "--via", "slurm")
    assert r.returncode == 2 and "--partition" in r.stderr


def test_hygiene_run_via_slurm_probes_with_one_srun(fleet_cli: Any, tmp_path: Path) -> None:
    env = fake_slurm(tmp_path, "gpu-01|idle|none\ngpu-02|down*|Not responding\n")
    inv = tmp_path / "inv.py"
    inv.write_text("h100 = [('gpu-01', {}), ('gpu-02', {})]\n")
    root = Path(__file__).resolve().parents[3]
    r = fleet_cli("--db", str(tmp_path / "h.db"), "hygiene", "run", "-m",
                  str(root / "matrices" / "example.yaml"), "-i", str(inv), "--via", "slurm",
                  "--partition", "h100", "--no-benchmark", "--json", env=env)
    assert r.returncode == 1, r.stderr  # fails closed: gpu-02 was not probed
    doc = json.loads(r.stdout)
    assert "gpu-02" in json.dumps(doc) and "Not responding" in json.dumps(doc)
    [line] = (tmp_path / "srun.log").read_text().splitlines()
    assert "-w gpu-01 " in line
    bad = fleet_cli("hygiene", "run", "-m", str(root / "matrices" / "example.yaml"), "-i",
                    str(inv), "--via", "slurm", env=env)
    assert bad.returncode == 2


def test_parser_on_real_srun_output() -> None:
    """`srun -l` output captured on the lab's Slurm 22.05 (3 nodes, partition lab), as printed:
    tests/data/srun/lab-3-nodes.stdout (the wrapper's lines were 800 characters then), and
    what `srun -v` printed on stderr there (another run, same layout): lab-3-nodes.stderr."""
    data = Path(__file__).resolve().parents[2] / "data" / "srun"
    text = (data / "lab-3-nodes.stdout").read_text()
    res = parse_srun_output(text, (data / "lab-3-nodes.stderr").read_text())
    assert res.errors == {} and res.general == []
    assert sorted(res.docs) == ["h1", "h2", "h3"]
    assert sorted(res.tasks.values()) == ["h1", "h2", "h3"]
    for name, doc in res.docs.items():
        from fleet.domain.facts import HostFacts

        f = HostFacts.model_validate(doc)
        assert f.source == "nvml" and len(f.gpus) == 8, name
        assert f.identity is not None and f.identity.hostname == f"lab-{name}"


# ------------------------------------------------- a node speaks for itself only (issue 32)
def _doc_lines(task: int, node: str, doc: dict[str, Any], k: int = 300) -> list[str]:
    """What a task would print for `doc` under the name `node` (genuine or not)."""
    import zlib

    d = base64.b64encode(zlib.compress(json.dumps(doc).encode())).decode()
    parts = [d[i:i + k] for i in range(0, len(d), k)]
    return ([f"{task}: {TAG} {node} begin"]
            + [f"{task}: {TAG} {node} {i} {x}" for i, x in enumerate(parts)]
            + [f"{task}: {TAG} {node} end {len(parts)}"])


def _facts(driver: str, ecc: int) -> dict[str, Any]:
    return {"schema": 1, "source": "nvml", "versions": {"driver_library": driver},
            "gpu_count": 2, "gpus": [{"index": i, "uuid": f"GPU-{i}",
                                      "ecc_aggregate_uncorrected": ecc} for i in range(2)]}


def test_a_node_cannot_forge_another_nodes_facts() -> None:
    """gpu-07 (task 1) answers for itself, then again as gpu-01 in smaller pieces, overwriting
    every piece gpu-01 sent: gpu-01 keeps its own facts, gpu-07's output is refused."""
    stdout = "\n".join(_doc_lines(1, "gpu-07", _facts("580.95.05", 0))
                       + _doc_lines(0, "gpu-01", _facts("580.95.05", 0))
                       + _doc_lines(1, "gpu-01", _facts("999.1.1", 50000), k=40)) + "\n"
    fx = FakeExec("gpu-01|idle|none\ngpu-07|idle|none\n",
                  (0, stdout, launched("gpu-01", "gpu-07"), False))
    rep = srun_probe("batch", ["gpu-01", "gpu-07"], env={}, run=fx, plain=fx)
    f = rep.results["gpu-01"].value
    assert f is not None and f.versions.driver_library == "580.95.05"
    assert f.gpus[0].ecc_aggregate_uncorrected == 0
    bad = rep.results["gpu-07"]
    assert not bad.ok and bad.value is None
    assert "gpu-07" in (bad.error or "") and "'gpu-01'" in (bad.error or "")


def test_output_of_a_task_srun_did_not_announce_is_ignored() -> None:
    """Without srun's own word on where a task ran (no `launching` line), nothing it printed
    is believed, whatever node name it carries."""
    stdout = "\n".join(_doc_lines(0, "gpu-01", _facts("580.95.05", 0))) + "\n"
    res = parse_srun_output(stdout, "")
    assert res.docs == {} and res.tasks == {}
    assert res.general and "srun did not say which node ran them" in res.general[0]
    twice = launched("gpu-01") + "srun: launching StepId=41.0 on host gpu-02, 1 tasks: 0\n"
    assert parse_srun_output(stdout, twice).docs == {}  # task 0 claimed by two nodes


def test_a_bad_cursor_fails_its_node_alone() -> None:
    """One node's malformed kernel-log cursor (host-supplied, kept in the history) fails that
    node; the rest of the partition is probed, without it in the srun."""
    out = "\n".join(label(0, run_wrapper("gpu-01"))) + "\n"
    fx = FakeExec("gpu-01|idle|none\ngpu-07|idle|none\n", (0, out, launched("gpu-01"), False))
    rep = srun_probe("batch", ["gpu-01", "gpu-07"], env={}, since={"gpu-07": "journal:x y"},
                     run=fx, plain=fx)
    assert rep.results["gpu-01"].ok and rep.results["gpu-01"].value is not None
    assert not rep.results["gpu-07"].ok
    assert "refusing kernel-log cursor 'journal:x y'" in (rep.results["gpu-07"].error or "")
    [srun] = [c for c in fx.calls if c[0] == "srun"]
    assert srun[srun.index("-w") + 1] == "gpu-01"


def test_a_node_flooding_srun_is_cut_off_and_memory_stays_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task 1 prints 32 MiB of labelled lines: the controller keeps at most the task limit of
    it (here 1 MiB), names the task on stderr, and the parser fails that node alone."""
    from fleet.remote import srun_output
    from fleet.remote.srun_probe import run_interruptible

    monkeypatch.setattr(srun_output, "TASK_LIMIT", 1024 * 1024)
    good = "\n".join(label(0, run_wrapper("n1")))
    script = tmp_path / "fake_srun.py"
    script.write_text(
        "import sys\n"
        f"sys.stdout.write({good!r} + '\\n')\n"
        "line = '1: ' + 'x' * 1000 + '\\n'\n"
        "for _ in range(32 * 1024):\n"
        "    sys.stdout.write(line)\n"
        f"sys.stderr.write({launched('n1', 'n2')!r})\n")
    rc, out, err, timed_out = run_interruptible([sys.executable, str(script)], os.environ, 60)
    assert rc == 0 and not timed_out
    assert len(out) < 2 * 1024 * 1024  # 32 MiB sent, about 1 MiB of it kept
    assert "fleet: task 1 sent more than 1 MiB of output; cut off" in err
    res = parse_srun_output(out, err)
    assert set(res.docs) == {"n1"}
    assert res.errors["n2"] == "sent more than 1 MiB of output; cut off"
    forged = parse_srun_output("", "1: fleet: task 0 sent more than 1 MiB of output; cut off\n"
                               + launched("n1", "n2"))
    assert "n1" not in forged.errors  # a task cannot claim another was cut off
