"""Which data keys hold secrets, and their values masked for messages.

An inventory carries SSH passwords, key passphrases and tokens beside names and pools; an error
about that data (a host listed twice with different data) must say which key differs, never the
value of a secret one, on stderr or in a JSON error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MASK = "***"

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|pwd|token|secret|credential|private_?key|api_?key"
    r"|key_?(data|material)|(^|_)key$|cookie",
    re.IGNORECASE,
)
"""Key names whose values are secret: `ssh_password`, `ssh_key_password`, `vault_token`,
`api_key`, `private_key`, `ssh_key` (a path, but some connectors take the key itself)."""


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key))


def masked(value: Any) -> Any:
    """`value` with the value of every secret-looking key replaced by MASK, at any depth."""
    if isinstance(value, Mapping):
        return {k: MASK if is_secret_key(k) else masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(masked(v) for v in value)
    return value


def shown(key: str, value: Any) -> str:
    """How a data value appears in a message: its repr, or MASK for a secret key."""
    return MASK if is_secret_key(key) else repr(masked(value))


def secret_values(data: Mapping[str, Any]) -> Iterator[str]:
    """The text of every secret-looking key's value in `data`, at any depth."""
    for k, v in data.items():
        if isinstance(v, Mapping):
            yield from secret_values(v)
        elif is_secret_key(k) and v not in (None, "") and not isinstance(v, bool):
            yield str(v)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of a secret value replaced by MASK (longest first, so a
    secret that contains another is masked whole)."""
    for s in sorted(set(secrets), key=len, reverse=True):
        if len(s) >= 3:  # a one- or two-character "secret" would mask half the message
            text = text.replace(s, MASK)
    return text
