"""Where an engine simulator's ranks keep their tensors: the memory backend.

Each simulator (tests/engines/<kind>/<kind>_engine.py) writes its ranks' receive code once, in
torch's terms, and runs it over one of two backends, chosen with --memory:
- "host": host_torch.py, numpy over host memory; handles are host mode's shared memory and the
  weight-update group is the host collective (a wsyncd started with --platform host);
- "cuda": real torch on real GPUs; handles are CUDA IPC handles and the group is NCCL's, joined
  through torch.distributed exactly as the engines join it.
A backend is loaded inside each rank process, so the HTTP front end never imports torch.
"""

import ctypes
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("host", "cuda")


class Memory:
    """What rank code asks of its backend. `torch` is the torch module (or its stand-in);
    `open_store(host, port, world_size)` a TCPStore client as torch's (keys without the leading
    "/" torch's client adds on the wire); `communicator(unique_id, world_size, rank)` a raw
    NCCL-style communicator (broadcast(tensor), warm_up()), as vLLM's PyNcclCommunicator."""

    def __init__(self, kind, torch, reductions, dist, init_group, ipc_opens, open_store,
                 communicator):
        self.kind, self.torch, self.reductions, self.dist = kind, torch, reductions, dist
        self.init_custom_process_group = init_group
        self._ipc_opens = ipc_opens
        self.open_store = open_store
        self.communicator = communicator

    def device_uuid(self, gpu):
        return str(self.torch.cuda.get_device_properties(gpu).uuid)

    def ipc_opens(self):
        """How many allocations this rank mapped, where the backend can tell (host: counted;
        cuda: torch's cache is not visible, None)."""
        return self._ipc_opens()

    def tensor_bytes(self, t):
        """A tensor's bytes as a buffer (for checksums)."""
        raw = t.detach().contiguous().view(-1).view(self.torch.uint8).cpu().numpy()
        return raw


def cuda_init_custom_process_group(backend, init_method, world_size, rank, group_name,
                                   timeout=None):
    """SGLang's init_custom_process_group (LMDeploy copies it): a tcp:// rendezvous to wsyncd's
    TCPStore, PrefixStore(group_name), the c10d process-group helper, ProcessGroupNCCL without
    device_id."""
    import torch
    from torch.distributed import distributed_c10d as c10d
    timeout = timeout or c10d.default_pg_timeout
    store, rank, world_size = next(c10d.rendezvous(init_method, rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    kwargs = {"backend_options": None} if torch.__version__ >= "2.6" else {"pg_options": None}
    pg, _ = c10d._new_process_group_helper(world_size, rank, [], c10d.Backend(backend), store,
                                           group_name=group_name, timeout=timeout, **kwargs)
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


class HostStore:
    """torch's TCPStore client API over host_torch's: keys as torch names them."""

    def __init__(self, host_torch, host, port):
        self.client = host_torch.StoreClient(host, port, 60)

    def wait(self, keys):
        self.client.wait(["/" + k for k in keys])

    def get(self, key):
        return self.client.get("/" + key)


# ncclDataType_t by torch dtype name; bool travels as uint8; int16 has none (sent as bytes).
NCCL_TYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7,
              "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10, "float8_e5m2": 11, "bool": 1,
              "int16": None}


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def load_nccl():
    """libnccl.so.2 from torch's own nvidia-nccl package, else the system's, as vLLM finds it."""
    import torch
    here = os.path.dirname(torch.__file__)
    for pattern in (os.path.join(here, "..", "nvidia", "nccl", "lib", "libnccl.so*"),
                    "/usr/lib/x86_64-linux-gnu/libnccl.so*", "/usr/local/cuda/lib64/libnccl.so*"):
        for path in sorted(glob.glob(pattern)):
            return ctypes.CDLL(path)
    return ctypes.CDLL("libnccl.so.2")


class CudaCommunicator:
    """NCCL driven through ctypes, as vLLM's PyNcclCommunicator drives it: ncclCommInitRank from
    the unique id, broadcasts from rank 0 on the current stream."""

    def __init__(self, uid, world_size, rank):
        import torch
        self.ctypes, self.torch = ctypes, torch
        self.nccl = load_nccl()
        self.comm = ctypes.c_void_p()
        self.stream = torch.cuda.current_stream()
        self.check(self.nccl.ncclCommInitRank(ctypes.byref(self.comm), ctypes.c_int(world_size),
                                              NcclUniqueId.from_buffer_copy(bytes(uid)),
                                              ctypes.c_int(rank)), "ncclCommInitRank")

    def check(self, result, what):
        if result != 0:
            raise RuntimeError(f"{what}: NCCL error {result}")

    def broadcast(self, t):
        c, name = self.ctypes, str(t.dtype).split(".")[-1]
        kind = NCCL_TYPES.get(name)
        if kind is None:  # int16: as bytes, as PyNccl's dtype map has no int16
            t, kind = t.view(self.torch.uint8), 1
        self.check(self.nccl.ncclBroadcast(c.c_void_p(t.data_ptr()), c.c_void_p(t.data_ptr()),
                                           c.c_size_t(t.numel()), c.c_int(kind), c.c_int(0),
                                           self.comm, c.c_void_p(self.stream.cuda_stream)),
                   "ncclBroadcast")

    def warm_up(self):
        c = self.ctypes
        zero = self.torch.zeros(1, dtype=self.torch.float32, device="cuda")
        self.check(self.nccl.ncclAllReduce(c.c_void_p(zero.data_ptr()),
                                           c.c_void_p(zero.data_ptr()), c.c_size_t(1),
                                           c.c_int(7), c.c_int(0), self.comm,
                                           c.c_void_p(self.stream.cuda_stream)), "ncclAllReduce")
        self.stream.synchronize()


def load(kind):
    if kind == "host":
        sys.path.insert(0, HERE)
        import host_torch
        return Memory("host", host_torch, host_torch.multiprocessing.reductions,
                      host_torch.distributed,
                      host_torch.distributed.init_custom_process_group, host_torch.ipc_opens,
                      lambda host, port, world: HostStore(host_torch, host, port),
                      lambda uid, world, rank: host_torch.HostCommunicator(uid, rank, world))
    if kind == "cuda":
        import torch
        import torch.distributed as dist
        from torch.multiprocessing import reductions

        def open_store(host, port, world):
            return dist.TCPStore(host, port, world_size=world, is_master=False,
                                 use_libuv=False)

        return Memory("cuda", torch, reductions, dist, cuda_init_custom_process_group,
                      lambda: None, open_store, CudaCommunicator)
    raise ValueError(f"memory {kind!r} is not one of {KINDS}")


def device_of(gpu):
    """A device index from one entry of --gpus: an index, or (host) a stand-in GPU UUID."""
    text = str(gpu)
    if text.isdigit():
        return int(text)
    uuid = text[4:] if text.startswith("GPU-") else text
    if not uuid.startswith("686f7374-0000-0000-0000-"):
        raise ValueError(f"{gpu!r} is neither a device index nor a host-mode GPU UUID")
    return int(uuid.rsplit("-", 1)[1])
