"""The rank side of SGLang's simulator (sglang_engine.py): one process per TP rank, its receive
code written once over the rank's memory backend (tests/sim/memory.py). Commands
(engine_common.serve_rank): init, update (the broadcast path), ipc_update
(/update_weights_from_tensor), ipc_route (/update_weights_from_ipc), receive_ahead and received
(the data-plane benchmark's receives, posted before the updates), bench_receive, bench_loads,
destroy, checksums, stats."""

import base64
import gc
import io
import os
import pickle
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sim"))
import memory as memories  # noqa: E402
from engine_common import (flip_first_byte, load_weights, rank_checksums,  # noqa: E402
                           serve_rank, tensor_crc)

# How long a rank told never to fetch the group's id waits in its first collective.
NEVER_FETCHED_WAIT_S = 300

METADATA_MODULE = "sglang.srt.weight_sync.tensor_bucket"
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
               "int64", "bool", "float8_e4m3fn", "float8_e5m2")


class FlattenedTensorMetadata:
    """sglang.srt.weight_sync.tensor_bucket.FlattenedTensorMetadata (a dataclass: NEWOBJ +
    BUILD fill its __dict__)."""


def arm_stranger(url):
    """Lets the engine's stranger connect (the server holds it), and waits until wsyncd refused
    or admitted it: the server's POST /sim/arm_stranger answers then (up to 10 s)."""
    if not url:
        return
    import urllib.request
    req = urllib.request.Request(url, data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=15) as r:
        r.read()


def rank_main(gpu, tp_rank, conn, memory_kind, uint8_reader, die_at_update, die_rank):
    mem = memories.load(memory_kind)
    torch = mem.torch
    torch.cuda.set_device(gpu)
    uuid = mem.device_uuid(gpu)
    st = {"pg": None, "params": {}, "crcs": {}, "updates": 0, "load_ms": [], "recv_buf": None,
          "stream_maps": 0, "post_hooks": 0, "buckets_seen": 0, "never_fetch_id": False,
          "collective_used": False, "ahead": None, "ahead_crcs": [], "ipc_phases": [],
          "ipc_requests": 0}

    def die_here(what):
        st["updates"] += 1
        if st["updates"] - 1 == die_at_update and die_rank in (-1, tp_rank):
            print(f"rank {tp_rank}: dying at {what} {st['updates'] - 1} as asked", flush=True)
            os._exit(17)

    def rebuild(*args):
        # SGLang's monkey_patch_torch_reductions (docs/engines/sglang.md): argument 6 is a GPU's
        # UUID (what SGLang's own serializer writes) or a device index (plain torch's
        # reduce_tensor, as trainers without SGLang's patch send), used as is. SGLang maps a UUID
        # of any GPU it sees; this simulator refuses another GPU than the rank's, stricter on
        # purpose: a payload naming the wrong GPU would be read across GPUs, slowly.
        args = list(args)
        device = args[6]
        if device not in (uuid, gpu) or isinstance(device, bool):
            raise RuntimeError(f"device {device} is not this rank's GPU ({uuid}, index {gpu})")
        args[6] = gpu
        return mem.reductions.rebuild_cuda_tensor(*args)

    allowed = {("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild,
               ("torch", "Tensor"): torch.Tensor, ("torch", "Size"): torch.Size,
               ("torch.storage", "TypedStorage"): torch.storage.TypedStorage,
               (METADATA_MODULE, "FlattenedTensorMetadata"): FlattenedTensorMetadata}
    for name in DTYPE_NAMES:
        allowed[("torch", name)] = getattr(torch, name)

    class SafeUnpickler(pickle.Unpickler):
        """SGLang's since September 2026: exact (module, name) pairs only."""

        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(f"Global '{module}.{name}' is forbidden")
            return allowed[(module, name)]

    def ipc_load(entry, load_format):
        obj = SafeUnpickler(io.BytesIO(base64.b64decode(entry, validate=True))).load()
        if load_format is None:
            return list(obj)
        if load_format != "flattened_bucket":
            raise ValueError(f"load_format {load_format!r} is not simulated")
        flat = obj["flattened_tensor"]
        out = []
        for m in obj["metadata"]:
            if uint8_reader:
                # Since PR #13413: the entry's byte range viewed as its dtype.
                out.append((m.name, flat[m.start_idx:m.end_idx].view(m.dtype).reshape(m.shape)))
            else:
                # Before 0.5.6: elements of the flat tensor's own dtype, reshaped, then cast
                # by value to the entry's dtype.
                out.append((m.name, flat[m.start_idx:m.end_idx].reshape(m.shape).to(m.dtype)))
        return out

    def init(arg):
        st["pg"] = mem.init_custom_process_group(
            arg.get("backend", "nccl"), f"tcp://{arg['master_address']}:{arg['master_port']}",
            arg["world_size"], arg["rank_offset"] + tp_rank,
            arg.get("group_name", "weight_update_group"))
        st["never_fetch_id"] = bool(arg.get("never_fetch_id"))
        st["collective_used"] = False
        return "ok"

    def first_collective():
        """torch builds the group's communicator at its first collective; with never_fetch_id
        it waits on one made by ncclCommSplit from a device-bound default group, which never
        reads the id and never completes (the device_id hazard)."""
        if st["never_fetch_id"] and not st["collective_used"]:
            time.sleep(NEVER_FETCHED_WAIT_S)
            raise RuntimeError("simulated: waiting in ncclCommSplit")
        st["collective_used"] = True

    def die_midway(arg, sizes):
        """A crashed engine process: on host memory it takes the header and half of the
        request's first broadcast (the bucket, or its first tensor) first, so the root loses it
        in the middle of a transfer."""
        if mem.kind == "host" and sizes:
            nbytes = sum(sizes) if arg.get("load_format") == "flattened_bucket" else sizes[0]
            st["pg"].receive_part(nbytes, nbytes // 2)
        print(f"rank {tp_rank}: dying mid-bucket as asked", flush=True)
        os._exit(17)

    def update(arg):
        die_here("update")
        if st["pg"] is None:
            raise RuntimeError("the weight update group is not initialized")
        first_collective()
        dtypes = [getattr(torch, d) for d in arg["dtypes"]]
        sizes = [torch.Size(shape).numel() * dt.itemsize
                 for shape, dt in zip(arg["shapes"], dtypes)]
        if arg.get("die_midway"):
            die_midway(arg, sizes)
        received = []
        if arg.get("load_format") == "flattened_bucket":
            flat = torch.empty(sum(sizes), dtype=torch.uint8, device=f"cuda:{gpu}")
            mem.dist.broadcast(flat, src=0, group=st["pg"])
            start = 0
            for name, shape, dt, size in zip(arg["names"], arg["shapes"], dtypes, sizes):
                received.append((name, flat[start:start + size].view(dt).reshape(shape)))
                start += size
        else:
            handles = []
            for name, shape, dt in zip(arg["names"], arg["shapes"], dtypes):
                t = torch.empty(shape, dtype=dt, device=f"cuda:{gpu}")
                handles.append(mem.dist.broadcast(t, src=0, group=st["pg"], async_op=True))
                received.append((name, t))
            for h in handles:
                h.wait()
        # The rank's own load time, apart from the receive (the benchmark's engine-bound limit
        # adds it to the wire time): CUDA events around load_weights on GPUs.
        if memory_kind == "cuda":
            received_at = torch.cuda.Event(enable_timing=True)
            received_at.record()
            load_weights(st["params"], received)
            loaded_at = torch.cuda.Event(enable_timing=True)
            loaded_at.record()
            torch.cuda.current_stream().synchronize()
            st["load_ms"].append(received_at.elapsed_time(loaded_at))
        else:
            t0 = time.perf_counter()
            load_weights(st["params"], received)
            st["load_ms"].append((time.perf_counter() - t0) * 1e3)
        corrupt = arg.get("corrupt_tensor")
        if tp_rank == 0 and corrupt and corrupt in arg["names"] and \
                st["params"][corrupt].nbytes:
            flip_first_byte(mem, st["params"][corrupt])
        st["crcs"].clear()
        return "ok"

    def receive_ahead(arg):
        """The data-plane benchmark's receives, posted before the updates that carry them: one
        uint8 broadcast per size, in a thread of the rank, each bucket's CRC-32 kept."""
        if st["pg"] is None or not st["collective_used"]:
            raise RuntimeError("the rank has not joined the collective yet")
        if st["ahead"] is not None:
            st["ahead"].join()
        st["ahead_crcs"] = []

        def run(sizes):
            for n in sizes:
                buf = torch.empty(n, dtype=torch.uint8, device=f"cuda:{gpu}")
                mem.dist.broadcast(buf, src=0, group=st["pg"])
                st["ahead_crcs"].append(tensor_crc(mem, buf))

        st["ahead"] = threading.Thread(target=run, args=(list(arg["sizes"]),), daemon=True)
        st["ahead"].start()
        return len(arg["sizes"])

    def ipc_update(arg):
        die_here("update")
        t0 = time.perf_counter()
        received = ipc_load(arg["serialized_named_tensors"][tp_rank], arg.get("load_format"))
        t1 = time.perf_counter()
        load_weights(st["params"], received)
        t2 = time.perf_counter()
        del received
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        # Where a request's time goes on the rank (the colocated benchmark's profile): decode
        # and map, the copies' launches, and the wait for them; the last 256 requests.
        st["ipc_requests"] += 1
        st["ipc_phases"] = (st["ipc_phases"] + [{
            "map_ms": (t1 - t0) * 1e3, "launch_ms": (t2 - t1) * 1e3,
            "wait_ms": (t3 - t2) * 1e3}])[-256:]
        st["crcs"].clear()
        return "ok"

    class PlainUnpickler(pickle.Unpickler):
        """pickle.loads as the worker's recv_pyobj does it: any global resolves; torch's names
        resolve in the rank's torch (real, or the host backend's)."""

        def find_class(self, module, name):
            if module.startswith("torch"):
                if (module, name) == ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"):
                    return mem.reductions.rebuild_cuda_tensor
                target = torch
                for part in module.split(".")[1:]:
                    target = getattr(target, part)
                return getattr(target, name)
            return super().find_class(module, name)

    def ipc_route(arg):
        import checkpoint_engine_worker
        from zmq_rep import Timeout, rep_socket
        key = f"GPU-{uuid}"
        if key not in arg["zmq_handles"]:
            raise RuntimeError(f"Device UUID {key} not found in zmq_handles: "
                               f"{list(arg['zmq_handles'])}")

        def map_buffer(handle):
            func, args = handle
            args = list(args)
            args[6] = gpu  # _rebuild_ipc: the worker's own device index
            buffer = mem.reductions.rebuild_cuda_tensor(*args)
            if buffer.dtype != torch.uint8 or buffer.dim() != 1:
                raise AssertionError("the buffer must be a 1-D uint8 tensor")
            st["stream_maps"] += 1
            return buffer

        def load(payload, buffer):
            weights = checkpoint_engine_worker.extract(
                payload, buffer.numel(),
                lambda off, n, dtype, shape: buffer[off:off + n].view(dtype).view(shape))
            load_weights(st["params"], weights)
            torch.cuda.synchronize()

        def release(buffer):
            del buffer
            gc.collect()
            torch.cuda.ipc_collect()
            torch.cuda.empty_cache()

        def post_hook():
            st["post_hooks"] += 1

        knobs = arg.get("knobs", {})

        def on_bucket(_):
            # The faults are placed by this rank's bucket count, which rank 0 reports as the
            # engine's updates_received.
            n = st["buckets_seen"]
            st["buckets_seen"] += 1
            die_here("bucket")
            if n == knobs.get("stranger_at_update", -1) and tp_rank == 0:
                arm_stranger(arg.get("stranger_url"))
            if n == knobs.get("die_at_update", -1):
                os._exit(3)
            if n == knobs.get("hang_update_at", -1):
                time.sleep(3600)
            if n == knobs.get("fail_update_at", -1):
                raise RuntimeError(knobs.get("fail_text") or
                                   "CUDA error: an illegal memory access was encountered")

        sock = rep_socket(arg["zmq_handles"][key], timeout_s=120)
        try:
            checkpoint_engine_worker.serve(sock, lambda d: PlainUnpickler(io.BytesIO(d)).load(),
                                           map_buffer, load,
                                           post_hook=post_hook, release=release,
                                           generation=arg["generation"], on_bucket=on_bucket)
        except (checkpoint_engine_worker.WorkerError, Timeout) as e:
            raise RuntimeError(str(e))
        finally:
            sock.close()
        st["crcs"].clear()
        return "ok"

    def bench_receive(arg):
        need = max(arg["sizes"])
        if st["recv_buf"] is None or st["recv_buf"].numel() < need:
            st["recv_buf"] = torch.empty(need, dtype=torch.uint8, device=f"cuda:{gpu}")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for n in arg["sizes"]:
            mem.dist.broadcast(st["recv_buf"][:n], src=0, group=st["pg"])
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def bench_loads(_):
        out = list(st["load_ms"])
        st["load_ms"].clear()
        return out

    def destroy(_):
        if st["pg"] is not None:
            mem.dist.destroy_process_group(st["pg"])
        st["pg"] = None
        return "ok"

    serve_rank(conn, {
        "init": init, "update": update, "ipc_update": ipc_update, "ipc_route": ipc_route,
        "bench_receive": bench_receive, "bench_loads": bench_loads, "destroy": destroy,
        "receive_ahead": receive_ahead, "received": lambda _: list(st["ahead_crcs"]),
        "ipc_phases": lambda _: {"recent": list(st["ipc_phases"]), "count": st["ipc_requests"]},
        "checksums": lambda _: dict(rank_checksums(mem, st["params"], st["crcs"])),
        "stats": lambda _: {"ipc_opens": mem.ipc_opens(), "stream_maps": st["stream_maps"],
                            "post_hooks": st["post_hooks"], "buckets_seen": st["buckets_seen"]},
    })
