"""Where the Prometheus server is and how to authenticate to it.

The URL comes from `--prometheus URL`, else `FLEET_PROMETHEUS_URL`, else the inventory's
`prometheus_url` host data (every host that sets it must agree), in that order. Credentials come
only from the environment or files named there, never from a flag (a flag shows in `ps`):

    FLEET_PROMETHEUS_TOKEN / FLEET_PROMETHEUS_TOKEN_FILE         bearer token
    FLEET_PROMETHEUS_USER + FLEET_PROMETHEUS_PASSWORD[_FILE]     basic auth

A credential is never printed: `Credentials` shows only its kind, and a URL with a user and
password in it is shown without them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleet.errors import BadInput

URL_ENV = "FLEET_PROMETHEUS_URL"
TOKEN_ENV = "FLEET_PROMETHEUS_TOKEN"
USER_ENV = "FLEET_PROMETHEUS_USER"
PASSWORD_ENV = "FLEET_PROMETHEUS_PASSWORD"
DATA_KEY = "prometheus_url"
MAX_SECRET_BYTES = 16384

_URL_RE = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


@dataclass(frozen=True)
class Credentials:
    """A bearer token or a user and password; `repr` and `str` show neither."""

    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "bearer" if self.token else ("basic" if self.user else "none")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def basic(self) -> tuple[str, str] | None:
        return (self.user, self.password or "") if self.user and not self.token else None

    def secrets(self) -> list[str]:
        return [s for s in (self.token, self.password) if s]


@dataclass(frozen=True)
class Target:
    url: str
    source: str  # "--prometheus", "FLEET_PROMETHEUS_URL" or "inventory data prometheus_url"
    credentials: Credentials = Credentials()

    @property
    def shown_url(self) -> str:
        return shown_url(self.url)


def shown_url(url: str) -> str:
    """The URL without any user:password@ part."""
    return re.sub(r"^(https?://)[^/@]*@", r"\1", url)


def check_url(url: str, where: str) -> str:
    url = url.strip()
    if shown_url(url) != url:
        raise BadInput(f"{where}: a user or password in the URL would be shown and recorded: "
                       f"give {shown_url(url)!r} and set {USER_ENV} and {PASSWORD_ENV}[_FILE]")
    if not _URL_RE.match(url):
        raise BadInput(f"{where}: {shown_url(url)!r} is not an http(s) URL of a Prometheus "
                       "server (e.g. http://prometheus:9090)")
    return url.rstrip("/")


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """`name` from the environment, else the file `name_FILE` names (stripped)."""
    value = env.get(name)
    if value:
        return value.strip()
    path = env.get(f"{name}_FILE")
    if not path:
        return None
    try:
        data = Path(path).read_bytes()[: MAX_SECRET_BYTES + 1]
    except OSError as exc:
        raise BadInput(f"{name}_FILE: cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise BadInput(f"{name}_FILE: {path} is over {MAX_SECRET_BYTES} bytes: not a secret")
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise BadInput(f"{name}_FILE: {path} is empty")
    return text


def credentials(env: Mapping[str, str] | None = None) -> Credentials:
    env = os.environ if env is None else env
    token = _secret(env, TOKEN_ENV)
    user = env.get(USER_ENV) or None
    password = _secret(env, PASSWORD_ENV)
    if token and user:
        raise BadInput(f"{TOKEN_ENV} and {USER_ENV} are both set: give a bearer token or a "
                       "user and password, not both")
    if password and not user:
        raise BadInput(f"{PASSWORD_ENV} is set without {USER_ENV}")
    return Credentials(token=token, user=user, password=password)


def resolve(flag: str | None, data: Iterable[Mapping[str, object]],
            env: Mapping[str, str] | None = None) -> Target | None:
    """The Prometheus server to ask, or None when none is configured anywhere."""
    env = os.environ if env is None else env
    creds = credentials(env)
    if flag:
        return Target(check_url(flag, "--prometheus"), "--prometheus", creds)
    if env.get(URL_ENV):
        return Target(check_url(env[URL_ENV], URL_ENV), URL_ENV, creds)
    urls = {str(d[DATA_KEY]) for d in data if d.get(DATA_KEY)}
    if len(urls) > 1:
        raise BadInput(f"inventory data {DATA_KEY}: the hosts name {len(urls)} different "
                       f"servers ({', '.join(sorted(shown_url(u) for u in urls))}): give one")
    if urls:
        where = f"inventory data {DATA_KEY}"
        return Target(check_url(urls.pop(), where), where, creds)
    return None
