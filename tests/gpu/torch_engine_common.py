"""What the GPU torch engines of the colocated path share (lmdeploy_torch_engine.py,
vllm_torch_engine.py): an exact-name unpickler over real torch, one process per TP rank, the
parameter checksums and digest the trainer compares, and the JSON reply helpers of a
BaseHTTPRequestHandler. Pure stdlib at import time: torch is imported inside the rank processes,
so the servers start (and this file compiles) without it.

The parameters themselves are sglang_torch_engine.py's: made at first sight from what the first
update sends, then copied into (load_weights, imported from there).
"""

import io
import json
import multiprocessing as mp
import os
import pickle
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sglang_torch_engine import (FifoLock, init_custom_process_group,  # noqa: E402,F401
                                 load_weights)  # re-exported

# Every dtype common/dtype.h knows, as torch attribute names.
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
               "int64", "bool", "float8_e4m3fn", "float8_e5m2")


def exact_name_unpickler(rebuild, storages=("TypedStorage",), extra=None, refusal="is forbidden"):
    """A pickle.Unpickler class over real torch that resolves exactly these (module, name) pairs:
    torch.multiprocessing.reductions.rebuild_cuda_tensor (to `rebuild`), torch.Tensor,
    torch.Size, torch.storage.<each of `storages`>, torch.<dtype> for DTYPE_NAMES, and `extra`
    ({(module, name): object}). Anything else raises pickle.UnpicklingError."""
    import torch
    allowed = {
        ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild,
        ("torch", "Tensor"): torch.Tensor,
        ("torch", "Size"): torch.Size,
    }
    for storage in storages:
        allowed[("torch.storage", storage)] = getattr(torch.storage, storage)
    for name in DTYPE_NAMES:
        if hasattr(torch, name):
            allowed[("torch", name)] = getattr(torch, name)
    allowed.update(extra or {})

    class ExactNameUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(f"Global '{module}.{name}' {refusal}")
            return allowed[(module, name)]

    return ExactNameUnpickler


def unpickle(data, unpickler_cls):
    return unpickler_cls(io.BytesIO(data)).load()


def tensor_crc(t):
    """CRC-32 of a tensor's bytes, as trainer_push.py computes it."""
    import torch
    raw = t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy()
    return format(zlib.crc32(raw), "08x")


def digest_of(crcs):
    """One digest of a whole parameter set: CRC-32 of the sorted 'name=crc' lines. Equal digests
    on both sides mean equal names and equal bytes (up to CRC-32's strength)."""
    text = "".join(f"{name}={crcs[name]}\n" for name in sorted(crcs))
    return format(zlib.crc32(text.encode()), "08x")


class RankPool:
    """One process per TP rank (spawned, like the engines' workers), each running
    target(gpu, tp_rank, conn, *args) and answering (ok, value) per command."""

    def __init__(self, target, gpus, *args):
        ctx = mp.get_context("spawn")
        self.ranks = []
        for tp_rank, gpu in enumerate(gpus):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=target, args=(gpu, tp_rank, child) + tuple(args), daemon=True)
            p.start()
            self.ranks.append((p, parent))

    def __len__(self):
        return len(self.ranks)

    def all(self, cmd, arg=None):
        """Sends the command to every rank and returns their answers in rank order. A rank that
        died takes the engine with it, as a crashed worker takes down its server."""
        for _, conn in self.ranks:
            conn.send((cmd, arg))
        try:
            return [conn.recv() for _, conn in self.ranks]
        except EOFError:
            print("a rank process died: the engine exits", flush=True)
            os._exit(17)


def rank_checksums(params, crcs):
    """Fills `crcs` (name -> crc) for `params` where stale; returns it."""
    if len(crcs) != len(params) or set(crcs) != set(params):
        crcs.clear()
        for name, t in params.items():
            crcs[name] = tensor_crc(t)
    return crcs


def stamp():
    now = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1e3) % 1000:03d}"


class JsonReplies:
    """Reply helpers for a BaseHTTPRequestHandler (mixed in before it). Keep-alive with
    TCP_NODELAY, as uvicorn serves the engines."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def send(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply(self, status, obj):
        self.send(status, json.dumps(obj).encode())

    def raw_body(self):
        n = int(self.headers.get("Content-Length", 0) or 0)
        return self.rfile.read(n) if n else b""
