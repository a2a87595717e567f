"""Reads and writes safetensors files with the standard library (struct + json), enough for
rl_loop.py's toy trainer to edit a checkpoint: F32 and BF16 tensors convert to and from
floats; every other dtype stays raw bytes.

    tensors, metadata = read("model.safetensors")     # {name: Tensor}, file order kept
    w = to_floats(tensors["head.weight"])              # array('f')
    tensors["head.weight"] = from_floats(w, "BF16", tensors["head.weight"].shape)
    write("out/model.safetensors", tensors, metadata)
"""
import json
import struct
import sys
from array import array
from dataclasses import dataclass


@dataclass
class Tensor:
    dtype: str
    """safetensors' name: "F32", "BF16", "I64", ..."""
    shape: list
    data: bytes
    """Little-endian, row-major."""


def read(path):
    """({name: Tensor} in file order, the header's __metadata__ or None)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        tensors[name] = Tensor(entry["dtype"], entry["shape"], data[begin:end])
    return tensors, metadata


def write(path, tensors, metadata=None):
    """One safetensors file of tensors, in the dict's order, without gaps between them."""
    header = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, t in tensors.items():
        header[name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + len(t.data)]}
        offset += len(t.data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format asks for tensor data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for t in tensors.values():
            f.write(t.data)


def to_floats(t):
    """An F32 or BF16 tensor's values as array('f')."""
    if t.dtype == "F32":
        values = _little_endian(array("f", t.data))
    elif t.dtype == "BF16":
        halves = _little_endian(array("H", t.data))
        values = array("f", array("I", (h << 16 for h in halves)).tobytes())  # BF16 is the top of an F32
    else:
        raise ValueError(f"to_floats: {t.dtype} is not F32 or BF16")
    return values


def from_floats(values, dtype, shape):
    """A Tensor of dtype F32 or BF16 (rounded to nearest even, as PyTorch does) from floats."""
    words = array("f", values)
    if dtype == "F32":
        return Tensor(dtype, list(shape), _little_endian(words).tobytes())
    if dtype != "BF16":
        raise ValueError(f"from_floats: {dtype} is not F32 or BF16")
    bits = array("I", words.tobytes())
    halves = array("H", (_bf16_round(u) for u in bits))
    return Tensor(dtype, list(shape), _little_endian(halves).tobytes())


def _bf16_round(u):
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40  # NaN stays a (quiet) NaN; rounding could carry it into infinity
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def _little_endian(a):
    """array a, converted in place between native and little-endian byte order."""
    if sys.byteorder == "big":
        a.byteswap()
    return a
