"""An SGLang engine as seen by wsyncd, built from real torch: one process per TP rank on its own GPU
joins the weight-update group exactly as SGLang's init_custom_process_group does (tcp:// rendezvous
to wsyncd's TCPStore, PrefixStore(group), the c10d process-group helper, ProcessGroupNCCL without
device_id), receives each bucket with dist.broadcast inside the HTTP request (flattened uint8, or
one async broadcast per tensor) and copies it into its parameters as load_weights does.
Colocated path: POST /update_weights_from_tensor takes one base64 pickle per TP rank, loaded as
SGLang does since September 2026 (an unpickler of exact (module, name) pairs, torch's
rebuild_cuda_tensor patched to take the GPU as its UUID), and copies the tensors into the
parameters the same way. The map-once route, POST /update_weights_from_ipc, runs
checkpoint-engine's worker on every rank at once (tests/sim/checkpoint_engine_worker.py, the
generation of --ce-worker): a REP socket connected to the address under "GPU-<uuid>", the buffer
rebuilt once with the rank's own device index, each bucket's tensors viewed at their byte offsets
(plain pickle, real torch), load_weights and a device synchronize before each answer, and at the
end the mapping dropped (ipc_collect, empty_cache).
Benchmark extras: POST /bench/receive {"sizes": [...]} posts receives back to back; POST /sim/mode
{"data_plane": true} makes update requests answer at once (the receives come from /bench/receive);
POST /bench/loads answers each rank's load time per broadcast update since the last ask (CUDA
events around load_weights, after the receive), for the benchmark's engine-bound limit.

    python3 sglang_torch_engine.py --port 30001 --gpus 1,2
"""

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The worker protocol and the REP socket are shared with the host simulator.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sim"))
from engine_common import FifoLock, load_weights  # noqa: E402
from memory import cuda_init_custom_process_group as init_custom_process_group  # noqa: E402


class FlattenedTensorMetadata:
    """Stands for sglang.srt.weight_sync.tensor_bucket.FlattenedTensorMetadata (a dataclass:
    NEWOBJ + BUILD fill its __dict__)."""


def ipc_load(entry, load_format):
    """SGLang's MultiprocessingSerializer.deserialize with its SafeUnpickler, then the receiver of
    the load format: [(name, tensor)], each tensor viewing wsyncd's slot through CUDA IPC."""
    import base64
    import io
    import pickle
    import torch
    from torch.multiprocessing import reductions

    uuids = {str(torch.cuda.get_device_properties(i).uuid): i
             for i in range(torch.cuda.device_count())}

    def rebuild(*args):
        # monkey_patch_torch_reductions: argument 6 may be the GPU's UUID, mapped to its index.
        args = list(args)
        if isinstance(args[6], str):
            if args[6] not in uuids:
                raise RuntimeError(f"no visible GPU has UUID {args[6]}")
            args[6] = uuids[args[6]]
        return reductions.rebuild_cuda_tensor(*args)

    allowed = {
        ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild,
        ("torch", "Tensor"): torch.Tensor,
        ("torch", "Size"): torch.Size,
        ("torch.storage", "TypedStorage"): torch.storage.TypedStorage,
        ("sglang.srt.weight_sync.tensor_bucket", "FlattenedTensorMetadata"):
            FlattenedTensorMetadata,
    }
    for name in ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
                 "int64", "bool", "float8_e4m3fn", "float8_e5m2"):
        allowed[("torch", name)] = getattr(torch, name)

    class SafeUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(f"Global '{module}.{name}' is forbidden")
            return allowed[(module, name)]

    obj = SafeUnpickler(io.BytesIO(base64.b64decode(entry, validate=True))).load()
    if load_format is None:
        return list(obj)
    flat = obj["flattened_tensor"]
    return [(m.name, flat[m.start_idx:m.end_idx].view(m.dtype).reshape(m.shape))
            for m in obj["metadata"]]


def ipc_route_rank(gpu, tp_rank, zmq_handles, params, generation, on_bucket):
    """One rank's share of POST /update_weights_from_ipc: checkpoint-engine's worker, with real
    torch. Returns (ok, message)."""
    import gc
    import pickle
    import torch
    import checkpoint_engine_worker
    from zmq_rep import Timeout, rep_socket

    key = f"GPU-{torch.cuda.get_device_properties(gpu).uuid}"
    if key not in zmq_handles:
        return False, f"Device UUID {key} not found in zmq_handles: {list(zmq_handles)}"
    trace = os.environ.get("WSYNC_SIM_TRACE") == "1"
    times = {"map": 0.0, "load": 0.0, "buckets": 0, "release": 0.0, "finish": 0.0}

    def map_buffer(handle):
        t0 = time.perf_counter()
        func, args = handle
        args = list(args)
        args[6] = gpu  # _rebuild_ipc: the worker's own device index
        buffer = func(*args)
        assert buffer.dtype == torch.uint8
        times["map"] += time.perf_counter() - t0
        return buffer

    def load(payload, buffer):
        t0 = time.perf_counter()
        weights = checkpoint_engine_worker.extract(
            payload, buffer.numel(),
            lambda off, n, dtype, shape: buffer[off:off + n].view(dtype=dtype).view(shape))
        load_weights(params, weights)
        torch.cuda.synchronize()
        times["load"] += time.perf_counter() - t0
        times["buckets"] += 1

    def release(buffer):
        t0 = time.perf_counter()
        del buffer
        gc.collect()
        torch.cuda.ipc_collect()
        torch.cuda.empty_cache()
        times["release"] = time.perf_counter() - t0

    def finish():
        t0 = time.perf_counter()
        gc.collect()
        torch.cuda.empty_cache()
        times["finish"] = time.perf_counter() - t0

    sock = rep_socket(zmq_handles[key], timeout_s=120)
    try:
        checkpoint_engine_worker.serve(sock, pickle.loads, map_buffer, load, release=release,
                                       generation=generation, on_bucket=on_bucket,
                                       finish=finish)
    except (checkpoint_engine_worker.WorkerError, Timeout) as e:
        return False, str(e)
    finally:
        sock.close()
    if trace:
        print(f"rank {tp_rank} update_weights_from_ipc: map {times['map'] * 1e3:.2f} ms, "
              f"{times['buckets']} bucket(s) loaded in {times['load'] * 1e3:.2f} ms, release "
              f"{times['release'] * 1e3:.2f} ms, final gc {times['finish'] * 1e3:.2f} ms",
              flush=True)
    return True, "ok"


def rank_main(gpu, tp_rank, conn, die_at_update, die_rank=-1):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(gpu)
    pg = None
    params = {}
    crcs = {}  # of params, computed when asked
    recv_buf = None
    updates = 0
    load_ms = []  # each broadcast update's load time on this rank (POST /bench/loads)
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "init":
                pg = init_custom_process_group(
                    arg.get("backend", "nccl"),
                    f"tcp://{arg['master_address']}:{arg['master_port']}",
                    arg["world_size"], arg["rank_offset"] + tp_rank, arg["group_name"])
                conn.send((True, "ok"))
            elif cmd == "update":
                updates += 1
                if updates - 1 == die_at_update and die_rank in (-1, tp_rank):
                    print(f"rank {tp_rank}: dying at update {updates - 1} as asked", flush=True)
                    os._exit(17)
                dtypes = [getattr(torch, d) for d in arg["dtypes"]]
                received = []
                if arg.get("load_format") == "flattened_bucket":
                    sizes = []
                    for shape, dt in zip(arg["shapes"], dtypes):
                        n = 1
                        for d in shape:
                            n *= d
                        sizes.append(n * torch.empty((), dtype=dt).element_size())
                    flat = torch.empty(sum(sizes), dtype=torch.uint8, device=f"cuda:{gpu}")
                    dist.broadcast(flat, src=0, group=pg)
                    start = 0
                    for name, shape, dt, size in zip(arg["names"], arg["shapes"], dtypes, sizes):
                        received.append((name, flat[start:start + size].view(dt).reshape(shape)))
                        start += size
                else:
                    # SGLang's per-tensor receive: every broadcast issued async, then waited.
                    handles = []
                    for name, shape, dt in zip(arg["names"], arg["shapes"], dtypes):
                        t = torch.empty(shape, dtype=dt, device=f"cuda:{gpu}")
                        handles.append(dist.broadcast(t, src=0, group=pg, async_op=True))
                        received.append((name, t))
                    for h in handles:
                        h.wait()
                # The rank's own load time, apart from the receive: CUDA events around
                # load_weights on the stream that waited for the broadcasts (the benchmark's
                # engine-bound limit adds it to the wire time; no extra synchronisation).
                received_at = torch.cuda.Event(enable_timing=True)
                received_at.record()
                load_weights(params, received)
                loaded_at = torch.cuda.Event(enable_timing=True)
                loaded_at.record()
                torch.cuda.current_stream().synchronize()
                load_ms.append(received_at.elapsed_time(loaded_at))
                crcs.clear()
                conn.send((True, "ok"))
            elif cmd == "ipc_update":
                updates += 1
                if updates - 1 == die_at_update:
                    print(f"rank {tp_rank}: dying at update {updates - 1} as asked", flush=True)
                    os._exit(17)
                t0 = time.perf_counter()
                received = ipc_load(arg["serialized_named_tensors"][tp_rank],
                                    arg.get("load_format"))
                t1 = time.perf_counter()
                load_weights(params, received)
                t2 = time.perf_counter()
                # The views die here: torch's IPC deleter syncs this stream before wsyncd's slot
                # may be refilled (it is, once this request has answered).
                del received
                torch.cuda.current_stream().synchronize()
                t3 = time.perf_counter()
                if os.environ.get("WSYNC_SIM_TRACE") == "1":
                    # Where one request's time goes on the rank: base64, unpickling and the IPC
                    # open (rebuild); queueing the copies (load); the copies and the IPC close.
                    print(f"rank {tp_rank} ipc_update: rebuild {(t1 - t0) * 1e3:.2f} ms, load "
                          f"{(t2 - t1) * 1e3:.2f} ms, copy+close {(t3 - t2) * 1e3:.2f} ms",
                          flush=True)
                crcs.clear()
                conn.send((True, "ok"))
            elif cmd == "ipc_route":
                def on_bucket(index):
                    nonlocal updates
                    updates += 1
                    if updates - 1 == die_at_update:
                        print(f"rank {tp_rank}: dying at bucket {updates - 1} as asked",
                              flush=True)
                        os._exit(17)
                crcs.clear()
                conn.send(ipc_route_rank(gpu, tp_rank, arg["zmq_handles"], params,
                                         arg["generation"], on_bucket))
            elif cmd == "bench_loads":
                # Each update's load time (ms) since the last ask, in order; then forgotten.
                conn.send((True, list(load_ms)))
                load_ms.clear()
            elif cmd == "bench_receive":
                # Receives posted back to back, as fast as rank 0 sends: the wire's ceiling.
                need = max(arg["sizes"])
                if recv_buf is None or recv_buf.numel() < need:
                    recv_buf = torch.empty(need, dtype=torch.uint8, device=f"cuda:{gpu}")
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for n in arg["sizes"]:
                    dist.broadcast(recv_buf[:n], src=0, group=pg)
                torch.cuda.synchronize()
                conn.send((True, time.perf_counter() - t0))
            elif cmd == "destroy":
                if pg is not None:
                    dist.destroy_process_group(pg)
                pg = None
                conn.send((True, "ok"))
            elif cmd == "checksums":
                if len(crcs) != len(params):
                    for name, t in params.items():
                        raw = t.contiguous().view(-1).view(torch.uint8).cpu().numpy()
                        crcs[name] = format(zlib.crc32(raw.tobytes()), "08x")
                conn.send((True, crcs))
            elif cmd == "exit":
                conn.send((True, "bye"))
                return
        except Exception as e:  # reported to the HTTP caller as SGLang does
            traceback.print_exc()
            conn.send((False, f"{type(e).__name__}: {e}"))


TRACE = os.environ.get("WSYNC_SIM_TRACE") == "1"


class Engine:
    def __init__(self, gpus, die_at_update, die_rank=-1):
        ctx = mp.get_context("spawn")
        self.ranks = []
        for tp_rank, gpu in enumerate(gpus):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=rank_main, args=(gpu, tp_rank, child, die_at_update, die_rank),
                            daemon=True)
            p.start()
            self.ranks.append((p, parent))
        self.lock = FifoLock()  # SGLang serialises weight updates, in arrival order
        self.group = None
        self.rank_offset = 0
        self.weight_version = "default"
        self.data_plane = False
        self.ce_worker = "g4"
        self.route_flushes = 0  # map-once requests that asked the engine to flush its cache

    def all_ranks(self, cmd, arg=None):
        for _, conn in self.ranks:
            conn.send((cmd, arg))
        try:
            return [conn.recv() for _, conn in self.ranks]
        except EOFError:
            # A rank process died: the engine is gone, as a crashed SGLang server would be.
            os._exit(17)


ENGINE = None


class Handler(BaseHTTPRequestHandler):
    # Keep-alive, as uvicorn serves SGLang: wsyncd pipelines a bucket's update request behind the
    # last one on one connection. uvicorn (asyncio) sends with TCP_NODELAY; without it the body
    # written after the headers would wait for the client's delayed ACK (40 ms per answer).
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def result(self, results, ok_message):
        bad = [m for ok, m in results if not ok]
        if bad:
            return self.reply(400, {"success": False, "message": "; ".join(bad)})
        return self.reply(200, {"success": True, "message": ok_message})

    def body(self):
        n = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        if self.path == "/get_server_info":
            return self.reply(200, {"version": "0.5.6+torch-sim", "tp_size": len(ENGINE.ranks),
                                    "dp_size": 1, "pp_size": 1,
                                    "weight_version": ENGINE.weight_version})
        if self.path == "/sim/checksums":
            with ENGINE.lock:
                res = ENGINE.all_ranks("checksums")
            ranks = {str(ENGINE.rank_offset + i): c for i, (_, c) in enumerate(res)}
            return self.reply(200, {"weight_version": ENGINE.weight_version, "ranks": ranks,
                                    "route_flushes": ENGINE.route_flushes})
        if self.path == "/health":
            return self.reply(200, {})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        body = self.body()
        if self.path == "/init_weights_update_group":
            if ENGINE.group is not None:
                return self.reply(400, {"success": False,
                                        "message": f"group {ENGINE.group} already initialized"})
            ENGINE.rank_offset = body["rank_offset"]
            res = ENGINE.all_ranks("init", body)
            if all(ok for ok, _ in res):
                ENGINE.group = body.get("group_name", "weight_update_group")
            return self.result(res, "Succeeded to initialize custom process group.")
        if self.path == "/update_weights_from_distributed":
            if ENGINE.data_plane:
                # Data-plane benchmark: a /bench/receive request already posted every receive.
                return self.reply(200, {"success": True, "message": "data plane"})
            arrived = time.time()
            with ENGINE.lock:
                entered = time.time()
                res = ENGINE.all_ranks("update", body)
            if TRACE:
                # WSYNC_SIM_TRACE=1: one line per update request, to line up with wsyncd's debug log.
                print(f"{time.strftime('%H:%M:%S', time.gmtime(arrived))}.{int(arrived * 1e3) % 1000:03d}"
                      f" update: {len(body.get('names', []))} tensors, waited "
                      f"{(entered - arrived) * 1e3:.1f} ms for the lock, handled in "
                      f"{(time.time() - entered) * 1e3:.1f} ms: {res[0][0]}", flush=True)
            if body.get("weight_version"):
                ENGINE.weight_version = body["weight_version"]
            return self.result(res, "Succeeded to update parameter online from distributed.")
        if self.path == "/update_weights_from_tensor":
            entries = body.get("serialized_named_tensors")
            if not isinstance(entries, list) or len(entries) < len(ENGINE.ranks):
                return self.reply(400, {"success": False, "message":
                                        f"serialized_named_tensors needs {len(ENGINE.ranks)}"})
            arrived = time.perf_counter()
            with ENGINE.lock:
                res = ENGINE.all_ranks("ipc_update", body)
            if TRACE:
                print(f"update_weights_from_tensor: {(time.perf_counter() - arrived) * 1e3:.2f} ms "
                      f"from parsed request to the ranks' answers", flush=True)
            return self.result(res, "Succeeded to update parameter online.")
        if self.path == "/update_weights_from_ipc":
            if not isinstance(body.get("zmq_handles"), dict):
                return self.reply(400, {"success": False, "message": "zmq_handles is required"})
            ENGINE.route_flushes += bool(body.get("flush_cache", True))
            arrived = time.perf_counter()
            # Paused (wsyncd pauses first), SGLang runs this route without the update lock; the
            # simulator takes it anyway, as nothing else updates meanwhile.
            with ENGINE.lock:
                res = ENGINE.all_ranks("ipc_route", {"zmq_handles": body["zmq_handles"],
                                                     "generation": ENGINE.ce_worker})
            if TRACE:
                print(f"update_weights_from_ipc: {(time.perf_counter() - arrived) * 1e3:.2f} ms "
                      f"from parsed request to the ranks' return", flush=True)
            return self.result(res, "IPC weight update completed successfully")
        if self.path == "/destroy_weights_update_group":
            res = ENGINE.all_ranks("destroy")
            ENGINE.group = None
            return self.result(res, "Succeeded to destroy custom process group.")
        if self.path == "/bench/receive":
            with ENGINE.lock:
                res = ENGINE.all_ranks("bench_receive", body)
            if not all(ok for ok, _ in res):
                return self.result(res, "")
            return self.reply(200, {"success": True, "seconds": max(sec for _, sec in res)})
        if self.path == "/bench/loads":
            with ENGINE.lock:
                res = ENGINE.all_ranks("bench_loads")
            return self.reply(200, {"success": True, "load_ms": [ms for _, ms in res]})
        if self.path == "/sim/mode":
            ENGINE.data_plane = bool(body.get("data_plane", False))
            return self.reply(200, {"success": True, "data_plane": ENGINE.data_plane})
        if self.path == "/update_weight_version":
            ENGINE.weight_version = body["new_version"]
            return self.reply(200, {"success": True, "message": "ok",
                                    "new_version": ENGINE.weight_version})
        if self.path == "/pause_generation":
            return self.reply(200, {"message": "Generation paused successfully.", "status": "ok"})
        if self.path == "/continue_generation":
            return self.reply(200, {"message": "Generation continued successfully.",
                                    "status": "ok"})
        if self.path == "/flush_cache":
            return self.reply(200, b"Cache flushed.\n")
        self.reply(404, {"detail": "Not Found"})


def main():
    global ENGINE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--gpus", required=True, help="comma-separated GPU per TP rank")
    ap.add_argument("--die-at-update", type=int, default=-1,
                    help="the process exits when the Nth update request (0-based) arrives")
    ap.add_argument("--die-rank", type=int, default=-1,
                    help="with --die-at-update: only this TP rank's process exits (a broadcast "
                         "update; -1: every rank), the others stay in the collective")
    ap.add_argument("--ce-worker", default="g4", choices=("g1", "g4"),
                    help="checkpoint-engine worker generation on the map-once route")
    args = ap.parse_args()
    # SIGTERM exits through sys.exit so multiprocessing reaps the rank processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ENGINE = Engine([int(g) for g in args.gpus.split(",")], args.die_at_update, args.die_rank)
    ENGINE.ce_worker = args.ce_worker
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"torch engine on :{args.port}, gpus {args.gpus}, pid {os.getpid()}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
