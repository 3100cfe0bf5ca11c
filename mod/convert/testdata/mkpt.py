"""Writes the seed corpus of FuzzLoadTorch (fuzz/FuzzLoadTorch/*, in the go
test fuzz v1 format): small files in torch.save's shapes, zip and legacy,
made without torch (fake modules give the pickles the GLOBALs torch's would
have), and the hostile ones that found bugs. Run from anywhere:
python3 mod/convert/testdata/mkpt.py"""
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


# torch.FloatStorage and torch._utils._rebuild_tensor_v2, as pickle names them.
torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
sys.modules["torch"], sys.modules["torch._utils"] = torch, utils


class FloatStorage:
    pass


def _rebuild_tensor_v2(*args):
    pass


FloatStorage.__module__, torch.FloatStorage = "torch", FloatStorage
_rebuild_tensor_v2.__module__, utils._rebuild_tensor_v2 = "torch._utils", _rebuild_tensor_v2


class Storage:
    """A storage named by key, of n floats."""

    def __init__(self, key, n):
        self.key, self.n = key, n


class Tensor:
    """A view of shape (and stride: row-major when None) of a storage."""

    def __init__(self, key, n, shape, stride=None):
        self.storage, self.shape = Storage(key, n), tuple(shape)
        if stride is None:
            stride, acc = [], 1
            for d in reversed(shape):
                stride.insert(0, acc)
                acc *= d
        self.stride = tuple(stride)

    def __reduce__(self):
        return (_rebuild_tensor_v2, (self.storage, 0, self.shape, self.stride, False, collections.OrderedDict()))


class ZipPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", FloatStorage, obj.key, "cpu", obj.n)
        return None


class LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", FloatStorage, obj.key, "cpu", obj.n, None)
        return None


def floats(values):
    return struct.pack("<%df" % len(values), *values)


def save(name, obj, storages):
    """torch.save's zip format: archive/data.pkl and archive/data/KEY."""
    pkl = io.BytesIO()
    ZipPickler(pkl, protocol=2).dump(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl.getvalue())
        for key, values in storages.items():
            z.writestr("archive/data/" + key, floats(values))
    corpus(name, out.getvalue())


def save_legacy(name, obj, storages, counts=None):
    """The format before torch 1.6: five pickles (magic number, protocol,
    system info, the object, the storage keys), then each storage as a u64
    element count and its data."""
    out = io.BytesIO()
    for x in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}):
        pickle.dump(x, out, protocol=2)
    LegacyPickler(out, protocol=2).dump(obj)
    pickle.dump(list(storages), out, protocol=2)
    for key, values in storages.items():
        out.write(struct.pack("<Q", (counts or {}).get(key, len(values))) + floats(values))
    corpus(name, out.getvalue())


os.makedirs(OUT, exist_ok=True)
save("state", collections.OrderedDict([("w", Tensor("0", 6, [2, 3])), ("b", Tensor("1", 2, [2]))]),
     {"0": [1, 2, 3, 4, 5, 6], "1": [7, 8]})
save_legacy("legacy", collections.OrderedDict([("w", Tensor("0", 3, [3]))]), {"0": [1, 2, 3]})
# Not a state_dict: gopickle's Go types once leaked into the message.
save("list", [Tensor("0", 2, [2])], {"0": [1, 2]})
save("dictlist", {"a": [1, 2]}, {})
# Hostile: each asked gopickle or the copy for gigabytes from a small file.
corpus("string8", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"abc")  # a 1 TiB string: fatal out of memory
corpus("frame", b"\x80\x04\x95" + struct.pack("<Q", 1 << 36) + b"abc")  # a 64 GiB frame
save("bigstorage", {"w": Tensor("0", 1 << 30, [1 << 30])}, {"0": [1, 2]})  # 4 GiB storage, 8 bytes of data
save_legacy("legacybig", collections.OrderedDict([("w", Tensor("0", 3, [3]))]), {"0": [1, 2, 3]}, {"0": 1 << 40})
save("expanded", {"w": Tensor("0", 1, [1 << 30], [0])}, {"0": [1]})  # a 4 GiB view of one float (stride 0)
save("views", collections.OrderedDict((f"w{i}", Tensor("0", 256, [256])) for i in range(64)),
     {"0": [float(i) for i in range(256)]})  # 64 views of one storage: more elements than the file has bytes
