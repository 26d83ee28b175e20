"""The replay endpoint: the one grammar the matrix, `bench run --endpoint` and the remote
arguments share, which is what the replay client on the host can use (pure).

The client (fleet/bench/replay.py, shipped whole to hosts, so it cannot import this) speaks
plain HTTP/1.1 over a socket: `http://HOST[:PORT][/PREFIX]`, no TLS, no user info, no query. A
matrix that names `https://...` passed `fleet matrix check` and failed only in the middle of a
rollout, at the replay gate (issue 28); now it is refused where it is written.
"""

from __future__ import annotations

import re

ENDPOINT_RE = re.compile(
    r"http://(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])"
    r"(?::(?P<port>[0-9]{1,5}))?(?P<path>/[A-Za-z0-9._~/-]*)?")
EXAMPLE = "http://127.0.0.1:8000/infer"


def endpoint_problem(value: object) -> str | None:
    """Why the replay client cannot send to `value`, or None when it can."""
    if not isinstance(value, str):
        return f"expected an http:// URL such as {EXAMPLE!r}, got {type(value).__name__}"
    scheme = value.split("://", 1)[0].lower() if "://" in value else ""
    if scheme and scheme != "http":
        return (f"the replay client speaks plain HTTP only, not {scheme}:// (got {value!r}): "
                f"give the service's plain-HTTP address on the host, such as {EXAMPLE!r}")
    match = ENDPOINT_RE.fullmatch(value)
    if match is None:
        return (f"expected http://HOST[:PORT][/PATH] (a host name, IPv4 or [IPv6] address; a "
                f"path of letters, digits and ._~/-; no user, query or fragment), such as "
                f"{EXAMPLE!r}; got {value!r}")
    port = match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        return f"port {port} is out of range (1 to 65535) in {value!r}"
    return None
