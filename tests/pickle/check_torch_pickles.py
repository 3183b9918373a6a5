#!/usr/bin/python3
"""Loads the torch CUDA-IPC pickles wsync writes, the way an engine would, without torch.

Runs tests/pickle/write_torch_pickles (one pickle per engine payload of
daemon/engines/<kind>/<kind>_ipc_pickle.h, from fixed inputs that are stated again below) and for
each pickle:

1. disassembles it with pickletools.dis (which fails on a broken stack or MARK) and checks its
   opcodes: PROTO 3 first, STOP last, nothing from the memo family and nothing outside what
   docs/engines/torch-ipc.md lists;
2. loads it with an Unpickler whose find_class allows only the exact (module, name) pairs of §6
   (as SGLang's SafeUnpickler does since its 2026-09 exact-name rewrite), each mapped to a stand-in
   that records its arguments, and checks the decoded objects: the 15 rebuild arguments with their
   exact types (bytes handles, an exact bool for argument 14, an int or str device), sizes,
   contiguous strides, offsets inside the storage, each wrapper's shape, and the
   FlattenedTensorMetadata state;
3. pickles the expected objects with CPython's own pickler (protocol 3, no memo) over stand-in
   modules named like torch's and checks the bytes are the same.

Two pickles use GLOBALs the allow-list forbids; the same unpickler must refuse them.

    check_torch_pickles.py WRITE_TORCH_PICKLES_BINARY
"""

import io
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile
import types

# ---- Stand-ins for what the allowed GLOBALs name ---------------------------------------------


class Tensor:
    """torch.Tensor (rebuild argument 0)."""


class TypedStorage:
    """torch.storage.TypedStorage (rebuild argument 4)."""


class Size(tuple):
    """torch.Size: a tuple that pickles as Size((dims,)), as torch's does."""

    def __reduce__(self):
        return (Size, (tuple(self),))


class DType:
    """A torch dtype: pickles as the GLOBAL torch.<name>, as torch's does."""

    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __reduce__(self):
        return self.name

    def __repr__(self):
        return "torch." + self.name


class RebuiltTensor:
    """What rebuild_cuda_tensor(*args) returned: the arguments, kept."""

    def __init__(self, args):
        self.args = args

    def __reduce__(self):
        return (rebuild_cuda_tensor, self.args)


def rebuild_cuda_tensor(*args):
    return RebuiltTensor(args)


class SglangMetadata:
    """sglang.srt.weight_sync.tensor_bucket.FlattenedTensorMetadata (a dataclass there)."""


class LmdeployMetadata:
    """lmdeploy.utils.FlattenedTensorMetadata (a dataclass there)."""


Tensor.__module__ = Size.__module__ = DType.__module__ = "torch"
TypedStorage.__module__ = "torch.storage"
rebuild_cuda_tensor.__module__ = "torch.multiprocessing.reductions"
SGLANG_MODULE = "sglang.srt.weight_sync.tensor_bucket"
LMDEPLOY_MODULE = "lmdeploy.utils"
for cls, module in ((SglangMetadata, SGLANG_MODULE), (LmdeployMetadata, LMDEPLOY_MODULE)):
    cls.__module__ = module
    cls.__name__ = cls.__qualname__ = "FlattenedTensorMetadata"

DTYPES = {name: DType(name, size) for name, size in (
    ("bool", 1), ("uint8", 1), ("int8", 1), ("int16", 2), ("int32", 4), ("int64", 8),
    ("float16", 2), ("bfloat16", 2), ("float32", 4), ("float64", 8), ("float8_e4m3fn", 1),
    ("float8_e5m2", 1))}

# The exact (module, name) pairs of docs/engines/torch-ipc.md, and nothing else.
ALLOWED = {
    ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild_cuda_tensor,
    ("torch", "Tensor"): Tensor,
    ("torch", "Size"): Size,
    ("torch.storage", "TypedStorage"): TypedStorage,
    (SGLANG_MODULE, "FlattenedTensorMetadata"): SglangMetadata,
    (LMDEPLOY_MODULE, "FlattenedTensorMetadata"): LmdeployMetadata,
}
ALLOWED.update({("torch", name): dtype for name, dtype in DTYPES.items()})


class ExactNameUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed") from None


def install_fake_modules():
    """Modules named like torch's holding the stand-ins, so CPython's pickler writes them as the
    same GLOBALs. The script never imports the real torch (CI has none)."""
    attrs = {module: {} for module, _ in ALLOWED}
    for (module, name), obj in ALLOWED.items():
        attrs[module][name] = obj
    for module, names in attrs.items():
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        for name, obj in names.items():
            setattr(sys.modules[module], name, obj)


# ---- The inputs of write_torch_pickles.cc ------------------------------------------------------

STORAGE = 1 << 20
UUID0 = "126c071a-1253-3d49-71ab-17c686b110d5"
UUID1 = "8f0e5d1c-0000-4a4b-9c9d-0123456789ab"
HANDLE_A = bytes(range(0x10, 0x50))
HANDLE_B = bytes(range(0x50, 0x90))
EVENT = bytes(range(0xa0, 0xe0))
ZERO64 = bytes(64)
REF_COUNTER = b"/wsync_rc"


def contiguous_strides(shape):
    """torch's contiguous strides: a zero dim counts as 1."""
    strides, running = [], 1
    for d in reversed(shape):
        strides.append(running)
        running *= max(d, 1)
    return tuple(reversed(strides))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def args(dtype, shape, offset, handle, device, storage=STORAGE, event=ZERO64, sync=False):
    """The 15 rebuild arguments of docs/engines/torch-ipc.md, in order."""
    return (Tensor, Size(shape), contiguous_strides(shape), offset, TypedStorage, DTYPES[dtype],
            device, handle, storage, 0, False, REF_COUNTER, 0, event, sync)


def tensor(*a, **k):
    return RebuiltTensor(args(*a, **k))


def pair(*a, **k):
    return (rebuild_cuda_tensor, args(*a, **k))


def metadata(cls, name, shape, dtype, start, end, n):
    m = cls.__new__(cls)
    m.__dict__.update(name=name, shape=Size(shape), dtype=DTYPES[dtype], start_idx=start,
                      end_idx=end, numel=n)
    return m


def sglang_null(rank):
    handle, uuid = (HANDLE_A, UUID0) if rank == 0 else (HANDLE_B, UUID1)
    sync = {"event": EVENT, "sync": True} if rank == 0 else {}
    return [("model.layers.0.mlp.gate_up_proj.weight",
             tensor("bfloat16", (4, 8), 0, handle, uuid, **sync)),
            ("model.norm.weight", tensor("bfloat16", (8,), 32, handle, uuid, **sync))]


def vllm_names(entry):
    return [{UUID0: entry("bfloat16", (4, 8), 0, HANDLE_A, 0),
             UUID1: entry("bfloat16", (4, 8), 0, HANDLE_B, 1)},
            {UUID0: entry("bfloat16", (8,), 32, HANDLE_A, 0),
             UUID1: entry("bfloat16", (8,), 32, HANDLE_B, 1)}]


def lmdeploy_flattened(with_tensor):
    d = {"metadata": [metadata(LmdeployMetadata, "w", (4, 8), "bfloat16", 0, 32, 32),
                      metadata(LmdeployMetadata, "b", (8,), "bfloat16", 32, 40, 8)]}
    if with_tensor:
        d["flattened_tensor"] = pair("bfloat16", (40,), 512, HANDLE_A, 0)
    d["require_clone"] = False
    d["event_ipc_handle"] = EVENT
    return d


EXPECTED = {
    "sglang_null.rank0.pkl": sglang_null(0),
    "sglang_null.rank1.pkl": sglang_null(1),
    "sglang_null_edges.pkl": [
        ("scalar", tensor("float32", (), 5, HANDLE_A, 0)),
        ("big", tensor("uint8", (16,), 1 << 31, HANDLE_A, 0, storage=8 << 30)),
        ("rank5", tensor("float16", (2, 1, 3, 1, 2), 0, HANDLE_A, 0)),
        ("empty", tensor("int64", (0, 3), 0, HANDLE_A, 0))],
    "sglang_flattened.pkl": {
        "flattened_tensor": tensor("uint8", (4096,), 8192, HANDLE_A, UUID0),
        "metadata": [metadata(SglangMetadata, "w", (4, 8), "bfloat16", 0, 64, 64),
                     metadata(SglangMetadata, "b", (3,), "float32", 64, 76, 12)]},
    "vllm_func_args.pkl": vllm_names(pair),
    "vllm_args.pkl": vllm_names(args),
    "vllm_packed.pkl": {UUID0: args("uint8", (4096,), 0, HANDLE_A, 0),
                        UUID1: args("uint8", (4096,), 0, HANDLE_B, 1)},
    "lmdeploy_null.pkl": [("w", pair("bfloat16", (4, 8), 0, HANDLE_A, 0)),
                          ("b", pair("bfloat16", (8,), 32, HANDLE_A, 0))],
    "lmdeploy_flattened.pkl": lmdeploy_flattened(True),
    "lmdeploy_flattened_cached.pkl": lmdeploy_flattened(False),
    "ckpt_buffer.pkl": pair("uint8", (STORAGE,), 0, HANDLE_A, 3),
    "ckpt_bucket.pkl": [
        {"name": "w", "shape": Size((4, 8)), "dtype": DTYPES["bfloat16"], "offset": 0},
        {"name": "s", "shape": Size(()), "dtype": DTYPES["float32"], "offset": 64}],
    "ckpt_none.pkl": None,
    "section63.pkl": pair("float32", (1024,), 0, HANDLE_A, 0, storage=4096),
}
FORBIDDEN = {
    "forbidden_reconstructor.pkl": "copyreg._reconstructor",
    "forbidden_model_runner.pkl": "sglang.srt.model_executor.model_runner.FlattenedTensorMetadata",
}

# ---- Checks ------------------------------------------------------------------------------------

# docs/engines/torch-ipc.md.
OPCODES = {"PROTO", "GLOBAL", "MARK", "TUPLE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
           "BININT1", "BININT2", "BININT", "LONG1", "SHORT_BINBYTES", "BINBYTES", "BINUNICODE",
           "NEWTRUE", "NEWFALSE", "NONE", "EMPTY_LIST", "APPENDS", "EMPTY_DICT", "SETITEMS",
           "REDUCE", "NEWOBJ", "BUILD", "STOP"}
MEMO = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET", "MEMOIZE"}


def check_opcodes(name, data):
    pickletools.dis(data, out=io.StringIO())
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(data)]
    assert ops[0] == ("PROTO", 3), f"{name}: starts with {ops[0]}"
    assert ops[-1][0] == "STOP", f"{name}: ends with {ops[-1]}"
    used = {op for op, _ in ops}
    assert not used & MEMO, f"{name}: memo opcodes {used & MEMO}"
    assert used <= OPCODES, f"{name}: opcodes outside §6.2: {used - OPCODES}"


def check_args(where, a):
    """The rebuild arguments as torch's rebuild_cuda_tensor needs them (§6.1)."""
    assert type(a) is tuple and len(a) == 15, f"{where}: {len(a)} arguments"
    assert a[0] is Tensor and a[4] is TypedStorage, where
    assert type(a[1]) is Size and all(type(d) is int and d >= 0 for d in a[1]), where
    assert type(a[2]) is tuple and a[2] == contiguous_strides(a[1]), f"{where}: strides {a[2]}"
    assert isinstance(a[5], DType) and DTYPES[a[5].name] is a[5], where
    assert type(a[6]) in (int, str), f"{where}: device {a[6]!r}"
    for i in (7, 11, 13):
        assert type(a[i]) is bytes, f"{where}: argument {i} is {type(a[i]).__name__}"
    assert len(a[7]) == 64 and len(a[13]) == 64, f"{where}: handle sizes"
    for i in (3, 8, 9, 12):
        assert type(a[i]) is int and a[i] >= 0, f"{where}: argument {i} is {a[i]!r}"
    assert a[10] is False, where
    assert type(a[14]) is bool, f"{where}: event_sync_required is {type(a[14]).__name__}"
    item = a[5].itemsize
    assert a[8] % item == 0 and a[9] % item == 0, f"{where}: storage not whole elements"
    assert (a[3] + numel(a[1])) * item <= a[8], f"{where}: view past the storage"


def same(where, got, want):
    """Equal and of the same types all the way down (so False is not 0), stand-ins by identity."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), f"{where}: {len(got)} items, not {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(f"{where}[{i}]", g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            same(f"{where}[{k!r}]", got[k], want[k])
    elif isinstance(want, RebuiltTensor):
        check_args(where, got.args)
        same(f"{where}.args", got.args, want.args)
    elif isinstance(want, (SglangMetadata, LmdeployMetadata)):
        same(f"{where}.__dict__", got.__dict__, want.__dict__)
    elif isinstance(want, (type, DType, types.FunctionType)):
        assert got is want, f"{where}: {got!r} is not {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def check_shape(name, obj):
    """Each wrapper's own layout (§6.4), said plainly on top of the deep comparison."""
    if name.startswith("sglang_null"):
        assert type(obj) is list and all(type(e) is tuple and len(e) == 2 for e in obj)
        for n, t in obj:
            assert type(n) is str and isinstance(t, RebuiltTensor)
            check_args(f"{name}:{n}", t.args)
    if name.startswith("sglang_null.rank"):
        uuid = UUID0 if name.endswith("rank0.pkl") else UUID1
        assert all(t.args[6] == uuid for _, t in obj), f"{name}: not all on GPU {uuid}"
    if name == "sglang_flattened.pkl":
        assert list(obj) == ["flattened_tensor", "metadata"]
        flat = obj["flattened_tensor"].args
        check_args(name, flat)
        assert flat[5] is DTYPES["uint8"] and len(flat[1]) == 1
        for m in obj["metadata"]:
            assert type(m) is SglangMetadata
            assert list(m.__dict__) == ["name", "shape", "dtype", "start_idx", "end_idx", "numel"]
            assert m.end_idx - m.start_idx == m.numel == numel(m.shape) * m.dtype.itemsize
            assert m.end_idx <= flat[1][0] and (flat[3] + m.start_idx) % m.dtype.itemsize == 0
    if name.startswith("vllm") and name != "vllm_packed.pkl":
        assert type(obj) is list and len(obj) == 2, f"{name}: one dict per name"
        for d in obj:
            assert type(d) is dict and list(d) == [UUID0, UUID1]
            for uuid, entry in d.items():
                if name == "vllm_func_args.pkl":
                    assert type(entry) is tuple and len(entry) == 2
                    assert entry[0] is rebuild_cuda_tensor
                    entry = entry[1]
                check_args(f"{name}:{uuid}", entry)
    if name == "vllm_packed.pkl":
        assert type(obj) is dict and list(obj) == [UUID0, UUID1]
        for uuid, entry in obj.items():
            check_args(f"{name}:{uuid}", entry)
            assert entry[5] is DTYPES["uint8"] and len(entry[1]) == 1
    if name == "lmdeploy_null.pkl":
        for n, (func, a) in obj:
            assert type(n) is str and func is rebuild_cuda_tensor
            check_args(f"{name}:{n}", a)
    if name.startswith("lmdeploy_flattened"):
        keys = ["metadata", "flattened_tensor", "require_clone", "event_ipc_handle"]
        if name.endswith("cached.pkl"):
            keys.remove("flattened_tensor")
        assert list(obj) == keys, f"{name}: keys {list(obj)}"
        assert obj["require_clone"] is False
        assert type(obj["event_ipc_handle"]) is bytes and len(obj["event_ipc_handle"]) == 64
        for m in obj["metadata"]:
            assert type(m) is LmdeployMetadata
            assert m.end_idx - m.start_idx == m.numel == numel(m.shape)
        if "flattened_tensor" in obj:
            func, a = obj["flattened_tensor"]
            assert func is rebuild_cuda_tensor
            check_args(name, a)
            assert all(m.dtype is a[5] and m.end_idx <= a[1][0] for m in obj["metadata"])
    if name == "ckpt_buffer.pkl":
        func, a = obj
        assert func is rebuild_cuda_tensor
        check_args(name, a)
        assert a[5] is DTYPES["uint8"] and len(a[1]) == 1
    if name == "ckpt_bucket.pkl":
        for e in obj:
            assert list(e) == ["name", "shape", "dtype", "offset"]
            assert type(e["shape"]) is Size and isinstance(e["dtype"], DType)
            assert e["offset"] % e["dtype"].itemsize == 0
            assert e["offset"] + numel(e["shape"]) * e["dtype"].itemsize <= STORAGE


def cpython_pickle(obj):
    """What CPython's pickler writes for obj at protocol 3 without a memo."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=3)
    pickler.fast = True  # no memo: every object written where it is used, as wsync does
    pickler.dump(obj)
    return out.getvalue()


def main():
    helper = sys.argv[1]
    install_fake_modules()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([helper, tmp], check=True)
        written = sorted(os.listdir(tmp))
        assert written == sorted(list(EXPECTED) + list(FORBIDDEN)), written
        for name, want in EXPECTED.items():
            with open(os.path.join(tmp, name), "rb") as f:
                data = f.read()
            check_opcodes(name, data)
            got = ExactNameUnpickler(io.BytesIO(data)).load()
            same(name, got, want)
            check_shape(name, got)
            ours = cpython_pickle(want)
            assert data == ours, f"{name}: differs from CPython's pickle\n  wsync:  {data.hex()}" \
                f"\n  python: {ours.hex()}"
            print(f"ok   {name}: {len(data)} bytes")
        for name, refused in FORBIDDEN.items():
            with open(os.path.join(tmp, name), "rb") as f:
                data = f.read()
            pickletools.dis(data, out=io.StringIO())
            try:
                ExactNameUnpickler(io.BytesIO(data)).load()
            except pickle.UnpicklingError as e:
                assert refused in str(e), f"{name}: refused for another reason: {e}"
                print(f"ok   {name}: refused ({e})")
            else:
                raise AssertionError(f"{name}: the exact-name unpickler loaded {refused}")
    print(f"check_torch_pickles: {len(EXPECTED)} payloads match, {len(FORBIDDEN)} refused")


if __name__ == "__main__":
    main()
