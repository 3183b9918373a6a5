"""What the host-mode IPC simulators unpickle torch's names into (no torch on CI): dtypes with
their sizes, torch.Size, the classes that are only passed as rebuild arguments, and the
exact-name unpickler."""

import io
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


class Size(tuple):
    pass


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
