"""A vLLM server with the NCCL weight-transfer backend (--weight-transfer-config
'{"backend":"nccl"}', VLLM_SERVER_DEV_MODE=1) as wsyncd's disaggregated path meets it, built from
real torch and real NCCL on real GPUs: one process per worker, each on its own GPU, rank
rank_offset + worker index. docs/engines/vllm.md and tcpstore.md.

Like vLLM's PyNcclCommunicator, each worker drives NCCL through ctypes (libnccl.so.2 from torch's
own nvidia-nccl package, else the system's), not through torch.distributed:
- POST /init_weight_transfer_engine {"init_info"}: read as vLLM's kw_only dataclass reads it (an
  unknown key for --version's generation is a 500). The stateless-store mode opens torch's real
  TCPStore client (use_libuv=False, world_size set: it ADDs init/) and reads broadcast_from/0/0,
  unpickled with plain pickle.loads against a stand-in module at vLLM's dotted path; the unique-id
  mode decodes nccl_unique_id_b64 (standard base64, 128 bytes). Then ncclCommInitRank(W, id, rank)
  and the warm-up: all_reduce of one float32 zero, SUM, and a stream sync. Answers once every
  worker has done both.
- POST /update_weights {"update_info"}: names, dtype_names, shapes; unpacked, one ncclBroadcast
  per tensor from rank 0 in names order; packed, uint8 chunks cut after the tensor that takes the
  running total past packed_buffer_size_bytes (packed_tensor.py), split back and viewed. The
  tensors are copied into the parameters (made at first sight) and the stream synchronised.
- Session routes (>= 0.22.0) with 409s out of order; /finish_weight_update records
  weight_version (>= 0.29.0). GET /version, /get_world_size, /is_sleeping, /health; POST /pause,
  /resume, /reset_prefix_cache; GET /sim/checksums (CRC-32 per tensor per rank).
Needs a GPU per worker plus wsyncd's own: the multi-GPU steps of run_gpu_tests.sh run it.
"""

import argparse
import base64
import ctypes
import glob
import json
import os
import pickle
import sys
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_engine_common import (FifoLock, JsonReplies, RankPool, rank_checksums,  # noqa: E402
                                 stamp)

ID_KEY = "broadcast_from/0/0"  # torch's TCPStore client prefixes "/" on the wire


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def install_vllm_standin():
    """vLLM's pickled id names vllm.distributed.device_communicators.pynccl_wrapper.ncclUniqueId:
    a stand-in module at that path lets plain pickle.loads resolve it as vLLM's own would."""
    path = "vllm.distributed.device_communicators.pynccl_wrapper"
    parts = path.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    NcclUniqueId.__module__ = path
    NcclUniqueId.__qualname__ = "ncclUniqueId"
    sys.modules[path].ncclUniqueId = NcclUniqueId


def load_nccl():
    import torch
    here = os.path.dirname(torch.__file__)
    for pattern in (os.path.join(here, "..", "nvidia", "nccl", "lib", "libnccl.so*"),
                    "/usr/lib/x86_64-linux-gnu/libnccl.so*", "/usr/local/cuda/lib64/libnccl.so*"):
        for path in sorted(glob.glob(pattern)):
            return ctypes.CDLL(path)
    return ctypes.CDLL("libnccl.so.2")


NCCL_TYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7,
              "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10, "float8_e5m2": 11, "bool": 1,
              "int16": None}


def version_at_least(version, major, minor):
    try:
        ma, mi = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return False
    return (ma, mi) >= (major, minor)


def rank_main(gpu, index, conn, version):
    import torch
    torch.cuda.set_device(gpu)
    install_vllm_standin()
    nccl = load_nccl()
    comm = ctypes.c_void_p()
    params, crcs = {}, {}
    stream = torch.cuda.current_stream()

    def check(result, what):
        if result != 0:
            raise RuntimeError(f"{what}: NCCL error {result}")

    def broadcast(t, dtype_name):
        kind = NCCL_TYPES[dtype_name]
        if kind is None:  # int16: as bytes, as PyNccl's dtype map has no int16
            t, kind = t.view(torch.uint8), 1
        check(nccl.ncclBroadcast(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(t.data_ptr()),
                                 ctypes.c_size_t(t.numel()), ctypes.c_int(kind), ctypes.c_int(0),
                                 comm, ctypes.c_void_p(stream.cuda_stream)), "ncclBroadcast")

    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "init":
                info, world = arg
                rank = info["rank_offset"] + index
                if "nccl_unique_id_b64" in info:
                    raw = base64.b64decode(info["nccl_unique_id_b64"], validate=True)
                    uid = NcclUniqueId.from_buffer_copy(raw)
                else:
                    store = torch.distributed.TCPStore(
                        info["master_address"], info["master_port"], world_size=world,
                        is_master=False, use_libuv=False)
                    store.wait([ID_KEY])
                    uid = pickle.loads(store.get(ID_KEY))
                    rank_main.store = store  # held for the group's life, as vLLM's group is
                check(nccl.ncclCommInitRank(ctypes.byref(comm), ctypes.c_int(world), uid,
                                            ctypes.c_int(rank)), "ncclCommInitRank")
                zero = torch.zeros(1, dtype=torch.float32, device="cuda")
                check(nccl.ncclAllReduce(ctypes.c_void_p(zero.data_ptr()),
                                         ctypes.c_void_p(zero.data_ptr()), ctypes.c_size_t(1),
                                         ctypes.c_int(7), ctypes.c_int(0), comm,
                                         ctypes.c_void_p(stream.cuda_stream)), "ncclAllReduce")
                stream.synchronize()
                conn.send((True, rank))
            elif cmd == "update":
                names, dtypes, shapes, packed, chunk = arg
                tensors = [torch.empty(s, dtype=getattr(torch, d), device="cuda")
                           for d, s in zip(dtypes, shapes)]
                if not packed:
                    for t, d in zip(tensors, dtypes):
                        broadcast(t, d)
                else:
                    group, running = [], 0
                    for i, t in enumerate(tensors):
                        group.append(t)
                        running += t.numel() * t.element_size()
                        if running > chunk or i + 1 == len(tensors):
                            buf = torch.empty(running, dtype=torch.uint8, device="cuda")
                            broadcast(buf, "uint8")
                            offset = 0
                            for g in group:
                                n = g.numel() * g.element_size()
                                g.view(-1).view(torch.uint8).copy_(buf[offset:offset + n])
                                offset += n
                            group, running = [], 0
                for name, t in zip(names, tensors):
                    if name in params and params[name].shape == t.shape:
                        params[name].copy_(t)
                    else:
                        params[name] = t.clone()
                torch.cuda.synchronize()
                crcs.clear()
                conn.send((True, None))
            elif cmd == "checksums":
                conn.send((True, dict(rank_checksums(params, crcs))))
        except Exception as e:  # noqa: BLE001 - reported to the HTTP side, as vLLM's 500s
            conn.send((False, f"{type(e).__name__}: {e}"))


class Handler(JsonReplies, BaseHTTPRequestHandler):
    def do_GET(self):
        e = self.server.engine
        if self.path == "/health":
            return self.send(200, b"")
        if self.path == "/version":
            return self.reply(200, {"version": e.args.version})
        if self.path.startswith("/get_world_size"):
            return self.reply(200, {"world_size": len(e.pool)})
        if self.path == "/is_sleeping":
            return self.reply(200, {"is_sleeping": False})
        if self.path == "/sim/checksums":
            ranks = {}
            if e.ranks:
                for rank, (ok, crcs) in zip(e.ranks, e.pool.all("checksums")):
                    ranks[str(rank)] = crcs if ok else {}
            return self.reply(200, {"ranks": ranks, "weight_version": e.weight_version})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        e = self.server.engine
        path = self.path.split("?")[0]
        body = self.raw_body()
        if path in ("/pause", "/resume", "/reset_prefix_cache"):
            return self.reply(200, {"status": path[1:]})
        with e.lock:
            sessions = version_at_least(e.args.version, 0, 22)
            if path == "/init_weight_transfer_engine":
                info = json.loads(body or b"{}").get("init_info")
                fields = {"master_address", "master_port", "rank_offset", "world_size"}
                if version_at_least(e.args.version, 0, 28):
                    fields |= {"packed", "packed_buffer_size_bytes", "packed_num_buffers"}
                if version_at_least(e.args.version, 0, 30):
                    fields.add("nccl_unique_id_b64")
                if not isinstance(info, dict) or set(info) - fields:
                    return self.send(500, b"Internal Server Error", "text/plain")
                answers = e.pool.all("init", (info, info["world_size"]))
                if not all(ok for ok, _ in answers):
                    print(stamp(), "init failed:", answers, flush=True)
                    return self.send(500, b"Internal Server Error", "text/plain")
                e.ranks = [r for _, r in answers]
                e.init_info = info
                return self.reply(200, {"message": "Weight transfer initialized"})
            if path == "/start_weight_update" and sessions:
                if e.session:
                    return self.reply(409, {"detail": "a weight update is in progress"})
                e.session = True
                return self.reply(200, {"message": "Weight update started"})
            if path == "/finish_weight_update" and sessions:
                if not e.session:
                    return self.reply(409, {"detail": "no weight update in progress"})
                e.session = False
                data = json.loads(body) if body else {}
                if version_at_least(e.args.version, 0, 29) and data.get("weight_version"):
                    e.weight_version = data["weight_version"]
                return self.reply(200, {"message": "Weight update finished"})
            if path == "/update_weights":
                if sessions and not e.session:
                    return self.reply(409, {"detail": "no weight update in progress"})
                info = json.loads(body)["update_info"]
                fields = {"names", "dtype_names", "shapes"}
                new = version_at_least(e.args.version, 0, 28)
                if not new:
                    fields |= {"packed", "packed_buffer_size_bytes", "packed_num_buffers"}
                if set(info) - fields:
                    return self.send(500, b"Internal Server Error", "text/plain")
                source = e.init_info if new else info
                packed = source.get("packed", False)
                chunk = source.get("packed_buffer_size_bytes", 1 << 30)
                answers = e.pool.all("update", (info["names"], info["dtype_names"],
                                                info["shapes"], packed, chunk))
                if not all(ok for ok, _ in answers):
                    print(stamp(), "update failed:", answers, flush=True)
                    return self.send(500, b"Internal Server Error", "text/plain")
                return self.reply(200, {"message": "Weights updated"})
        self.reply(404, {"detail": "Not Found"})


class Engine:
    def __init__(self, args):
        self.args = args
        gpus = [int(g) for g in args.gpus.split(",")]
        self.pool = RankPool(rank_main, gpus, args.version)
        self.lock = FifoLock()
        self.ranks = []
        self.init_info = {}
        self.session = False
        self.weight_version = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--gpus", default="1", help="one worker per GPU index, in rank order")
    ap.add_argument("--version", default="0.30.0")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.engine = Engine(args)
    print(f"vllm_nccl_torch_engine: vLLM {args.version}, {len(server.engine.pool)} worker(s), "
          f"http://127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
