"""The one error table: every member is Kafka's code under Kafka's name, as kio's schema has it."""

from __future__ import annotations

import enum
import logging

import pytest
from kio.schema.errors import ErrorCode

from pylog_nb.broker import errors
from pylog_nb.broker.errors import Errors, KafkaError, error_code_of, error_name
from pylog_nb.broker.records.header import InvalidRecordError

KIO = {code.name.upper(): code.value for code in ErrorCode}


@pytest.mark.parametrize("member", list(Errors), ids=lambda member: member.name)
def test_every_member_is_kafkas_code_under_kafkas_name(member: Errors) -> None:
    assert member.name in KIO, f"{member.name} is not a Kafka error name"
    assert member.value == KIO[member.name]


def test_names_and_values_are_unique() -> None:
    enum.unique(Errors)  # raises ValueError if two names share a value (an alias)
    assert len(Errors.__members__) == len(list(Errors))


def test_the_table_is_kafkas_whole_table() -> None:
    assert {member.name: member.value for member in Errors} == KIO


def test_module_aliases_are_members() -> None:
    aliases = {name: value for name, value in vars(errors).items() if name.isupper()}
    assert aliases, "the broker's aliases (errors.NONE, ...) are gone"
    for name, value in aliases.items():
        assert value is Errors[name]


def test_error_code_of() -> None:
    class Fenced(KafkaError):
        error_code = Errors.FENCED_LEADER_EPOCH

    assert error_code_of(Fenced("x")) == 74
    assert error_code_of(InvalidRecordError("crc")) == Errors.CORRUPT_MESSAGE


def test_unexpected_errors_are_unknown_server_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="pylog.broker"):
        assert error_code_of(RuntimeError("boom")) == Errors.UNKNOWN_SERVER_ERROR == -1
    assert "boom" in caplog.text


def test_error_name() -> None:
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(30_000) == "30000"


def test_the_module_is_a_leaf() -> None:
    source = errors.__file__
    with open(source, encoding="utf-8") as file:
        imports = [line for line in file if line.startswith(("import ", "from "))]
    assert all("pylog_nb" not in line and "kio" not in line and " ." not in line
               for line in imports), imports
