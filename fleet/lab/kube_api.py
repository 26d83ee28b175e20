"""A minimal client of the lab's own Kubernetes API server (HTTPS on loopback, a static token).

The lab's machinery (the kubelet stand-in, `fleet lab pod`, node creation) talks to the API
server directly rather than through kubectl: no kubectl version skew, no discovery cache in
~/.kube, and one request per object. Only for the lab's server: the serving certificate is the
API server's own self-signed one on 127.0.0.1, so it is not verified (the kubeconfig the lab
writes says `insecure-skip-tls-verify` for the same reason). fleet itself uses kubectl
(`fleet.schedulers.kubernetes`).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class KubeApiError(Exception):
    """An answer other than 2xx (or no answer): the status and the server's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class KubeApi:
    """Requests to `server` (https://127.0.0.1:PORT) with a bearer token."""

    def __init__(self, server: str, token: str, timeout: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE  # loopback, the server's own self-signed cert

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._tls) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                message = str(json.loads(text).get("message") or text)
            except (ValueError, AttributeError):
                message = text
            raise KubeApiError(exc.code, message.strip()[:500]) from None
        except (OSError, TimeoutError) as exc:
            raise KubeApiError(0, f"no answer from {self.server}: {exc}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE) -> Any:
        return self.request("PATCH", path, body, content_type)

    def delete(self, path: str, body: Any = None) -> Any:
        return self.request("DELETE", path, body)

    def ready(self) -> bool:
        """/readyz answers ok: etcd reached, the bootstrap controllers done."""
        try:
            return bool(self.request("GET", "/readyz") == "ok")
        except KubeApiError:
            return False
