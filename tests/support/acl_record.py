"""A stand-in for the image's AccessControlEntry record: the same attributes, plain ints and
strings, and no validation, so the authorizer's tests can also feed it codes Kafka never sends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
