#!/usr/bin/env python3
"""A host-mode vLLM server for the colocated path: native weight transfer, IPC backend.

It follows vLLM's receive semantics as docs/engines/vllm.md documents them, without torch:
- GET /version answers the version given (--version, or the knob "version"), and the server
  behaves as that generation does:
    < 0.17.0  no IPC weight transfer (the weight-transfer routes answer 404);
    >= 0.17.0 entries (rebuild_cuda_tensor, ARGS): the worker calls func(*args); no session
              routes (404); update_info has names, dtype_names, shapes, ipc_handles(_pickled);
    >= 0.22.0 entries are the 15 ARGS alone (the worker imports rebuild_cuda_tensor itself);
              /start_weight_update and /finish_weight_update exist, and every call out of
              order answers 409 (start while open, update or finish while none is open);
              packed: ONE dict {uuid: ARGS} for a uint8 chunk plus tensor_sizes, packed,
              first_chunk, last_chunk;
    >= 0.29.0 /finish_weight_update reads {"weight_version"}.
  A pre-release (rc, dev) orders before its release. update_info keys the generation does not
  know fail the dataclass constructor (TypeError: HTTP 500), as vLLM's do.
- ipc_handles_pickled is plain base64 of a pickle, which vLLM loads with pickle.loads (behind
  VLLM_ALLOW_INSECURE_SERIALIZATION=1, the knob "insecure_serialization"). This simulator loads
  it through torch_standins' exact-name unpickler instead, so the payload may name torch's own
  GLOBALs only and nothing in it runs here.
- Each TP rank picks entry[its own GPU UUID]; a dict without it kills the engine (hazard 4.5,
  #57853: every later call answers 500 and /health 503), as does an update posted while the
  engine's weights sleep (EngineCore segfault). args[6] is overwritten with the rank's device
  index; the handle is host mode's shared-memory name NUL-padded to 64 bytes, mapped once per
  (handle, storage offset) and kept, as torch's IPC cache does. Every tensor is cloned.
- Packed: tensor_sizes bytes are cut back to back from the chunk's start, each viewed as its dtype
  (the byte offset must be a multiple of the item size, as torch's view(dtype) requires) and
  reshaped; sum(tensor_sizes) may not exceed the chunk.
- /pause?mode=keep|wait|abort (400 otherwise), /resume, /is_paused; /sleep?level=, /wake_up?tags=
  (none: all), /is_sleeping; /reset_prefix_cache; /init_weight_transfer_engine {"init_info"} (400
  without it); /health.

GET /sim/state answers {"ranks": {"0": {name: crc32 hex}}, "weight_version", "requests" (every
request as {"method", "path" with its query, "body"}, /sim/* left out), "updates_received",
"ipc_opens", "dead", "session_open", "paused", "sleeping_tags", "last_error"}. POST /sim/knobs
sets: version, insecure_serialization, fail_update_at (HTTP 500), die_at_update (the process
exits), hang_update_at, conflict_update_at (HTTP 409) — each the n-th /update_weights, from 0.

  vllm_ipc_sim.py --port P --gpus UUID[,UUID...] [--version 0.22.1]
"""

import argparse
import base64
import binascii
import json
import os
import re
import sys
import threading
import time
import traceback
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_standins import (DTYPE_SIZES, ExactNameUnpickler, LoadError,  # noqa: E402
                            ShmMappings)

BASE_FIELDS = {"names", "dtype_names", "shapes", "ipc_handles"}
PACKED_FIELDS = {"tensor_sizes", "packed", "first_chunk", "last_chunk"}


class NoMetadata:
    """vLLM's IPC pickle holds no FlattenedTensorMetadata; the unpickler's slot for it."""


def parse_version(text):
    """(major, minor, patch, is_release) of vLLM's version string, PEP 440 order."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$", text.strip())
    if not m:
        raise ValueError(f"unreadable version {text!r}")
    rest = m.group(4)
    release = m.group(3) is not None and (rest == "" or rest.startswith("+"))
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), release


def at_least(version, want):
    major, minor, patch, release = parse_version(version)
    have = (major, minor, patch)
    return have > want or (have == want and release)


def numel_of(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Dead(Exception):
    """The engine died (hazard 4.5): the request answers 500 and so does everything after."""


class Rank:
    def __init__(self, gpu_uuid, device):
        self.gpu_uuid = gpu_uuid
        self.device = device
        self.shm = ShmMappings()
        self.tensors = {}

    def check_device(self, device):
        if device != self.device:
            raise LoadError("argument 6 is not the worker's device index")

    def rebuild_cuda_tensor(self, *args):
        """torch.multiprocessing.reductions.rebuild_cuda_tensor: (region, start, dtype, size)."""
        return self.shm.rebuild(args, ("TypedStorage", "UntypedStorage"), self.check_device)


class Engine:
    def __init__(self, gpus, version):
        self.ranks = [Rank(g, i) for i, g in enumerate(gpus)]
        self.lock = threading.Lock()
        self.version = version
        self.requests = []
        self.updates = 0
        self.session_open = False
        self.paused = False
        self.sleeping_tags = set()
        self.weight_version = None
        self.dead = False
        self.last_error = ""
        self.knobs = {"insecure_serialization": True, "fail_update_at": -1, "die_at_update": -1,
                      "hang_update_at": -1, "conflict_update_at": -1}

    # --- generations -------------------------------------------------------------------------
    def has_ipc(self):
        return at_least(self.version, (0, 17, 0))

    def args_only(self):
        return at_least(self.version, (0, 22, 0))

    def has_sessions(self):
        return at_least(self.version, (0, 22, 0))

    def reads_weight_version(self):
        return at_least(self.version, (0, 29, 0))

    # --- receive ---------------------------------------------------------------------------
    def unpickle(self, rank, pickled):
        try:
            data = base64.b64decode(pickled)
        except (binascii.Error, ValueError, TypeError) as e:
            raise LoadError(f"ipc_handles_pickled is not base64: {e}")
        return ExactNameUnpickler(data, rank.rebuild_cuda_tensor, "vllm.none", NoMetadata,
                                  storages=("TypedStorage", "UntypedStorage"),
                                  refusal="is not simulated").load()

    def own_entry(self, rank, handle):
        if not isinstance(handle, dict):
            raise LoadError("an IPC handle entry is not a dict keyed by GPU UUID")
        if rank.gpu_uuid not in handle:
            # ValueError in the worker: vLLM's engine dies with every tensor on meta (#57853).
            raise Dead(f"IPC handle not found for GPU UUID {rank.gpu_uuid}. "
                       f"Available UUIDs: {list(handle.keys())}")
        return handle[rank.gpu_uuid]

    def rebuild(self, rank, entry):
        if self.args_only():
            args = entry
            if not isinstance(args, tuple) or len(args) < 7:
                raise LoadError("the entry is not rebuild_cuda_tensor's argument tuple")
            args = list(args)
            args[6] = rank.device
            return rank.rebuild_cuda_tensor(*args)
        if not isinstance(entry, tuple) or len(entry) != 2:
            raise LoadError("the entry is not a (func, args) pair")
        func, args = entry
        if not callable(func):
            raise LoadError("the entry's func is not callable")
        args = list(args)
        args[6] = rank.device
        return func(*args)

    def receive(self, info):
        """receive_weights on every rank; returns the names loaded."""
        allowed = set(BASE_FIELDS) | (PACKED_FIELDS if self.args_only() else set())
        fields = dict(info)
        pickled = fields.pop("ipc_handles_pickled", None)
        if pickled is not None:
            if "ipc_handles" in fields:
                raise ValueError("Cannot specify both `ipc_handles` and `ipc_handles_pickled`")
            if not self.knobs["insecure_serialization"]:
                raise ValueError("Refusing to deserialize `ipc_handles_pickled` without "
                                 "VLLM_ALLOW_INSECURE_SERIALIZATION=1")
        unknown = set(fields) - allowed
        if unknown:
            raise TypeError(f"__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        names, dtypes, shapes = info["names"], info["dtype_names"], info["shapes"]
        if not (len(names) == len(dtypes) == len(shapes)):
            raise ValueError("names, dtype_names and shapes differ in length")
        packed = bool(fields.get("packed", False))
        if packed and fields.get("tensor_sizes") is None:
            raise ValueError("`tensor_sizes` is required when packed=True")
        if "weights" in self.sleeping_tags:
            raise Dead("update_weights while the weights sleep: EngineCore segfault (#57853)")
        staged = []
        for rank in self.ranks:
            handles = self.unpickle(rank, pickled)
            if packed:
                region, start, dtype, size = self.rebuild(rank, self.own_entry(rank, handles))
                if dtype.name != "uint8" or len(size) != 1:
                    raise LoadError("a packed chunk is a 1-D uint8 tensor")
                sizes = fields["tensor_sizes"]
                if len(sizes) != len(names) or sum(sizes) > size[0]:
                    raise LoadError("tensor_sizes do not fit the chunk")
                offset = 0
                for name, dname, shape, nbytes in zip(names, dtypes, shapes, sizes):
                    item = DTYPE_SIZES[dname]
                    if offset % item or nbytes != numel_of(shape) * item:
                        raise LoadError(f"{name}: cannot view {nbytes} bytes at {offset} "
                                        f"as {dname}{list(shape)}")
                    staged.append((rank, name, bytes(region[start + offset:start + offset + nbytes])))
                    offset += nbytes
            else:
                if not isinstance(handles, list) or len(handles) != len(names):
                    raise ValueError("`ipc_handles` should be of the same size as `names`")
                for name, dname, shape, handle in zip(names, dtypes, shapes, handles):
                    region, start, dtype, size = self.rebuild(rank, self.own_entry(rank, handle))
                    if dtype.name != dname or list(size) != list(shape):
                        raise LoadError(f"{name}: rebuilt as {dtype.name}{list(size)}, "
                                        f"declared {dname}{list(shape)}")
                    nbytes = numel_of(size) * dtype.itemsize
                    staged.append((rank, name, bytes(region[start:start + nbytes])))  # clone
        for rank, name, data in staged:
            rank.tensors[name] = data
        return names


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine = None

    def log_message(self, fmt, *args):
        sys.stderr.write("vllm_ipc_sim: " + (fmt % args) + "\n")

    def send(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply(self, status, obj):
        self.send(status, json.dumps(obj).encode())

    def detail(self, status, text):
        self.reply(status, {"detail": text})

    def record(self, method, url, raw):
        if url.path.startswith("/sim/"):
            return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = "<not json>"
        if isinstance(body, dict) and isinstance(body.get("update_info"), dict):
            info = dict(body["update_info"])
            if "ipc_handles_pickled" in info:
                info["ipc_handles_pickled"] = len(info["ipc_handles_pickled"])
            body = {"update_info": info}
        path = url.path + ("?" + url.query if url.query else "")
        with self.engine.lock:
            self.engine.requests.append({"method": method, "path": path, "body": body})
            del self.engine.requests[:-2000]

    def do_GET(self):
        e = self.engine
        url = urllib.parse.urlsplit(self.path)
        self.record("GET", url, b"")
        if url.path == "/sim/state":
            with e.lock:
                return self.reply(200, {
                    "ranks": {str(i): {n: format(zlib.crc32(b), "08x")
                                       for n, b in r.tensors.items()}
                              for i, r in enumerate(e.ranks)},
                    "weight_version": e.weight_version, "requests": e.requests,
                    "updates_received": e.updates, "ipc_opens": [r.shm.opens for r in e.ranks],
                    "dead": e.dead, "session_open": e.session_open, "paused": e.paused,
                    "sleeping_tags": sorted(e.sleeping_tags), "last_error": e.last_error})
        if url.path == "/version":
            return self.reply(200, {"version": e.version})
        if url.path == "/health":
            return self.send(503 if e.dead else 200, b"")
        if e.dead:
            return self.send(500, b"Internal Server Error", "text/plain")
        if url.path == "/is_sleeping":
            return self.reply(200, {"is_sleeping": bool(e.sleeping_tags)})
        if url.path == "/is_paused":
            return self.reply(200, {"is_paused": e.paused})
        self.detail(404, "Not Found")

    def do_POST(self):
        e = self.engine
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        n = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(n) if n else b""
        self.record("POST", url, raw)
        if url.path == "/sim/knobs":
            with e.lock:
                e.knobs.update(json.loads(raw or b"{}"))
                if "version" in e.knobs:
                    e.version = e.knobs.pop("version")
            return self.reply(200, e.knobs)
        if e.dead:
            return self.send(500, b"Internal Server Error", "text/plain")
        weight_routes = {"/init_weight_transfer_engine", "/update_weights"}
        session_routes = {"/start_weight_update", "/finish_weight_update"}
        if (url.path in weight_routes and not e.has_ipc()) or \
                (url.path in session_routes and not e.has_sessions()):
            return self.detail(404, "Not Found")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return self.detail(400, "body is not JSON")
        if url.path == "/init_weight_transfer_engine":
            if not isinstance(body, dict) or "init_info" not in body:
                return self.detail(400, "Missing 'init_info' in request body")
            return self.reply(200, {"message": "Weight transfer initialized"})
        if url.path == "/start_weight_update":
            with e.lock:
                if e.session_open:
                    return self.detail(409, "start_weight_update: a weight update is open")
                e.session_open = True
            return self.reply(200, {"message": "Weight update started"})
        if url.path == "/finish_weight_update":
            with e.lock:
                if not e.session_open:
                    return self.detail(409, "finish_weight_update: no weight update is open")
                e.session_open = False
                if e.reads_weight_version() and isinstance(body, dict) and \
                        body.get("weight_version") is not None:
                    e.weight_version = body["weight_version"]
            return self.reply(200, {"message": "Weight update finished"})
        if url.path == "/update_weights":
            return self.update(body)
        if url.path == "/pause":
            mode = query.get("mode", ["abort"])[-1]
            if mode not in ("abort", "wait", "keep"):
                return self.detail(400, f"invalid mode {mode!r}")
            with e.lock:
                e.paused = True
            return self.reply(200, {"status": "paused"})
        if url.path == "/resume":
            with e.lock:
                e.paused = False
            return self.reply(200, {"status": "resumed"})
        if url.path == "/sleep":
            with e.lock:
                e.sleeping_tags = {"weights", "kv_cache"}
            return self.send(200, b"")
        if url.path == "/wake_up":
            with e.lock:
                tags = query.get("tags") or ["weights", "kv_cache"]
                e.sleeping_tags -= set(tags)
            return self.send(200, b"")
        if url.path == "/reset_prefix_cache":
            return self.send(200, b"")
        self.detail(404, "Not Found")

    def update(self, body):
        e = self.engine
        if not isinstance(body, dict) or not isinstance(body.get("update_info"), dict):
            return self.detail(400, "Missing 'update_info' in request body")
        with e.lock:
            index = e.updates
            e.updates += 1
            if e.has_sessions() and not e.session_open:
                return self.detail(409, "update_weights: no weight update is open")
        if index == e.knobs["die_at_update"]:
            os._exit(3)
        if index == e.knobs["hang_update_at"]:
            time.sleep(3600)
        if index == e.knobs["fail_update_at"]:
            return self.send(500, b"Internal Server Error", "text/plain")
        if index == e.knobs["conflict_update_at"]:
            return self.detail(409, "update_weights: out of order")
        try:
            with e.lock:
                e.receive(body["update_info"])
        except Dead as err:
            with e.lock:
                e.dead = True
                e.last_error = f"engine died: {err}"
            return self.send(500, b"Internal Server Error", "text/plain")
        except Exception as err:  # vLLM: an exception in the workers is a 500
            with e.lock:
                e.last_error = f"{type(err).__name__}: {err}"
            traceback.print_exc()
            if isinstance(err, ValueError) and "INSECURE" in str(err):
                return self.detail(400, str(err))
            return self.send(500, b"Internal Server Error", "text/plain")
        self.reply(200, {"message": "Weights updated"})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gpus", required=True, help="comma-separated GPU UUIDs, one per rank")
    parser.add_argument("--version", default="0.22.1", help="what GET /version answers")
    args = parser.parse_args()
    parse_version(args.version)
    Handler.engine = Engine([g for g in args.gpus.split(",") if g], args.version)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
