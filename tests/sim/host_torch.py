"""The host memory backend of the engine simulators: the part of torch their rank code calls,
over host memory, so one simulator program runs on a machine without torch or a GPU (CI) and,
with real torch, on GPUs. What stands in for what:

- a tensor is a numpy byte array (a view of a shared-memory mapping, or its own bytes) with a
  torch dtype and a shape; slicing (1-D, in elements), reshape/view, view(dtype), .to(dtype) (a
  value cast, as torch's), clone, copy_, and the device moves (no-ops) behave as torch's do;
- torch.multiprocessing.reductions.rebuild_cuda_tensor maps host mode's "IPC handle" (the
  shared-memory name, NUL-padded to 64 bytes) once per (handle, storage offset) and keeps it, as
  torch's IPC cache does, after checking its 15 arguments as torch reads them;
- torch.cuda: a current device per process, a GPU's UUID is host mode's stand-in
  (common/host/host_platform.h), events are opened from 64-byte handles and do nothing;
- torch.distributed: a group joins through wsyncd's TCPStore as c10d does (validate, ping,
  ADD "init/", then WAIT and GET of the group's id key at the first collective) and receives
  broadcasts through the host collective (common/host/host_collective.h).

Only what the simulators use is here; anything else raises AttributeError.
"""

import builtins
import mmap
import os
import re
import socket
import struct
import threading
import types

import numpy as np

DTYPE_SIZES = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1,
    "int16": 2, "int32": 4, "int64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
# A cudaIpcMemHandle_t, and a cudaIpcEventHandle_t; host mode pads the shm name to this size.
HANDLE_BYTES = 64


class Dtype:
    def __init__(self, name):
        self.name = name
        self.itemsize = DTYPE_SIZES[name]

    def __eq__(self, other):
        return isinstance(other, Dtype) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"torch.{self.name}"


class Size(tuple):
    def numel(self):
        n = 1
        for d in self:
            n *= d
        return n


class TorchClass:
    """Stands for torch.Tensor and the storage classes: only passed as arguments."""

    def __init__(self, name):
        self.name = name


def shm_path(handle):
    """The /dev/shm file a host-mode handle names (the shm name, NUL-padded to 64 bytes)."""
    return "/dev/shm/" + handle.rstrip(b"\0").decode().lstrip("/")


class LoadError(Exception):
    """Why an engine refused a payload: the simulator answers as the engine would."""


HOST_UUID = re.compile(r"686f7374-0000-0000-0000-(\d{12})")
HOST_SLOT = re.compile(r"/wsync-\d+-d(\d+)-")


def check_host_device(device, handle):
    """A TP rank maps memory of its own GPU: in host mode a slot's name carries its device, and a
    stand-in UUID (common/host/host_platform.h) names its device, so a rank handed another
    device's slot is caught (on GPUs it would read across the interconnect, or fail)."""
    gpu = HOST_UUID.fullmatch(device) if isinstance(device, str) else None
    slot = HOST_SLOT.match(handle.rstrip(b"\0").decode(errors="replace")) \
        if isinstance(handle, bytes) else None
    if gpu and slot and int(gpu.group(1)) != int(slot.group(1)):
        raise LoadError(f"a slot of device {int(slot.group(1))} named to the rank on device "
                        f"{int(gpu.group(1))}")


class ShmMappings:
    """One rank's mappings of host-mode allocations, as torch's IPC cache keeps them: opened
    once per (handle, storage offset) and kept; `opens` counts the opening."""

    def __init__(self):
        self.mappings = {}  # (handle, storage offset) -> mmap
        self.opens = 0

    def rebuild(self, args, storage_classes, check_device):
        """Checks rebuild_cuda_tensor's 15 arguments as torch reads them (the device through
        `check_device`, the engine's own rule) and maps the storage. Returns (region, start byte,
        dtype, size) of the view."""
        if len(args) != 15:
            raise LoadError(f"rebuild_cuda_tensor takes 15 arguments, got {len(args)}")
        (tensor_cls, size, stride, offset, storage_cls, dtype, device, handle, storage_bytes,
         storage_offset, requires_grad, ref_counter, _ref_offset, event, event_sync) = args
        if not isinstance(tensor_cls, TorchClass) or tensor_cls.name != "Tensor":
            raise LoadError("argument 0 is not torch.Tensor")
        if not isinstance(storage_cls, TorchClass) or storage_cls.name not in storage_classes:
            raise LoadError(f"argument 4 is not one of torch.storage's {storage_classes}")
        if not isinstance(size, Size) or not isinstance(dtype, Dtype):
            raise LoadError("arguments 1 and 5 must be a torch.Size and a torch dtype")
        check_device(device)
        check_host_device(device, handle)
        for name, value in (("handle", handle), ("event handle", event)):
            if not isinstance(value, bytes) or len(value) != HANDLE_BYTES:
                raise LoadError(f"the {name} must be {HANDLE_BYTES} bytes")
        if not isinstance(ref_counter, bytes):
            raise LoadError("the ref-counter handle must be bytes")
        # torch.bool shadows the builtin in this module.
        if type(event_sync) is not builtins.bool or type(requires_grad) is not builtins.bool:
            raise LoadError("requires_grad and event_sync_required must be bools")
        numel, expect, step = 1, [], 1
        for d in reversed(size):
            numel *= d
            expect.insert(0, step)
            step *= max(d, 1)
        if tuple(stride) != tuple(expect):
            raise LoadError(f"strides {tuple(stride)} are not contiguous for {tuple(size)}")
        if storage_bytes % dtype.itemsize or storage_offset % dtype.itemsize:
            raise LoadError("the storage is not whole elements of its dtype")
        if (offset + numel) * dtype.itemsize > storage_bytes:
            raise LoadError("the view runs past its storage")
        key = (handle, storage_offset)
        region = self.mappings.get(key)
        if region is None:
            with open(shm_path(handle), "rb") as f:
                region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if storage_offset + storage_bytes > len(region):
                name = handle.rstrip(b"\0").decode()
                raise LoadError(f"the storage runs past allocation {name}")
            self.mappings[key] = region
            self.opens += 1
        return region, storage_offset + offset * dtype.itemsize, dtype, tuple(size)


__version__ = "host"

# torch's dtypes, by attribute name (float32 named here, for the functions below).
float32 = Dtype("float32")
for _name in DTYPE_SIZES:
    globals().setdefault(_name, Dtype(_name))

Tensor = TorchClass("Tensor")
storage = types.SimpleNamespace(TypedStorage=TorchClass("TypedStorage"),
                                UntypedStorage=TorchClass("UntypedStorage"))

_NUMPY = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64, "int8": np.int8,
    "uint8": np.uint8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _as_float32(raw, dtype):
    if dtype.name == "bfloat16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype.name not in _NUMPY:
        raise LoadError(f"a cast from {dtype.name} is not simulated")
    return raw.view(_NUMPY[dtype.name])


def _cast(raw, src, dst):
    """The bytes of elements of dtype src, as values of dtype dst (tensor.to(dst))."""
    values = _as_float32(raw, src)
    if dst.name == "bfloat16":
        bits = values.astype(np.float32).view(np.uint32)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        return (rounded >> 16).astype(np.uint16).view(np.uint8)
    if dst.name not in _NUMPY:
        raise LoadError(f"a cast to {dst.name} is not simulated")
    return values.astype(_NUMPY[dst.name]).view(np.uint8)


def _dims(shape):
    """A shape's dimensions as torch.Size takes them: non-negative ints."""
    dims = tuple(shape)
    # torch.bool shadows the builtin here (torch's dtypes are this module's names).
    if any(isinstance(d, builtins.bool) or not isinstance(d, (int, np.integer)) or d < 0
           for d in dims):
        raise TypeError(f"a shape takes non-negative ints, not {dims!r}")
    return Size(int(d) for d in dims)


class HostTensor:
    """A contiguous tensor: `raw` holds its bytes (a uint8 numpy array, possibly a view), which
    start `offset` bytes into their allocation (torch's storage offset, in bytes)."""

    def __init__(self, raw, dtype, shape, offset=0):
        self.raw, self.dtype, self.shape = raw, dtype, _dims(shape)
        self.offset = offset
        if raw.nbytes != _numel(self.shape) * dtype.itemsize:
            raise LoadError(f"{raw.nbytes} bytes are not a {dtype.name} tensor of {self.shape}")

    def numel(self):
        return _numel(self.shape)

    @property
    def nbytes(self):
        return self.raw.nbytes

    def dim(self):
        return len(self.shape)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        if not isinstance(key, slice) or len(self.shape) != 1 or key.step not in (None, 1):
            raise LoadError("only 1-D slices of a tensor are simulated")
        start, stop, _ = key.indices(self.shape[0])
        stop = max(start, stop)
        unit = self.dtype.itemsize
        return HostTensor(self.raw[start * unit:stop * unit], self.dtype, (stop - start,),
                          self.offset + start * unit)

    def split(self, sizes):
        """torch.split of a 1-D tensor into pieces of `sizes` elements."""
        if len(self.shape) != 1 or sum(sizes) != self.shape[0]:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to "
                               f"{self.shape[0] if self.shape else 0}")
        pieces, at = [], 0
        for n in sizes:
            pieces.append(self[at:at + n])
            at += n
        return tuple(pieces)

    def _shape_of(self, shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        if shape.count(-1) > 1:
            raise RuntimeError("only one dimension can be inferred")
        if -1 in shape:
            known = _numel(d for d in shape if d != -1)
            shape[shape.index(-1)] = self.numel() // max(known, 1)
        shape = list(_dims(shape))
        if _numel(shape) != self.numel():
            raise RuntimeError(f"shape {tuple(shape)} is invalid for input of size {self.numel()}")
        return shape

    def reshape(self, *shape):
        return HostTensor(self.raw, self.dtype, self._shape_of(shape), self.offset)

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], Dtype):
            dtype = args[0]
            if self.raw.nbytes % dtype.itemsize:
                raise RuntimeError(f"{self.raw.nbytes} bytes do not view as {dtype.name}")
            if self.shape and (self.shape[-1] * self.dtype.itemsize) % dtype.itemsize:
                raise RuntimeError("the last dimension does not view as the new dtype")
            if self.offset % dtype.itemsize:
                raise RuntimeError(f"a view as {dtype.name} needs the storage offset "
                                   f"({self.offset} bytes) divisible by {dtype.itemsize}")
            last = (self.shape[-1] * self.dtype.itemsize // dtype.itemsize) if self.shape else 1
            shape = tuple(self.shape[:-1]) + (last,) if self.shape else (last,)
            return HostTensor(self.raw, dtype, shape, self.offset)
        return self.reshape(*args)

    def to(self, target=None, dtype=None, **_):
        if isinstance(target, Dtype):
            dtype = target
        if dtype is None or dtype == self.dtype:
            return self  # a device move: host memory is every device's
        return HostTensor(_cast(self.raw, self.dtype, dtype), dtype, self.shape)

    def clone(self):
        return HostTensor(self.raw.copy(), self.dtype, self.shape)

    def copy_(self, src):
        if src.dtype != self.dtype:
            src = src.to(self.dtype)
        self.raw[:] = src.raw
        return self

    def contiguous(self):
        return self

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.raw

    def tobytes(self):
        return self.raw.tobytes()


def empty(*shape, dtype=None, device=None):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    dtype = dtype or float32
    shape = _dims(shape)
    return HostTensor(np.zeros(_numel(shape) * dtype.itemsize, np.uint8), dtype, shape)


class _Cuda:
    """torch.cuda for one process: its current device, no-op synchronisation, event handles."""

    def __init__(self):
        self.device = 0

    def set_device(self, device):
        self.device = int(device)

    def current_device(self):
        return self.device

    def get_device_properties(self, device):
        return types.SimpleNamespace(uuid=host_uuid(int(device)))

    def synchronize(self, *_):
        pass

    def empty_cache(self):
        pass

    def ipc_collect(self):
        pass

    class Event:
        """An event opened from its IPC handle: waits and records are immediate (host memory
        has no streams)."""

        def __init__(self, handle=None):
            self.handle = handle

        @classmethod
        def from_ipc_handle(cls, device, handle):
            if not isinstance(handle, bytes) or len(handle) != HANDLE_BYTES:
                raise LoadError(f"an event handle must be {HANDLE_BYTES} bytes")
            return cls(handle)

        def wait(self, *_):
            pass

        def record(self, *_):
            pass


cuda = _Cuda()


def host_uuid(device):
    """Host mode's stand-in UUID of a device (common/host/host_platform.cc)."""
    return f"686f7374-0000-0000-0000-{device:012d}"


class _Reductions:
    """torch.multiprocessing.reductions: rebuild_cuda_tensor over host mode's shared memory."""

    def __init__(self):
        self.mappings = ShmMappings()

    def rebuild_cuda_tensor(self, *args):
        region, start, dtype, size = self.mappings.rebuild(
            args, ("TypedStorage", "UntypedStorage"), lambda device: None)
        nbytes = _numel(size) * dtype.itemsize
        raw = np.frombuffer(region, np.uint8, count=nbytes, offset=start)
        return HostTensor(raw, dtype, size, start)


multiprocessing = types.SimpleNamespace(reductions=_Reductions())


def ipc_opens():
    """How many allocations this process mapped (torch's IPC cache, counted)."""
    return multiprocessing.reductions.mappings.opens


# torch.distributed over wsyncd's TCPStore and the host collective.

_STORE_MAGIC = 0x3C85F7CE
_COLLECTIVE_MAGIC = b"WSYNCHC1"


def _read_exact(sock, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the peer closed the connection")
        got += k
    return bytes(buf)


def _recv_into(sock, out):
    view, got = memoryview(out), 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the collective's root closed the connection")
        got += k


class StoreClient:
    """torch's TCPStore client as c10d's rendezvous makes it (docs/engines/tcpstore.md)."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(struct.pack("<BI", 0, _STORE_MAGIC))  # VALIDATE
        nonce = os.getpid() & 0xFFFFFFFF
        self.sock.sendall(struct.pack("<BI", 13, nonce))  # PING
        if struct.unpack("<I", _read_exact(self.sock, 4))[0] != nonce:
            raise ConnectionError("the store echoed a different PING nonce")
        self.add("init/", 1)

    @staticmethod
    def _key(key):
        data = key.encode()
        return struct.pack("<Q", len(data)) + data

    def add(self, key, delta):
        self.sock.sendall(struct.pack("<B", 4) + self._key(key) + struct.pack("<q", delta))
        return struct.unpack("<q", _read_exact(self.sock, 8))[0]

    def wait(self, keys):
        self.sock.sendall(struct.pack("<BQ", 6, len(keys)) + b"".join(self._key(k) for k in keys))
        if _read_exact(self.sock, 1) != b"\0":
            raise ConnectionError("unexpected WAIT reply")

    def get(self, key):
        self.sock.sendall(struct.pack("<B", 3) + self._key(key))
        n = struct.unpack("<Q", _read_exact(self.sock, 8))[0]
        return _read_exact(self.sock, n)

    def close(self):
        self.sock.close()


class HostGroup:
    """One rank's process group: the store at first, the host collective from the first
    collective on (ProcessGroupNCCL reads the id lazily)."""

    def __init__(self, store, name, rank, world_size, timeout):
        self.store, self.name, self.rank, self.world_size = store, name, rank, world_size
        self.timeout = timeout
        self.sock = None
        self.sequence = 0
        self.lock = threading.Lock()

    def _join(self, uid=None):
        if uid is None:
            key = f"/{self.name}/{self.name}//cuda//0"
            self.store.wait([key])
            uid = self.store.get(key)
        if len(uid) != 128 or uid[:8] != _COLLECTIVE_MAGIC:
            raise RuntimeError("the group's id is not a host-collective id (is wsyncd running "
                               "in CUDA mode?)")
        port = struct.unpack("<H", uid[8:10])[0]
        token = uid[10:26]
        address = uid[27:27 + uid[26]].decode()
        sock = socket.create_connection((address, port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(_COLLECTIVE_MAGIC + token + struct.pack("<II", self.rank, self.world_size))
        if _read_exact(sock, 1) != b"\0":
            raise RuntimeError(f"the collective's root refused rank {self.rank}")
        self.sock = sock

    def _header(self, nbytes):
        seq, length = struct.unpack("<QQ", _read_exact(self.sock, 16))
        if seq != self.sequence:
            raise RuntimeError(f"broadcast sequence {seq} where {self.sequence} was expected")
        self.sequence += 1
        if length != nbytes:
            raise RuntimeError(f"root broadcast {length} bytes but this rank posted a receive "
                               f"of {nbytes} bytes")

    def broadcast_into(self, tensor):
        with self.lock:
            if self.sock is None:
                self._join()
            self._header(tensor.raw.nbytes)
            _recv_into(self.sock, tensor.raw)

    def receive_part(self, nbytes, part):
        """The start of a broadcast of `nbytes`: its header and its first `part` bytes, the rest
        left unread (a rank that dies mid-bucket)."""
        with self.lock:
            if self.sock is None:
                self._join()
            self._header(nbytes)
            _recv_into(self.sock, bytearray(part))

    def all_reduce_sum(self, tensor):
        """The warm-up all-reduce: this rank's float32 to the root, the sum back."""
        with self.lock:
            if self.sock is None:
                self._join()
            self.sock.sendall(tensor.raw.tobytes())
            self._header(4)
            _recv_into(self.sock, tensor.raw)

    def close(self):
        if self.sock is not None:
            self.sock.close()
        if self.store is not None:
            self.store.close()


class HostCommunicator:
    """A communicator made from a unique id, as vLLM's PyNcclCommunicator makes one with
    ncclCommInitRank: here the host collective's id, joined at once."""

    def __init__(self, uid, rank, world_size, timeout=60):
        self.group = HostGroup(None, "", rank, world_size, timeout)
        self.group._join(bytes(uid))

    def broadcast(self, tensor):
        self.group.broadcast_into(tensor)

    def warm_up(self):
        """PyNcclCommunicator's warm-up: all_reduce of one float32 zero, SUM."""
        zero = empty(1, dtype=float32)
        self.group.all_reduce_sum(zero)
        if zero.raw.view(np.float32)[0] != 0:
            raise RuntimeError(f"the warm-up all-reduce gave {zero.raw.view(np.float32)[0]}")

    def close(self):
        self.group.close()


class _Work:
    def wait(self):
        return True


class _Distributed:
    def init_custom_process_group(self, backend, init_method, world_size, rank, group_name,
                                  timeout=60):
        """SGLang's helper (and LMDeploy's, vLLM's stateless group): tcp://host:port."""
        if not init_method.startswith("tcp://"):
            raise ValueError(f"init_method {init_method!r} is not tcp://")
        host, port = init_method[len("tcp://"):].rsplit(":", 1)
        store = StoreClient(host.strip("[]"), int(port), timeout)
        return HostGroup(store, group_name, rank, world_size, timeout)

    def broadcast(self, tensor, src=0, group=None, async_op=False):
        if src != 0:
            raise RuntimeError("the simulated group broadcasts from rank 0 only")
        group.broadcast_into(tensor)
        return _Work() if async_op else None

    def all_reduce(self, tensor, group=None, async_op=False):
        group.all_reduce_sum(tensor)
        return _Work() if async_op else None

    def destroy_process_group(self, group):
        group.close()


distributed = _Distributed()
