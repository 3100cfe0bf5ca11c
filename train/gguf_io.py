"""A small GGUF v2/v3 reader (F32 and F16 tensors) and a writer for vocab-only
files, enough for the trainer: retrofit from a dense llama GGUF such as
stories260K.gguf, and a tiny vocabulary file for the convert tests.

The Go package gguf/ is the strict reader; this one trusts its input more but
still bounds every length by the file size.
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"

# GGUF metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
_SCALAR = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
    T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}
_NP = {T_U8: "<u1", T_I8: "<i1", T_U16: "<u2", T_I16: "<i2", T_U32: "<u4", T_I32: "<i4",
       T_F32: "<f4", T_BOOL: "<u1", T_U64: "<u8", T_I64: "<i8", T_F64: "<f8"}

# ggml tensor types this reader can decode.
GGML_F32, GGML_F16 = 0, 1


class GGUFError(ValueError):
    pass


class GGUFFile:
    """kv: dict key -> value (arrays as lists / numpy arrays); tensors: dict
    name -> (ggml type, dims in ggml order, absolute offset)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as fh:
            self.data = fh.read()
        self.off = 0
        self.kv = {}
        self.tensors = {}
        self._parse()

    def _take(self, n):
        if n < 0 or self.off + n > len(self.data):
            raise GGUFError(f"{self.path}: truncated at byte {self.off} (want {n} more)")
        b = self.data[self.off:self.off + n]
        self.off += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._take(4))[0]

    def _u64(self):
        return struct.unpack("<Q", self._take(8))[0]

    def _str(self):
        return self._take(self._u64()).decode("utf-8")

    def _value(self, t):
        if t == T_STR:
            return self._str()
        if t == T_ARR:
            et, n = self._u32(), self._u64()
            if n > len(self.data):
                raise GGUFError(f"{self.path}: array of {n} elements is longer than the file")
            if et == T_STR:
                return [self._str() for _ in range(n)]
            if et in _NP:
                size = np.dtype(_NP[et]).itemsize
                return np.frombuffer(self._take(n * size), dtype=_NP[et]).copy()
            return [self._value(et) for _ in range(n)]
        if t in _SCALAR:
            fmt = _SCALAR[t]
            return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]
        raise GGUFError(f"{self.path}: unknown value type {t}")

    def _parse(self):
        if self._take(4) != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (bad magic)")
        version = self._u32()
        if version not in (2, 3):
            raise GGUFError(f"{self.path}: GGUF version {version} not supported")
        n_tensors, n_kv = self._u64(), self._u64()
        for _ in range(n_kv):
            key = self._str()
            self.kv[key] = self._value(self._u32())
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            dims = [self._u64() for _ in range(self._u32())]
            ttype, off = self._u32(), self._u64()
            infos.append((name, ttype, dims, off))
        align = int(self.kv.get("general.alignment", 32))
        base = (self.off + align - 1) // align * align
        for name, ttype, dims, off in infos:
            self.tensors[name] = (ttype, dims, base + off)

    def tensor(self, name):
        """The tensor as a float32 numpy array in PyTorch order (dims reversed)."""
        if name not in self.tensors:
            raise GGUFError(f"{self.path}: no tensor {name!r}")
        ttype, dims, off = self.tensors[name]
        n = int(np.prod(dims)) if dims else 1
        if ttype == GGML_F32:
            dt = "<f4"
        elif ttype == GGML_F16:
            dt = "<f2"
        else:
            raise GGUFError(f"{self.path}: tensor {name!r} has ggml type {ttype}; only F32 and F16 are read here")
        size = n * np.dtype(dt).itemsize
        if off + size > len(self.data):
            raise GGUFError(f"{self.path}: tensor {name!r} runs past the end of the file")
        a = np.frombuffer(self.data, dtype=dt, count=n, offset=off).astype(np.float32)
        return a.reshape(list(reversed(dims)))


def _w_str(out, s):
    b = s.encode("utf-8")
    out += struct.pack("<Q", len(b)) + b


def _w_value(out, v):
    """Append a typed value: str, bool, int (u32), float (f32), list of str,
    numpy arrays of float32/int32/uint32."""
    if isinstance(v, str):
        out += struct.pack("<I", T_STR)
        _w_str(out, v)
    elif isinstance(v, bool):
        out += struct.pack("<I?", T_BOOL, v)
    elif isinstance(v, int):
        out += struct.pack("<II", T_U32, v)
    elif isinstance(v, float):
        out += struct.pack("<If", T_F32, v)
    elif isinstance(v, list):
        out += struct.pack("<IIQ", T_ARR, T_STR, len(v))
        for s in v:
            _w_str(out, s)
    elif isinstance(v, np.ndarray):
        et = {np.dtype("<f4"): T_F32, np.dtype("<i4"): T_I32, np.dtype("<u4"): T_U32}[v.dtype]
        out += struct.pack("<IIQ", T_ARR, et, len(v)) + v.tobytes()
    else:
        raise TypeError(f"cannot write {type(v)}")


def write_vocab_gguf(path, kv):
    """Write a GGUF v3 file with the given metadata and no tensors."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))
    for k, v in kv.items():
        _w_str(out, k)
        _w_value(out, v)
    with open(path, "wb") as fh:
        fh.write(bytes(out))
