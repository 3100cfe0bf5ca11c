"""Writes the seed corpus of FuzzLoadTorch (fuzz/FuzzLoadTorch/*, in the go
test fuzz v1 format): small files in torch.save's shapes, zip and legacy,
made without torch (fake modules give the pickles the GLOBALs torch's would
have), and the hostile ones that found bugs (a storage larger than its data
once made gopickle allocate it). Run from this directory: python3 mkpt.py"""
import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "FuzzLoadTorch")


def corpus(name, data):
    """Writes data as one corpus entry: []byte("...") with Go escapes."""
    lit = "".join(chr(c) if 32 <= c < 127 and chr(c) not in '"\\' else "\\x%02x" % c for c in data)
    with open(os.path.join(OUT, name), "w") as f:
        f.write('go test fuzz v1\n[]byte("%s")\n' % lit)

torch = types.ModuleType("torch"); utils = types.ModuleType("torch._utils")
sys.modules["torch"] = torch; sys.modules["torch._utils"] = utils
class FloatStorage: pass
FloatStorage.__module__ = "torch"; torch.FloatStorage = FloatStorage
def _rebuild_tensor_v2(*a): pass
_rebuild_tensor_v2.__module__ = "torch._utils"; utils._rebuild_tensor_v2 = _rebuild_tensor_v2
class T:
    def __init__(s, key, n, shape): s.key, s.n, s.shape = key, n, shape
    def __reduce__(s):
        stride = tuple(int.__mul__(1, 1) for _ in s.shape)
        st = []; acc = 1
        for d in reversed(s.shape): st.insert(0, acc); acc *= d
        return (_rebuild_tensor_v2, (Stor(s.key, s.n), 0, tuple(s.shape), tuple(st), False, collections.OrderedDict()))
class Stor:
    def __init__(s, key, n): s.key, s.n = key, n
class P(pickle.Pickler):
    def persistent_id(self, o):
        if isinstance(o, Stor): return ("storage", FloatStorage, o.key, "cpu", o.n)
        return None
def save(name, obj, storages):
    b = io.BytesIO(); P(b, protocol=2).dump(obj)
    zb = io.BytesIO()
    with zipfile.ZipFile(zb, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b.getvalue())
        for k, vals in storages.items(): z.writestr("archive/data/" + k, struct.pack("<%df" % len(vals), *vals))
    corpus(name, zb.getvalue())
sd = collections.OrderedDict([("w", T("0", 6, [2, 3])), ("b", T("1", 2, [2]))])
# A 1 TiB string and a 64 GiB frame in 14 bytes: once fatal in gopickle.
corpus("string8", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"abc")
corpus("frame", b"\x80\x04\x95" + struct.pack("<Q", 1 << 36) + b"abc")
save("state", sd, {"0": [1, 2, 3, 4, 5, 6], "1": [7, 8]})
save("list", [T("0", 2, [2])], {"0": [1, 2]})
save("dictlist", {"a": [1, 2]}, {})
save("bigstorage", {"w": T("0", 1 << 30, [1 << 30])}, {"0": [1, 2]})

# The format before torch 1.6: five pickles (magic number, protocol, system
# info, the object, the storage keys), then each storage as a u64 element
# count and its data.
class PL(pickle.Pickler):
    def persistent_id(self, o):
        if isinstance(o, Stor): return ("storage", FloatStorage, o.key, "cpu", o.n, None)
        return None
def save_legacy(name, obj, storages, counts=None):
    b = io.BytesIO()
    for x in (0x1950a86a20f9469cfc6c, 1001, {"protocol_version": 1001, "little_endian": True}):
        pickle.dump(x, b, protocol=2)
    PL(b, protocol=2).dump(obj)
    pickle.dump(list(storages), b, protocol=2)
    for k, vals in storages.items():
        b.write(struct.pack("<Q", (counts or {}).get(k, len(vals))) + struct.pack("<%df" % len(vals), *vals))
    corpus(name, b.getvalue())
save_legacy("legacy", collections.OrderedDict([("w", T("0", 3, [3]))]), {"0": [1, 2, 3]})
save_legacy("legacybig", collections.OrderedDict([("w", T("0", 3, [3]))]), {"0": [1, 2, 3]}, {"0": 1 << 40})
