"""What the host-mode IPC simulators unpickle torch's names into (no torch on CI): dtypes with
their sizes, torch.Size, the classes that are only passed as rebuild arguments, and the
exact-name unpickler."""

import io
import mmap
import re
import pickle

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


class ExactNameUnpickler(pickle.Unpickler):
    """Loads a torch IPC pickle allowing only exact (module, name) pairs, as SGLang's SafeUnpickler
    does since September 2026: torch's rebuild function (the simulator's own `rebuild`), Tensor,
    Size, the storage classes in `storages`, dtypes, and FlattenedTensorMetadata under
    `metadata_module` (`metadata_cls`). Anything else is refused."""

    def __init__(self, data, rebuild, metadata_module, metadata_cls,
                 storages=("TypedStorage",), refusal="is forbidden"):
        super().__init__(io.BytesIO(data))
        self.refusal = refusal
        self.allowed = {
            ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild,
            ("torch", "Tensor"): TorchClass("Tensor"),
            ("torch", "Size"): Size,
            (metadata_module, "FlattenedTensorMetadata"): metadata_cls,
        }
        for storage in storages:
            self.allowed[("torch.storage", storage)] = TorchClass(storage)
        for name in DTYPE_SIZES:
            self.allowed[("torch", name)] = Dtype(name)

    def find_class(self, module, name):
        if (module, name) not in self.allowed:
            raise pickle.UnpicklingError(f"Global '{module}.{name}' {self.refusal}")
        return self.allowed[(module, name)]


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
        if type(event_sync) is not bool or type(requires_grad) is not bool:
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
