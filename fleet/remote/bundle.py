"""Collect a support bundle from one host over SSH: one POSIX shell script, the same command
lines docs/diagnose.md gives for collecting by hand, its output split back into the bundle's
files.

The script prints each capture after a marker line carrying a random nonce and, after it, the
command's exit status; a GPU capture whose command failed is dropped (its questions then say
they could not judge), except `nvidia-smi -q -x`, whose failure text is itself evidence.
"""

from __future__ import annotations

import re
import secrets
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.domain.diagnose.bundle import BUNDLE_FILES
from fleet.errors import BadInput, CouldNotComplete
from fleet.remote.inline import PROBE_SOURCE, inline_python_command

if TYPE_CHECKING:
    from fleet.remote.ssh_exec import SshTarget

METRICS_KEY = "serving_metrics_url"
"""Host (or pool group) data naming the serving layer's Prometheus endpoint."""
# no shell metacharacters at all ($, quotes, parentheses, ;), though the URL is quoted anyway
_URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#@!&*+,=%-]{1,400}$")
_KEEP_FAILED = {"nvidia-smi-q.xml", "metrics-url"}


def collect_script(seconds: int, nonce: str, metrics_url: str | None = None) -> str:
    """The shell script (POSIX sh; nvidia-smi, dmesg or journalctl, ps, df and python3 for
    the boot facts on the host)."""
    n = int(seconds)
    m = f"=====fleet-bundle-{nonce}"
    lines = [
        "export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f'sec() {{ echo "{m} $1"; }}',
        f'rc() {{ echo "{m}-rc $1"; }}',
        't=$(mktemp -d) || exit 70',
        "trap 'rm -rf \"$t\"' EXIT",
        "sec nvidia-smi-q.xml; nvidia-smi -q -x 2>&1; rc $?",
        "sec topo.txt; nvidia-smi topo -m 2>&1; rc $?",
        # the probe's order (fleet.probe.hostprobe.read_kernel_log): the journal of this boot,
        # else the syslog file, else the ring buffer
        "sec kernel.log; { journalctl -k -b --no-pager 2>/dev/null || cat /var/log/kern.log "
        "2>/dev/null || dmesg 2>/dev/null; } | tail -n 20000; rc $?",
        "sec meminfo; cat /proc/meminfo; rc $?",
        "cat /proc/stat > \"$t/stat\"",
        f"{{ nvidia-smi dmon -s pucm -c {n} > \"$t/dmon\" 2>&1; echo $? > \"$t/dmon.rc\"; }} &",
        f"{{ nvidia-smi pmon -s um -c {n} > \"$t/pmon\" 2>&1; echo $? > \"$t/pmon.rc\"; }} &",
        f"sleep {n}",
        "wait",
        "cat /proc/stat >> \"$t/stat\"",
        'sec dmon.txt; cat "$t/dmon"; rc "$(cat "$t/dmon.rc")"',
        'sec pmon.txt; cat "$t/pmon"; rc "$(cat "$t/pmon.rc")"',
        'sec stat; cat "$t/stat"; rc $?',
        "sec loadavg; cat /proc/loadavg; rc $?",
        "sec df.txt; df -P; rc $?",
        "sec ps.txt; ps -eo pid,psr,pcpu,rss,args; rc $?",
        # the pre-reboot gate's facts as the probe reads them (fleet.probe.hostprobe, shipped
        # inline): running and next-boot kernel, the nvidia module per kernel, Secure Boot
        f"sec boot.json; {inline_python_command(PROBE_SOURCE, ['--boot-only'])} 2>&1; rc $?",
    ]
    if metrics_url:
        q = shlex.quote(metrics_url)
        lines += [
            f"sec metrics-url; echo {q}; rc 0",
            f"sec metrics.txt; (curl -fsS -m 5 {q} 2>/dev/null || wget -qO- -T 5 {q} "
            f"2>/dev/null || python3 -c 'import sys,urllib.request as u; sys.stdout.write("
            f"u.urlopen(sys.argv[1], timeout=5).read().decode())' {q}); rc $?",
        ]
    return "\n".join(lines) + "\n"


def split_output(stdout: str, nonce: str) -> dict[str, str]:
    """The script's output -> bundle files (name -> text), the failed ones dropped."""
    m = f"=====fleet-bundle-{nonce}"
    files: dict[str, str] = {}
    name: str | None = None
    buf: list[str] = []
    for line in stdout.splitlines(keepends=True):
        if line.startswith(m + "-rc "):
            rc = line[len(m) + 4:].strip()
            if name in BUNDLE_FILES and (rc == "0" or name in _KEEP_FAILED):
                text = "".join(buf)
                if text.strip():
                    files[name] = text
            name, buf = None, []
        elif line.startswith(m + " "):
            name, buf = line[len(m) + 1:].strip(), []
        elif name is not None:
            buf.append(line)
    return files


def _target(inventory: Path | str, host: str) -> tuple[SshTarget, str | None]:
    from fleet.remote.session import load_inventory
    from fleet.remote.ssh_exec import SshTarget

    hosts = [h for h in load_inventory(inventory) if h.name == host]
    if not hosts:
        raise BadInput.single(f"no host {host!r} in the inventory", file=str(inventory),
                              field="HOST")
    data = hosts[0].data.dict()
    url = data.get(METRICS_KEY)
    if url is not None and not (isinstance(url, str) and _URL.match(url)):
        raise BadInput.single(f"{url!r} is not an http(s) URL", file=str(inventory),
                              field=f"{host}.{METRICS_KEY}")
    return SshTarget.from_host_data(host, data), url


def collect_host(inventory: Path | str, host: str, seconds: int = 10) -> dict[str, str]:
    """Run the collection script on `host` (over the project's fabric seam, strict host keys,
    at most BUNDLE_LIMIT bytes of output); CouldNotComplete when the host cannot be reached,
    the script cannot run or the host sends more than that."""
    from fleet.remote.bounded import BUNDLE_LIMIT
    from fleet.remote.ssh_exec import run_everywhere

    target, url = _target(inventory, host)
    nonce = secrets.token_hex(8)
    script = collect_script(seconds, nonce, url)
    result = run_everywhere([target], "sh -s <<'FLEET_BUNDLE_EOF'\n" + script +
                            "FLEET_BUNDLE_EOF\n", timeout=seconds + 90, limit=BUNDLE_LIMIT)[0]
    if result.exit_code is None:
        raise CouldNotComplete(f"{host}: {result.error}")
    files = split_output(result.stdout, nonce)
    if not files:
        raise CouldNotComplete(f"{host}: the collection script printed nothing (exit "
                               f"{result.exit_code}): {result.stderr.strip()[:300]}")
    return files


