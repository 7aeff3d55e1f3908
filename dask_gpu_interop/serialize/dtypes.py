"""The element types our serializers send, as plain data: no framework is imported here.

A header names its dtype; the receiver looks the name up here, never on a framework module,
so a tampered name can only be rejected, not resolve to some other attribute. The item size
lets a header be checked against its frames before any framework is touched. Names follow
PyTorch and JAX (ml_dtypes), which agree where both have a type.

Data move as bytes, so types with no NumPy equivalent (bfloat16, the float8 kinds,
complex32) travel like any other: only the receiver reinterprets them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    #: NumPy/``__cuda_array_interface__`` typestr, or None where NumPy has no such type.
    typestr: str | None
    #: DLPack (code, bits, lanes), or None where DLPack has no code for it.
    dlpack: tuple[int, int, int] | None


# DLPack type codes (dlpack.h, DLDataTypeCode).
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_F8_E3M4, _F8_E4M3, _F8_E4M3B11FNUZ, _F8_E4M3FN, _F8_E4M3FNUZ = 7, 8, 9, 10, 11
_F8_E5M2, _F8_E5M2FNUZ, _F8_E8M0FNU = 12, 13, 14


def _table(*rows: DType) -> dict[str, DType]:
    return {row.name: row for row in rows}


#: Types both PyTorch and JAX may hold (JAX lacks the unsigned ones on some backends).
COMMON = _table(
    DType("bool", 1, "|b1", (_BOOL, 8, 1)),
    DType("uint8", 1, "|u1", (_UINT, 8, 1)),
    DType("int8", 1, "|i1", (_INT, 8, 1)),
    DType("int16", 2, "<i2", (_INT, 16, 1)),
    DType("uint16", 2, "<u2", (_UINT, 16, 1)),
    DType("int32", 4, "<i4", (_INT, 32, 1)),
    DType("uint32", 4, "<u4", (_UINT, 32, 1)),
    DType("int64", 8, "<i8", (_INT, 64, 1)),
    DType("uint64", 8, "<u8", (_UINT, 64, 1)),
    DType("float16", 2, "<f2", (_FLOAT, 16, 1)),
    DType("bfloat16", 2, None, (_BFLOAT, 16, 1)),
    DType("float32", 4, "<f4", (_FLOAT, 32, 1)),
    DType("float64", 8, "<f8", (_FLOAT, 64, 1)),
    DType("complex64", 8, "<c8", (_COMPLEX, 64, 1)),
    DType("complex128", 16, "<c16", (_COMPLEX, 128, 1)),
    DType("float8_e4m3fn", 1, None, (_F8_E4M3FN, 8, 1)),
    DType("float8_e4m3fnuz", 1, None, (_F8_E4M3FNUZ, 8, 1)),
    DType("float8_e5m2", 1, None, (_F8_E5M2, 8, 1)),
    DType("float8_e5m2fnuz", 1, None, (_F8_E5M2FNUZ, 8, 1)),
    DType("float8_e8m0fnu", 1, None, (_F8_E8M0FNU, 8, 1)),
)

#: Every PyTorch dtype we send. Quantized dtypes are left out on purpose: their tensors carry
#: a scale and zero point a byte copy would lose (they fall back to pickle).
TORCH = {
    **COMMON,
    **_table(
        DType("complex32", 4, None, (_COMPLEX, 32, 1)),
        # Packed and "shell" types: opaque bytes to PyTorch, moved as bytes here too.
        DType("float4_e2m1fn_x2", 1, None, None),
        DType("bits8", 1, None, None),
        DType("bits16", 2, None, None),
        DType("bits1x8", 1, None, None),
        DType("bits2x4", 1, None, None),
        DType("bits4x2", 1, None, None),
        *(DType(f"int{n}", 1, None, None) for n in range(1, 8)),
        *(DType(f"uint{n}", 1, None, None) for n in range(1, 8)),
    ),
}

#: PyTorch dtypes we refuse, and why (the serializer defers them to pickle).
TORCH_UNSUPPORTED = {
    name: "quantized tensors carry a scale and zero point that a byte copy loses"
    for name in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
}

#: Every JAX dtype we send (JAX's sub-byte types are packed on the device: left out).
JAX = {
    **COMMON,
    **_table(
        DType("float8_e3m4", 1, None, (_F8_E3M4, 8, 1)),
        DType("float8_e4m3", 1, None, (_F8_E4M3, 8, 1)),
        DType("float8_e4m3b11fnuz", 1, None, (_F8_E4M3B11FNUZ, 8, 1)),
    ),
}


def lookup(name: object, table: dict[str, DType]) -> DType:
    """The entry for ``name``; a clear error for anything that is not one of our names."""
    if not isinstance(name, str):
        raise KeyError(f"dtype must be a name (str), got {type(name).__name__}")
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"unknown dtype {name[:64]!r}") from None
