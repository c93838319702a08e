"""The base of a v2 request body: closed (an unknown field is refused) and, as RunPod's
schemas say, an optional field may be left out but not sent as `null` unless its schema
allows null (`NULLABLE`). `problems.validated` turns either refusal into a 422 naming it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class ClosedBody(BaseModel):
    """A v2 request body: RunPod's field names, nothing else, no `null` where RunPod has
    none (`T | None = None` here means "may be left out")."""

    model_config = ConfigDict(extra="forbid")
    NULLABLE: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.field_name not in cls.NULLABLE:
            raise ValueError("may not be null (leave the field out instead)")
        return value
