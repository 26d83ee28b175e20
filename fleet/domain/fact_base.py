"""The base of every facts model: a probe's `{"error": ..., "detail": ...}` value becomes None
with its reason in the model's `unreadable` mapping (see `fleet.domain.facts`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

_PLAIN = frozenset({str, int, float, bool, type(None), list})
"""Value types that are never an error mapping (a dict subclass is not among them)."""


def is_error(value: Any) -> bool:
    return isinstance(value, dict) and "error" in value and set(value) <= {"error", "detail"}


class FactsModel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    unreadable: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _lift_errors(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("unreadable", {}), dict) and (
                _PLAIN.issuperset(map(type, data.values()))
                or not any(isinstance(v, dict) and "error" in v for v in data.values())):
            return data  # nothing to lift (most models of a probe): no copy
        data = dict(data)
        reasons: dict[str, str] = dict(data.get("unreadable") or {})
        for key, value in list(data.items()):
            if key != "unreadable" and is_error(value):
                reason = str(value["error"])
                if value.get("detail"):
                    reason += f": {value['detail']}"
                reasons[key] = reason
                data[key] = None
        data["unreadable"] = reasons
        return data


