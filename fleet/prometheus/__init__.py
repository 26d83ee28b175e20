"""The Prometheus source: where the server is, and queries over its HTTP API (adapter)."""

from fleet.prometheus.client import PrometheusSource
from fleet.prometheus.config import Credentials, Target, credentials, resolve, shown_url

__all__ = ["Credentials", "PrometheusSource", "Target", "credentials", "resolve", "shown_url"]
