#!/usr/bin/env python3
"""A host-mode SGLang engine for the colocated (IPC) path: POST /update_weights_from_tensor.

It follows SGLang's receive semantics (docs/engines/sglang.md) without torch:
- serialized_named_tensors holds one standard-base64 pickle per TP rank; rank i takes entry i,
  and there must be at least tp_size entries;
- each pickle is loaded by an unpickler that accepts exact (module, name) pairs only, as SGLang's
  SafeUnpickler does since September 2026: torch's rebuild_cuda_tensor, Tensor, Size,
  TypedStorage and dtypes, and sglang.srt.weight_sync.tensor_bucket.FlattenedTensorMetadata;
  anything else (copyreg._reconstructor, a custom class) is refused;
- rebuild_cuda_tensor's 15 arguments are checked as torch would read them; the device must be
  the rank's own GPU UUID (SGLang's patched rebuild maps a UUID to the local device); the handle
  is 64 bytes, here host mode's shared-memory name NUL-padded, opened once per (handle, storage
  offset) and kept, as torch's IPC cache does;
- load_format null takes list[(name, tensor)]; "flattened_bucket" takes {"flattened_tensor",
  "metadata"} and views flat[start_idx:end_idx] as each entry's dtype (uint8 bucket: bytes);
- GET /get_server_info reports --version (default 0.5.6). A version before 0.5.6 reads a
  flattened bucket as SGLang did before PR #13413 (weight_sync/tensor_bucket.py @07e9000):
  flat[start_idx:end_idx] in elements of the flat tensor's own dtype, reshaped to the entry's
  shape (a uint8 bucket of wider dtypes fails there, as torch's reshape would), then cast by value
  to the entry's dtype (stored here as marked bytes, so a checksum shows the garbage);
- the answer is {"success", "message"}, HTTP 200, or HTTP 400 when the load failed.

POST /update_weights_from_ipc (the map-once route, SGLang >= 0.5.5 here; 404 before) follows
SGLang's handler around checkpoint-engine's worker (checkpoint_engine_worker.py, generation
--ce-worker): each rank looks up "GPU-<its uuid>" in zmq_handles (missing: 400), connects a REP
socket there and runs the worker (in a thread, or with --rank-processes in a child process, as
SGLang's scheduler processes are children of the process that serves its HTTP API); frames are plain pickles (no allow-list: torch's names resolve
to stand-ins, builtins' exceptions to themselves); the request answers 200 {"success": true} once
every rank is done, or 400 with the first rank's failure; flush_cache defaults to true.

--sessions makes it a session build (docs/engines/sglang.md): POST /begin_weight_update
{"selector"} and /end_weight_update exist (GET on them: 405), and a weight update outside a session,
or a begin while one is open, kills the process (the scheduler's assert). GET /openapi.json lists
the routes (404 with --no-docs).

GET /sim/checksums answers what the C++ simulator does (CRC-32 per tensor per rank, ranks
numbered from 1) plus ipc_opens, the mappings made, and last_error, why the last load failed (wsyncd
reports an engine's status, not its answer). POST /sim/knobs sets faults. POST
/sim/start_stranger {"wsyncd_pid", "at_update"} starts tests/sim/zmq_stranger.py as the engine's
child, on that wsyncd's sockets; on the map-once route in threads it starts connecting at that
bucket (wsyncd refusing or admitting it before the rank loads the bucket), and POST
/sim/stop_stranger
stops it and answers what it took.

  sglang_ipc_sim.py --port P --gpus UUID[,UUID...] [--version V] [--ce-worker g1|g4]
                    [--rank-processes]
"""

import argparse
import base64
import binascii
import builtins
import io
import json
import os
import pickle
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_standins import (DTYPE_SIZES, Dtype, ExactNameUnpickler,  # noqa: E402,F401
                            LoadError, ShmMappings, Size, TorchClass, check_host_device)
import checkpoint_engine_worker  # noqa: E402
from zmq_rep import Timeout, rep_socket  # noqa: E402

METADATA_MODULE = "sglang.srt.weight_sync.tensor_bucket"





class FlattenedTensorMetadata:
    pass


class HostTensor:
    def __init__(self, data, dtype, shape):
        self.data = data
        self.dtype = dtype
        self.shape = shape



class Rank:
    """One TP rank: its GPU, the mappings it keeps and the tensors it holds."""

    def __init__(self, gpu_uuid):
        self.gpu_uuid = gpu_uuid
        self.shm = ShmMappings()
        self.stream_maps = 0  # buffers mapped on the map-once route
        self.buckets_seen = 0  # bucket frames on the map-once route
        self.post_hooks = 0
        self.tensors = {}  # name -> bytes

    def rebuild_cuda_tensor(self, *args):
        region, start, dtype, size = self.shm.rebuild(args, ("TypedStorage",), self.check_device)
        numel = 1
        for d in size:
            numel *= d
        return HostTensor(bytes(region[start:start + numel * dtype.itemsize]), dtype, size)

    def check_device(self, device):
        if not isinstance(device, str):
            raise LoadError("SGLang's patched reductions expect the device as a GPU UUID string")
        if device != self.gpu_uuid:
            raise LoadError(f"device {device} is not this rank's GPU ({self.gpu_uuid})")


class PlainUnpickler(pickle.Unpickler):
    """pickle.loads as the worker's recv_pyobj does it: any global resolves. torch's names map to
    the stand-ins, builtins to themselves; anything else is a module this engine lacks."""

    def __init__(self, data, rebuild):
        super().__init__(io.BytesIO(data))
        self.names = {("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild,
                      ("torch", "Tensor"): TorchClass("Tensor"), ("torch", "Size"): Size,
                      ("torch.storage", "TypedStorage"): TorchClass("TypedStorage"),
                      ("torch.storage", "UntypedStorage"): TorchClass("UntypedStorage")}
        for name in DTYPE_SIZES:
            self.names[("torch", name)] = Dtype(name)

    def find_class(self, module, name):
        if (module, name) in self.names:
            return self.names[(module, name)]
        if module == "builtins":
            return getattr(builtins, name)
        raise pickle.UnpicklingError(f"No module named '{module}'")


def start_stranger(engine, wsyncd_pid):
    """Starts tests/sim/zmq_stranger.py as a child of the engine's process, on wsyncd
    `wsyncd_pid`'s sockets, held until arm_stranger."""
    import subprocess
    stranger = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "zmq_stranger.py"),
         "--wsyncd-pid", str(wsyncd_pid), "--seconds", "60", "--wait-signal"],
        stdout=subprocess.PIPE, text=True)
    if stranger.stdout.readline().strip() != "ready":
        raise RuntimeError("the stranger did not start")
    with engine.lock:
        engine.stranger = stranger


def arm_stranger(engine):
    """Lets the stranger connect, and waits (up to 10 s) until wsyncd refused or admitted it."""
    import select
    import signal
    with engine.lock:
        stranger = engine.stranger
    if stranger is None:
        return
    stranger.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stranger.stdout], [], [], 0.1)
        if ready and stranger.stdout.readline().startswith(("refused", "admitted")):
            return


def run_ipc_rank(engine, rank, address):
    """One TP rank's worker on the map-once route; returns its failure text or None."""
    def rebuild(*args):
        region, start, dtype, size = rank.shm.rebuild(args, ("TypedStorage", "UntypedStorage"),
                                                      lambda device: None)
        return region, start, dtype, size

    def map_buffer(handle):
        func, args = handle
        args = list(args)
        check_host_device(rank.gpu_uuid, args[7])
        args[6] = 0  # the worker's own device index
        region, start, dtype, size = func(*args)
        if dtype.name != "uint8" or len(size) != 1:
            raise AssertionError("the buffer must be a 1-D uint8 tensor")
        with engine.lock:
            rank.stream_maps += 1
        return (region, start, size[0])

    def load(payload, buffer):
        region, start, length = buffer

        def view(offset, nbytes, dtype, shape):
            return bytes(region[start + offset:start + offset + nbytes])
        weights = checkpoint_engine_worker.extract(payload, length, view)
        with engine.lock:
            for name, data in weights:
                rank.tensors[name] = data

    def release(buffer):
        # ipc_collect: the mapping is dropped, so the next update maps the buffer anew.
        rank.shm.mappings.clear()

    def on_bucket(index):
        # Faults are placed by rank 0's bucket count, which is what updates_received reports.
        with engine.lock:
            n = rank.buckets_seen
            rank.buckets_seen += 1
            if rank is engine.ranks[0]:
                engine.updates += 1
        if n == engine.knobs["stranger_at_update"] and rank is engine.ranks[0]:
            arm_stranger(engine)
        if n == engine.knobs["die_at_update"]:
            os._exit(3)
        if n == engine.knobs["hang_update_at"]:
            time.sleep(3600)
        if n == engine.knobs["fail_update_at"]:
            raise RuntimeError(engine.knobs.get("fail_text") or
                               "CUDA error: an illegal memory access was encountered")

    def post_hook():
        with engine.lock:
            rank.post_hooks += 1

    sock = rep_socket(address, timeout_s=60)
    try:
        checkpoint_engine_worker.serve(
            sock, lambda data: PlainUnpickler(data, rebuild).load(), map_buffer, load,
            post_hook=post_hook, release=release, generation=engine.ce_worker,
            on_bucket=on_bucket)
        return None
    except (checkpoint_engine_worker.WorkerError, Timeout, LoadError,
            pickle.UnpicklingError) as err:
        return str(err)
    finally:
        sock.close()


def _rank_process_main(conn, gpu_uuid, ce_worker, address):
    """A rank's worker in a child process of the engine's (--rank-processes): it runs on an engine
    of its own and sends back what it loaded."""
    engine = Engine([gpu_uuid], ce_worker=ce_worker)
    rank = engine.ranks[0]
    failure = run_ipc_rank(engine, rank, address)
    conn.send((failure, rank.tensors, rank.stream_maps, rank.buckets_seen, rank.post_hooks))
    conn.close()


def run_ipc_rank_process(engine, rank, address):
    """run_ipc_rank in a child process, as SGLang's TP ranks run in its scheduler processes,
    children of the process serving the HTTP API; its results are merged into `rank`. No fault
    knobs apply there."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_rank_process_main, args=(child, rank.gpu_uuid, engine.ce_worker,
                                                        address), daemon=True)
    proc.start()
    child.close()
    try:
        failure, tensors, maps, seen, hooks = parent.recv()
    except EOFError:
        failure, tensors, maps, seen, hooks = "the rank's process died", {}, 0, 0, 0
    proc.join(timeout=10)
    with engine.lock:
        rank.tensors.update(tensors)
        rank.stream_maps += maps
        rank.buckets_seen += seen
        rank.post_hooks += hooks
        if rank is engine.ranks[0]:
            engine.updates += seen
    return failure


def version_tuple(text):
    """(major, minor, patch, release) of a version string; a pre-release sorts before its
    release, a post release with it, as wsyncd's sglang_version.cc reads them."""
    import re
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$", text)
    if not m:
        return (0, 0, 0, 0)
    rest = m.group(4)
    release = rest == "" or rest.startswith("+") or re.match(r"\.?post\d*(\+.*)?$", rest)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), 1 if release else 0)


def load_rank(rank, entry, load_format, uint8_reader=True):
    try:
        data = base64.b64decode(entry, validate=True)
    except (binascii.Error, ValueError) as e:
        raise LoadError(f"not base64: {e}")
    obj = ExactNameUnpickler(data, rank.rebuild_cuda_tensor, METADATA_MODULE,
                             FlattenedTensorMetadata).load()
    loaded = {}
    if load_format is None:
        if not isinstance(obj, list):
            raise LoadError("load_format null expects a list of (name, tensor)")
        for item in obj:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], HostTensor)):
                raise LoadError("load_format null expects a list of (name, tensor)")
            loaded[item[0]] = item[1].data
    elif load_format == "flattened_bucket":
        if not isinstance(obj, dict) or set(obj) != {"flattened_tensor", "metadata"}:
            raise LoadError("flattened_bucket expects {flattened_tensor, metadata}")
        flat = obj["flattened_tensor"]
        if not isinstance(flat, HostTensor) or len(flat.shape) != 1:
            raise LoadError("flattened_tensor must be a 1-D tensor")
        for m in obj["metadata"]:
            if not isinstance(m, FlattenedTensorMetadata):
                raise LoadError("metadata entries must be FlattenedTensorMetadata")
            unit = flat.dtype.itemsize
            if m.end_idx - m.start_idx != m.numel or m.end_idx > flat.shape[0]:
                raise LoadError(f"{m.name}: range {m.start_idx}..{m.end_idx} is not its numel")
            piece = flat.data[m.start_idx * unit:m.end_idx * unit]
            if not uint8_reader:
                # The receiver before PR #13413: elements of the flat tensor's dtype, reshaped,
                # then cast by value.
                numel = 1
                for d in m.shape:
                    numel *= d
                if numel != m.numel:
                    raise LoadError(f"shape '{list(m.shape)}' is invalid for input of size "
                                    f"{m.numel}")
                if m.dtype.name != flat.dtype.name:
                    piece = b"value-cast:" + piece
                loaded[m.name] = piece
                continue
            if flat.dtype.name == "uint8":
                # The receiver since PR #13413: a byte range viewed as the entry's dtype.
                if m.start_idx % m.dtype.itemsize or len(piece) % m.dtype.itemsize:
                    raise LoadError(f"{m.name}: bytes not aligned to {m.dtype.name}")
            elif m.dtype.name != flat.dtype.name:
                raise LoadError(f"{m.name}: a {m.dtype.name} entry in a {flat.dtype.name} bucket")
            numel = 1
            for d in m.shape:
                numel *= d
            if numel * m.dtype.itemsize != len(piece):
                raise LoadError(f"{m.name}: shape {tuple(m.shape)} does not fit its bytes")
            loaded[m.name] = piece
    else:
        raise LoadError(f"load_format {load_format!r} is not simulated")
    rank.tensors.update(loaded)


class Engine:
    def __init__(self, gpus, version="0.5.6", ce_worker="g4", sessions=False, no_docs=False,
                 rank_processes=False):
        self.version = version
        self.rank_processes = rank_processes
        self.sessions = sessions
        self.no_docs = no_docs
        self.session_open = False
        self.session_log = []  # "begin <selector>", "end", "update selector=<s>" in order
        self.ce_worker = ce_worker
        self.ipc_route_bodies = []  # the map-once route's bodies, zmq_handles left out
        self.uint8_reader = version_tuple(version) >= (0, 5, 6, 1)
        self.ranks = [Rank(g) for g in gpus]
        self.lock = threading.Lock()
        self.weight_version = "default"
        self.paused = False
        self.updates = 0
        self.last_error = ""
        self.knobs = {"fail_update_at": -1, "hang_update_at": -1, "die_at_update": -1,
                      "stranger_at_update": -1}
        self.stranger = None  # the process /sim/start_stranger started
        # SGLang's offload_tags: what release_memory_occupation released and no resume brought
        # back. Resuming a tag not released raises (KeyError from set.remove), as SGLang does.
        self.offload_tags = set()
        self.memory_calls = []  # (route, tags) in order
        self.flushes_by_route = 0  # flush_cache true on the map-once route


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine = None

    def log_message(self, fmt, *args):
        sys.stderr.write("sglang_ipc_sim: " + (fmt % args) + "\n")

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return None

    def do_GET(self):
        e = self.engine
        if self.path == "/health":
            return self.reply(200, {})
        if self.path == "/get_server_info":
            return self.reply(200, {"version": e.version, "tp_size": len(e.ranks),
                                    "dp_size": 1, "pp_size": 1,
                                    "weight_version": e.weight_version, "simulator": True})
        if self.path == "/openapi.json":
            if e.no_docs:
                return self.reply(404, {"detail": "Not Found"})
            posts = ["/update_weights_from_tensor", "/update_weights_from_ipc", "/pause_generation",
                     "/continue_generation", "/update_weight_version", "/flush_cache",
                     "/release_memory_occupation", "/resume_memory_occupation"]
            if e.sessions:
                posts += ["/begin_weight_update", "/end_weight_update"]
            paths = {p: {"post": {"summary": p}} for p in posts}
            paths["/get_server_info"] = {"get": {"summary": "server info"}}
            return self.reply(200, {"openapi": "3.1.0", "info": {"title": "FastAPI"},
                                    "paths": paths})
        if self.path in ("/begin_weight_update", "/end_weight_update") and e.sessions:
            return self.reply(405, {"detail": "Method Not Allowed"})
        if self.path == "/sim/checksums":
            with e.lock:
                ranks = {str(i + 1): {n: format(zlib.crc32(b), "08x") for n, b in r.tensors.items()}
                         for i, r in enumerate(e.ranks)}
                return self.reply(200, {"weight_version": e.weight_version, "ranks": ranks,
                                        "updates_received": e.updates, "paused": e.paused,
                                        "ipc_opens": [r.shm.opens for r in e.ranks],
                                        "offload_tags": sorted(e.offload_tags),
                                        "memory_calls": e.memory_calls,
                                        "stream_maps": [r.stream_maps for r in e.ranks],
                                        "post_hooks": [r.post_hooks for r in e.ranks],
                                        "ipc_route_bodies": e.ipc_route_bodies,
                                        "flushes_by_route": e.flushes_by_route,
                                        "session_open": e.session_open,
                                        "session_log": e.session_log,
                                        "last_error": e.last_error})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        e = self.engine
        body = self.body()
        if body is None:
            return self.reply(400, {"success": False, "message": "invalid JSON"})
        if self.path in ("/update_weights_from_tensor", "/update_weights_from_ipc"):
            if e.sessions:
                with e.lock:
                    if not e.session_open:
                        sys.stderr.write("sglang_ipc_sim: AssertionError: weight update outside a "
                                         "session (the scheduler dies)\n")
                        os._exit(6)
                    e.session_log.append(f"update selector={body.get('selector', '(none)')}")
            if self.path == "/update_weights_from_tensor":
                return self.update(body)
            return self.update_from_ipc(body)
        if self.path == "/begin_weight_update" and e.sessions:
            with e.lock:
                if e.session_open:
                    sys.stderr.write("sglang_ipc_sim: AssertionError: a weight update session is "
                                     "already open (the scheduler dies)\n")
                    os._exit(6)
                e.session_open = True
                e.session_log.append(f"begin {body.get('selector', '?')}")
            return self.reply(200, {"success": True, "message": "Weight update session started."})
        if self.path == "/end_weight_update" and e.sessions:
            with e.lock:
                if not e.session_open:
                    return self.reply(400, {"success": False,
                                            "message": "No weight update session is open."})
                e.session_open = False
                e.session_log.append("end")
            return self.reply(200, {"success": True, "message": "Weight update session ended."})
        if self.path == "/pause_generation":
            e.paused = True
            return self.reply(200, {"message": "Generation paused successfully.", "status": "ok"})
        if self.path == "/continue_generation":
            e.paused = False
            return self.reply(200, {"message": "Generation continued successfully.",
                                    "status": "ok"})
        if self.path == "/update_weight_version":
            if "new_version" not in body:
                return self.reply(400, {"success": False, "message": "new_version is required"})
            e.weight_version = body["new_version"]
            return self.reply(200, {"success": True, "message": "Weight version updated",
                                    "new_version": e.weight_version})
        if self.path == "/flush_cache":
            body = b"Cache flushed.\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return self.wfile.write(body)
        if self.path in ("/release_memory_occupation", "/resume_memory_occupation"):
            return self.memory(self.path, body)
        if self.path == "/sim/knobs":
            e.knobs.update(body)
            return self.reply(200, e.knobs)
        if self.path == "/sim/start_stranger":
            start_stranger(e, body["wsyncd_pid"])
            e.knobs["stranger_at_update"] = body["at_update"]
            return self.reply(200, {})
        if self.path == "/sim/stop_stranger":
            # What the stranger took, as it reports it at SIGTERM; {} if none was started.
            with e.lock:
                stranger, e.stranger = e.stranger, None
            if stranger is None:
                return self.reply(200, {})
            stranger.terminate()
            out, _ = stranger.communicate(timeout=20)
            return self.reply(200, json.loads(out.strip().splitlines()[-1]))
        self.reply(404, {"detail": "Not Found"})

    def memory(self, path, body):
        """SGLang's release/resume by tag: null or [] means every tag; release asserts that no
        request is live (the simulator has none); both answer null."""
        e = self.engine
        tags = body.get("tags") or ["weights", "kv_cache", "cuda_graph"]
        with e.lock:
            e.memory_calls.append([path.strip("/"), body.get("tags")])
            if path == "/release_memory_occupation":
                e.offload_tags.update(tags)
            else:
                missing = [t for t in tags if t not in e.offload_tags]
                if missing:
                    return self.reply(500, {"detail": f"KeyError: {missing[0]!r}"})
                e.offload_tags.difference_update(tags)
        body = b"null"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def update(self, body):
        e = self.engine
        if "weights" in e.offload_tags:
            # Loading into released weight memory: a real engine faults on the GPU.
            return self.reply(500, {"detail": "the weights' memory is released"})
        with e.lock:
            index = e.updates
            e.updates += 1
        if index == e.knobs["die_at_update"]:
            os._exit(3)
        if index == e.knobs["fail_update_at"]:
            return self.reply(500, {"detail": "Internal Server Error"})
        if index == e.knobs["hang_update_at"]:
            time.sleep(3600)
        entries = body.get("serialized_named_tensors")
        if not isinstance(entries, list) or len(entries) < len(e.ranks):
            return self.reply(400, {"success": False, "message":
                                    f"serialized_named_tensors needs {len(e.ranks)} entries"})
        try:
            with e.lock:
                for rank, entry in zip(e.ranks, entries):
                    load_rank(rank, entry, body.get("load_format"), e.uint8_reader)
        except (LoadError, pickle.UnpicklingError, OSError, KeyError, TypeError,
                AttributeError) as err:
            e.last_error = str(err)
            return self.reply(400, {"success": False,
                                    "message": f"Failed to update weights: {err}"})
        self.reply(200, {"success": True, "message": "Succeeded to update parameter online."})


def update_from_ipc(self, body):
    """SGLang's /update_weights_from_ipc: every rank runs checkpoint-engine's worker at once, and
    the request answers once all have returned."""
    e = self.engine
    if version_tuple(e.version) < (0, 5, 5, 1):
        return self.reply(404, {"detail": "Not Found"})
    if "weights" in e.offload_tags:
        return self.reply(500, {"detail": "the weights' memory is released"})
    handles = body.get("zmq_handles")
    if not isinstance(handles, dict):
        return self.reply(400, {"success": False, "message": "zmq_handles is required"})
    with e.lock:
        e.ipc_route_bodies.append({k: v for k, v in body.items() if k != "zmq_handles"})
    failures = [None] * len(e.ranks)

    def run(i, rank):
        key = "GPU-" + rank.gpu_uuid
        if key not in handles:
            failures[i] = f"Device UUID {key} not found in zmq_handles: {list(handles)}"
            return
        run_rank = run_ipc_rank_process if e.rank_processes else run_ipc_rank
        failures[i] = run_rank(e, rank, handles[key])
    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(e.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [f for f in failures if f]
    if failed:
        e.last_error = failed[0]
        return self.reply(400, {"success": False, "message": failed[0]})
    with e.lock:
        if body.get("flush_cache", True):
            e.flushes_by_route += 1
        if body.get("weight_version") is not None:
            e.weight_version = body["weight_version"]
    self.reply(200, {"success": True, "message": "IPC weight update completed successfully"})


Handler.update_from_ipc = update_from_ipc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gpus", required=True, help="comma-separated GPU UUIDs, one per rank")
    parser.add_argument("--version", default="0.5.6",
                        help="what /get_server_info reports; before 0.5.6, the old flattened "
                             "reader")
    parser.add_argument("--ce-worker", default="g4",
                        choices=checkpoint_engine_worker.GENERATIONS,
                        help="the checkpoint-engine worker generation on the map-once route")
    parser.add_argument("--sessions", action="store_true",
                        help="a session build: updates only inside begin/end, or the process dies")
    parser.add_argument("--no-docs", action="store_true", help="serve no /openapi.json")
    parser.add_argument("--rank-processes", action="store_true",
                        help="run each rank's map-once worker in a child process, as SGLang's "
                             "scheduler processes do (no fault knobs there)")
    args = parser.parse_args()
    Handler.engine = Engine([g for g in args.gpus.split(",") if g], args.version, args.ce_worker,
                            args.sessions, args.no_docs, args.rank_processes)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
