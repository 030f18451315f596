"""Kafka's schema primitives for the records of internal topics, written and read by hand.

``__consumer_offsets`` (group/records.py) and ``__transaction_state`` (txn/records.py) store
values laid out like Kafka's generated messages: a version, then int16/int32/int64 fields,
strings with an int16 length (or, in flexible versions, a uvarint length plus one), arrays with
an int32 count (or a uvarint count plus one), and tagged fields. The writer collects the bytes;
the reader raises the caller's error class for anything short, null where it may not be, or
left over, so each topic reports its own decode errors.
"""

from __future__ import annotations

import struct

__all__ = ["SchemaReader", "SchemaWriter", "uvarint"]

UVARINT_BYTES_MAX = 5  # a Kafka unsigned varint holds an int32


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint: seven bits a byte, the low bits first."""
    assert value >= 0, value
    if value < 0x80:  # the common case, on the record encoding path
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class SchemaWriter:
    """The bytes of one record key or value, starting with its int16 version."""

    def __init__(self, version: int) -> None:
        self.parts: list[bytes] = [struct.pack(">h", version)]

    def pack(self, fmt: str, value: int) -> None:
        self.parts.append(struct.pack(fmt, value))

    def int16(self, value: int) -> None:
        self.pack(">h", value)

    def int32(self, value: int) -> None:
        self.pack(">i", value)

    def int64(self, value: int) -> None:
        self.pack(">q", value)

    def uvarint(self, value: int) -> None:
        self.parts.append(uvarint(value))

    def string(self, value: str | None, *, compact: bool = False) -> None:
        """An int16-length string (-1: null), or a compact one (length + 1, 0: null)."""
        if value is None:
            self.uvarint(0) if compact else self.int16(-1)
            return
        data = value.encode("utf-8")
        assert len(data) <= 0x7FFF, "string longer than int16 length allows"
        self.uvarint(len(data) + 1) if compact else self.int16(len(data))
        self.parts.append(data)

    def bytes_(self, value: bytes) -> None:
        self.int32(len(value))
        self.parts.append(value)

    def count(self, size: int | None, *, compact: bool) -> None:
        """An array's element count (None: a null array)."""
        if compact:
            self.uvarint(0 if size is None else size + 1)
        else:
            self.int32(-1 if size is None else size)

    def done(self) -> bytes:
        return b"".join(self.parts)


class SchemaReader:
    """Reads the primitives in order; ``error`` is raised for malformed input."""

    def __init__(self, data: bytes, error: type[ValueError]) -> None:
        self.data = data
        self.position = 0
        self.error = error

    def take(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise self.error(f"truncated record at byte {self.position}")
        chunk = self.data[self.position : self.position + size]
        self.position += size
        return chunk

    def unpack(self, fmt: str) -> int:
        return int(struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0])

    def int16(self) -> int:
        return self.unpack(">h")

    def int32(self) -> int:
        return self.unpack(">i")

    def int64(self) -> int:
        return self.unpack(">q")

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 7 * UVARINT_BYTES_MAX, 7):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise self.error(f"varint longer than {UVARINT_BYTES_MAX} bytes")

    def nullable_string(self, *, compact: bool = False) -> str | None:
        size = self.uvarint() - 1 if compact else self.int16()
        if size == -1:
            return None
        return self.take(size).decode("utf-8")

    def string(self, *, compact: bool = False) -> str:
        value = self.nullable_string(compact=compact)
        if value is None:
            raise self.error("null in a non-nullable string")
        return value

    def bytes_(self) -> bytes:
        size = self.int32()
        return b"" if size == -1 else self.take(size)

    def count(self, limit: int, *, compact: bool) -> int | None:
        """An array's element count, None for a null array; at most ``limit``."""
        size = self.uvarint() - 1 if compact else self.int32()
        if size == -1:
            return None
        if not 0 <= size <= limit:
            raise self.error(f"array of {size} elements")
        return size

    def done(self) -> None:
        if self.position != len(self.data):
            raise self.error(f"{len(self.data) - self.position} trailing bytes")
