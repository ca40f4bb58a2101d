"""Pickles the refresh cache reads back, never trusted: :func:`checked_pickle` refuses one that would
allocate past its size before it is unpickled, and the unpicklers build nothing but the cache's own classes
(:class:`ClassUnpickler`) or no class at all (:class:`PlainUnpickler`).

A record (:func:`framed`) keeps its large arrays out of band: the pickle refers to them, and they follow it as
raw bytes, so a reader makes each array straight from the bytes it read (one copy, not a bytes object first
and the array from that: a look reads every file's entry, 70 MB at 1 M spans).

Example::

    record = framed(entry)
    entry = unpickled(ClassUnpickler, record)
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
from array import array
from typing import Any

__all__ = ["ClassUnpickler", "PlainUnpickler", "array_from_buffer", "checked_pickle", "framed", "unpickled"]

#: an array of at least this many bytes goes out of band in a :func:`framed` record
OUT_OF_BAND = 512
_TYPECODES = frozenset("bBhHiIlLqQfd")


def array_from_buffer(typecode: str, buffer: Any) -> array:
    """An array of ``typecode`` made from an out-of-band buffer's bytes (a :func:`framed` record's)."""
    if type(typecode) is not str or typecode not in _TYPECODES:
        raise pickle.UnpicklingError(f"{typecode!r} is not an array type the cache writes")
    out = array(typecode)
    out.frombytes(buffer)
    return out


class _Pickler(pickle.Pickler):
    """Pickles a large array as :func:`array_from_buffer` of a buffer handed to the callback (out of band)."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is array and len(obj) * obj.itemsize >= OUT_OF_BAND:
            return array_from_buffer, (obj.typecode, pickle.PickleBuffer(obj))
        return NotImplemented


def framed(value: Any) -> bytes:
    """``value`` as a record: the pickle's length, how many buffers follow it and each one's length (8 bytes
    each, little-endian), the pickle (protocol 5), then the buffers: its large arrays' bytes."""
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(value)
    body = stream.getvalue()
    raws = [buffer.raw() for buffer in buffers]
    head = struct.pack(f"<{2 + len(raws)}Q", len(body), len(raws), *(raw.nbytes for raw in raws))
    return b"".join([head, body, *raws])


_ALLOWED = {
    ("lens_rl.offline.run.cache_files", "Entry"),
    ("lens_rl.offline.run.cache_files", "Delta"),
    ("lens_rl.offline.read.parts", "ProcessPart"),
    ("lens_rl.offline.read.parts", "PhasePart"),
    ("lens_rl.offline.read.steps", "Series"),
    ("lens_rl.offline.read.steps", "StepPart"),
    ("lens_rl.offline.read.parts", "RequestsPart"),
    ("lens_rl.offline.read.critical", "CritPart"),
    ("lens_rl.offline.read.pipe", "PipePart"),
    ("lens_rl.store.format", "Process"),
    ("lens_rl.store.reader", "ReadStats"),
    ("lens_rl.offline.run.safe_pickle", "array_from_buffer"),
    ("array", "array"),
    ("array", "_array_reconstructor"),
    ("copyreg", "_reconstructor"),
    ("copyreg", "__newobj__"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "object"),
}


class ClassUnpickler(pickle.Unpickler):
    """Builds nothing but the cache's own classes (a planted file cannot run code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a cache class")
        return super().find_class(module, name)


class PlainUnpickler(pickle.Unpickler):
    """Builds plain values only (lists, dicts, strings, numbers, None): no class at all."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: the critical path's cache file holds plain values only")


# What follows each opcode: a fixed number of bytes (>= 0), or how its length is given (pickletools' codes:
# -1 up to a newline, -2/-3/-4/-5 a length of 1, 4 (signed), 4 or 8 bytes before the data); -9: an opcode
# a cache file never holds and a reader never needs (unknown, the extension registry, persistent ids); -8:
# one whose argument is checked (a memo index, a frame's length). An out-of-band buffer is one the reader gave
# (a slice of what it read): none allocates.
_ARG_SIZE = [-9] * 256
for _op in pickletools.opcodes:
    _ARG_SIZE[ord(_op.code.encode("latin-1"))] = _op.arg.n if _op.arg is not None else 0
for _refused in b"\x82\x83\x84PQ":
    _ARG_SIZE[_refused] = -9
_PUT_WIDTH = {ord("q"): 1, ord("r"): 4, ord("\x95"): 8}  # BINPUT, LONG_BINPUT: a memo index; FRAME: a length
for _checked in _PUT_WIDTH:
    _ARG_SIZE[_checked] = -8
_TWO_LINES = {ord("c"), ord("i")}  # GLOBAL and INST: module and name, a line each
_TEXT_PUT = ord("p")
_FRAME = ord("\x95")
_STOP = ord(".")
_COUNT_WIDTH = {-2: 1, -3: 4, -4: 4, -5: 8}


def checked_pickle(data: bytes, start: int = 0, stop: int | None = None) -> bytes:
    """``data`` if unpickling ``data[start:stop]`` allocates no more than a small multiple of its size and
    ends inside it; else :class:`pickle.UnpicklingError`. Every length an opcode gives must fit in the bytes
    left (an unpickler allocates a counted string or frame before reading it), every memo index lie within the
    data's size (the memo grows to the largest index), the last opcode be STOP, and no opcode of the extension
    registry or persistent ids may appear. What builds objects by an argument is stopped
    by the unpicklers' class lists."""
    end = len(data) if stop is None else stop
    i, sizes, op = start, _ARG_SIZE, -1
    while i < end:
        op = data[i]
        n = sizes[op]
        i += 1
        if n >= 0:
            i += n
            continue
        if n == -8:
            width = _PUT_WIDTH[op]
            value = int.from_bytes(data[i : i + width], "little")
            i += width
            if value > end - (i if op == _FRAME else start):
                raise pickle.UnpicklingError("a memo index or frame past the data")
        elif n == -1:
            for _ in range(2 if op in _TWO_LINES else 1):
                newline = data.find(b"\n", i, end)
                if newline == -1:
                    raise pickle.UnpicklingError("a text argument with no end")
                if op == _TEXT_PUT and not (data[i:newline].isdigit() and int(data[i:newline]) <= end - start):
                    raise pickle.UnpicklingError("a memo index past the data")
                i = newline + 1
        elif n == -9:
            raise pickle.UnpicklingError(f"opcode {op:#x} is not read from a cache file")
        else:
            width = _COUNT_WIDTH[n]
            length = int.from_bytes(data[i : i + width], "little", signed=n == -3)
            i += width
            if not 0 <= length <= end - i:
                raise pickle.UnpicklingError("a length past the data")
            i += length
    if i != end or op != _STOP:
        raise pickle.UnpicklingError("truncated")
    return data


def unpickled(unpickler: type[pickle.Unpickler], data: bytes, start: int = 0, stop: int | None = None) -> Any:
    """The :func:`framed` record ``data[start:stop]`` unpickled by ``unpickler`` from memory (its pickle and
    buffers not copied out of ``data``), once its lengths add up and :func:`checked_pickle` passed it."""
    stop = len(data) if stop is None else stop
    if stop - start < 16:
        raise pickle.UnpicklingError("a record shorter than its lengths")
    size, count = struct.unpack_from("<QQ", data, start)
    if count > (stop - start - 16) // 8:
        raise pickle.UnpicklingError("more buffers than a record holds")
    lengths = struct.unpack_from(f"<{count}Q", data, start + 16)
    at = start + 16 + 8 * count
    if at + size + sum(lengths) != stop:
        raise pickle.UnpicklingError("a record whose lengths do not add up")
    checked_pickle(data, at, at + size)
    view, buffers, offset = memoryview(data), [], at + size
    for length in lengths:
        buffers.append(view[offset : offset + length])
        offset += length
    stream = io.BytesIO(data)
    stream.seek(at)
    return unpickler(stream, buffers=buffers).load()
