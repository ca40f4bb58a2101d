"""The refresh cache's encoding: MessagePack of msgspec ``Struct``s (:class:`Rec`, one declared schema per kind
of record: :mod:`~lens_rl.offline.run.part_schema`, :mod:`~lens_rl.offline.run.records`), arrays as raw
little-endian buffers.

Arrays are MessagePack ``bin``: a reader decodes them as views into the bytes it read and makes each array from
its view (no object per item). Decoding validates as it goes: a record of another shape or version, cut short,
or claiming more than its bytes hold is a :class:`msgspec.DecodeError` (msgspec checks every length against the
bytes left before allocating); a buffer cut mid-item is a ``ValueError``. Nothing read can run code.

Example::

    assert list(array_of("q", decode(encode(raw(array("q", [1]), "q")), bytes))) == [1]
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

import msgspec

__all__ = [
    "UNENCODABLE",
    "VERSION",
    "Column",
    "Id",
    "Num",
    "Raw",
    "Rec",
    "Scalar",
    "array_of",
    "decode",
    "encode",
    "items_of",
    "raw",
]

#: the records' schema version (a record of another is refused by its tag: the file is read cold)
VERSION = 3  # (2: an entry's and a delta's file state one StateRec; 3: a phase's tokens and durations per step)

#: what encoding a value the schema cannot hold raises (an int past 64 bits, a type it has no form for): such a
#: value is kept nowhere, and the next look reads cold
UNENCODABLE = (OverflowError, TypeError, ValueError)

#: a step, a phase or bucket name, an attribute's value: a JSON scalar
Scalar = int | float | str | bool | None
#: a span id (a lens_rl id is 16 hex digits, kept as the int they spell where the column is an int array)
Id = str | int
Num = int | float
#: an array's items, raw little-endian (a view into the bytes read)
Raw = memoryview
#: an array's items (raw), else its values as they are (ids or steps that are not all 64-bit ints)
Column = memoryview | list[Scalar]

_SWAP = sys.byteorder != "little"


def raw(values: array, typecode: str) -> Any:
    """``values`` (an array of ``typecode``) as raw little-endian bytes to encode."""
    if values.typecode != typecode:
        raise TypeError(f"an array of {values.typecode!r} where the schema says {typecode!r}")
    if _SWAP:  # pragma: no cover - a big-endian host
        values = array(typecode, values)
        values.byteswap()
    return memoryview(values)


def array_of(typecode: str, buffer: memoryview) -> array:
    """The array of ``typecode`` whose raw little-endian items ``buffer`` holds (ValueError: cut mid-item)."""
    out = array(typecode)
    if len(buffer) % out.itemsize:
        raise ValueError("an array cut mid-item")
    out.frombytes(buffer)
    if _SWAP:  # pragma: no cover - a big-endian host
        out.byteswap()
    return out


def items_of(typecode: str, buffer: memoryview) -> memoryview | array[Any]:
    """The raw little-endian items ``buffer`` holds, read in place (no copy) where they are only read (iterated,
    indexed, ``tolist``): a view of the bytes read, not an :func:`array_of` to grow (ValueError: cut mid-item)."""
    if _SWAP:  # pragma: no cover - a big-endian host: the items swapped, in an array
        return array_of(typecode, buffer)
    if len(buffer) % _ITEMSIZE[typecode]:
        raise ValueError("an array cut mid-item")
    return buffer.cast("B").cast(typecode)  # type: ignore[call-overload]  # (a typecode given at run time)


_ITEMSIZE = {code: array(code).itemsize for code in "bBhHiIlLqQfd"}


class Rec(msgspec.Struct, array_like=True, gc=False, forbid_unknown_fields=True):
    """A record's fields in order (a MessagePack array), no cycle among them."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODERS: dict[Any, msgspec.msgpack.Decoder[Any]] = {}


def encode(record: Any) -> bytes:
    """``record`` as MessagePack (TypeError / OverflowError / msgspec.EncodeError: a value the schema cannot
    hold, e.g. an int past 64 bits: the caller keeps nothing)."""
    return _ENCODER.encode(record)


def decode(data: Any, kind: Any) -> Any:
    """The record of ``kind`` (a schema, or a Union of them) ``data`` holds (msgspec.DecodeError: it does not
    hold one: another shape or version, cut short, or lengths past its bytes)."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    return decoder.decode(data)
