#!/usr/bin/env python3
"""A host-mode LMDeploy server (PyTorch backend) for the colocated path: POST /update_weights.

It follows LMDeploy's receive semantics as docs/engines/lmdeploy.md documents them, without torch:
- every POST needs Content-Type: application/json, bodiless /sleep and /wakeup included (400
  otherwise, as LMDeploy's validation handler answers);
- serialized_named_tensors is a base64 pickle, or a list of them where TP rank r takes entry r;
  LMDeploy loads it unrestricted (ForkingPickler.loads). This simulator loads it with an
  allow-list of exact (module, name) pairs instead, so nothing in a payload runs here: torch's
  rebuild_cuda_tensor, Tensor, Size, TypedStorage/UntypedStorage and dtypes, and
  lmdeploy.utils.FlattenedTensorMetadata; anything else fails the request like any exception;
- tensors travel as (func, args) pairs; the worker sets args[6] to its current device and calls
  func(*args); the handle is host mode's shared-memory name NUL-padded to 64 bytes, mapped once
  per (handle, storage offset) and kept, as torch's IPC cache does;
- load_format null: list[(name, (func, args))], each tensor cloned;
- load_format "flattened_bucket": a dict. Empty metadata returns before anything is cached (the
  finished hooks still run). flattened_tensor, when present, is rebuilt and cached (cloned unless
  require_clone is False, which keeps a live view); without it the cached tensor is used, and
  with none cached the call fails. event_ipc_handle, when present, replaces the cached event,
  which is waited on before the read and recorded after the load. Each entry is
  flat[start_idx:end_idx].reshape(shape) in elements, cast to the entry's dtype when the flat
  tensor's differs (a value cast, as .to(dtype) does);
- finished: the modules' post-load hooks run, and the cached tensor and event are dropped;
- the answer is null with HTTP 200; an exception is HTTP 500 "Internal Server Error";
- /sleep?level=1|2 drops the cached tensor and event and puts weights and kv_cache to sleep
  (level 2 discards the weights); /wakeup?tags=... wakes the given tags (none: every sleeping
  one) and does nothing when a tag given is not asleep; /is_sleeping and /health report it.
  Loading while the weights sleep is the hazard of §2: this simulator fails such a load (500) and
  counts it, so a test sees an adapter that forgot to wake the weights.
- GET /openapi.json lists LMDeploy's routes, unless --disable-fastapi-docs (404, as FastAPI).

GET /sim/checksums answers what the SGLang simulators do ({"weight_version", "ranks": {"1":
{name: crc32 hex}}, "updates_received"}; LMDeploy has no weight version, so it is null) plus
flattened_tensor_sent, flattened_arrivals (per cycle, a cycle ending at finished or a sleep:
{"<rank>:<dtype>": how many requests carried flattened_tensor}), finished_calls, casts, ipc_opens, loads_while_asleep, is_sleeping,
sleeping_tags, events (the lifecycle in order) and last_error. POST /sim/knobs sets faults:
fail_update_at / hang_update_at / die_at_update (the n-th /update_weights, from 0) and
refuse_pickle (every /update_weights is refused as PR #4964 would without its opt-in).

  lmdeploy_ipc_sim.py --port P --gpus UUID[,UUID...] [--disable-fastapi-docs] [--no-nccl-routes]
"""

import argparse
import base64
import binascii
import io
import json
import os
import pickle
import sys
import threading
import time
import traceback
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_standins import (DTYPE_SIZES, HANDLE_BYTES, Dtype, ExactNameUnpickler,  # noqa: E402,F401
                            LoadError, ShmMappings)

import numpy as np

NUMPY_DTYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64, "int8": np.int8,
    "uint8": np.uint8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}
METADATA_MODULE = "lmdeploy.utils"

ROUTES = [
    ("/v1/models", "get"), ("/v1/chat/completions", "post"), ("/v1/completions", "post"),
    ("/generate", "post"), ("/health", "get"), ("/terminate", "get"),
    ("/update_weights", "post"), ("/sleep", "post"), ("/wakeup", "post"),
    ("/is_sleeping", "get"), ("/abort_request", "post"),
]
NCCL_ROUTES = [
    ("/init_weights_update_group", "post"), ("/update_weights_from_distributed", "post"),
    ("/destroy_weights_update_group", "post"),
]





class FlattenedTensorMetadata:
    """lmdeploy.utils.FlattenedTensorMetadata: NEWOBJ, then BUILD sets its fields."""



def numel_of(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def cast(data, src, dst):
    """The bytes of `data` (elements of dtype src) as values of dtype dst, as tensor.to() does."""
    def to_f32(raw, name):
        if name == "bfloat16":
            return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        if name not in NUMPY_DTYPES:
            raise LoadError(f"a cast from {name} is not simulated")
        return np.frombuffer(raw, NUMPY_DTYPES[name])
    values = to_f32(data, src.name)
    if dst.name == "bfloat16":
        bits = values.astype(np.float32).view(np.uint32)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        return (rounded >> 16).astype(np.uint16).tobytes()
    if dst.name not in NUMPY_DTYPES:
        raise LoadError(f"a cast to {dst.name} is not simulated")
    return values.astype(NUMPY_DTYPES[dst.name]).tobytes()


class HostTensor:
    """A rebuilt tensor: a live view of a mapping, or a clone of its bytes at one moment."""

    def __init__(self, region, start, dtype, shape):
        self.region, self.start, self.dtype, self.shape = region, start, dtype, tuple(shape)
        self.snapshot = None

    def nbytes(self):
        return numel_of(self.shape) * self.dtype.itemsize

    def data(self):
        if self.snapshot is not None:
            return self.snapshot
        return bytes(self.region[self.start:self.start + self.nbytes()])

    def clone(self):
        c = HostTensor(None, 0, self.dtype, self.shape)
        c.snapshot = self.data()
        return c


class Rank:
    """One TP rank: its device, the mappings it keeps, its cache and the tensors it holds."""

    def __init__(self, gpu_uuid, device):
        self.gpu_uuid = gpu_uuid
        self.device = device
        self.shm = ShmMappings()
        self.tensors = {}  # name -> bytes
        self.ipc_tensor = None  # _update_params_ipc_tensor
        self.ipc_event = None  # _update_params_ipc_event

    def rebuild_cuda_tensor(self, *args):
        region, start, dtype, size = self.shm.rebuild(
            args, ("TypedStorage", "UntypedStorage"), self.check_device)
        return HostTensor(region, start, dtype, size)

    def check_device(self, device):
        if device != self.device:
            raise LoadError("argument 6 is not the worker's current device")

    def construct(self, item, require_clone=True):
        """LMDeploy's _construct: (func, args), args[6] replaced by the current device."""
        func, args = item
        args = list(args)
        args[6] = self.device
        tensor = func(*args)
        return tensor.clone() if require_clone else tensor


class Engine:
    def __init__(self, gpus):
        self.ranks = [Rank(g, i) for i, g in enumerate(gpus)]
        self.lock = threading.Lock()
        self.updates = 0
        self.flattened_tensor_sent = 0
        # flattened_tensor arrivals per cycle (a cycle ends at finished or a sleep, where the
        # worker drops its cache), each {"<rank>:<dtype>": count}.
        self.arrivals = [{}]
        self.finished_calls = 0
        self.casts = 0
        self.loads_while_asleep = 0
        self.sleeping_tags = set()
        self.events = []
        self.last_error = ""
        self.knobs = {"fail_update_at": -1, "hang_update_at": -1, "die_at_update": -1,
                      "refuse_pickle": False}

    def event(self, text):
        self.events.append(text)
        del self.events[:-500]

    def deserialize(self, rank, entry, load_format):
        """The (name, bytes) pairs a rank loads from its entry (agent.py _deserialize_weights)."""
        try:
            data = base64.b64decode(entry, validate=True)
        except (binascii.Error, ValueError, TypeError) as e:
            raise LoadError(f"not base64: {e}")
        # LMDeploy loads with an unrestricted ForkingPickler; the simulator still names what it
        # can stand in for, and refuses the rest.
        weights = ExactNameUnpickler(data, rank.rebuild_cuda_tensor, METADATA_MODULE,
                                     FlattenedTensorMetadata,
                                     storages=("TypedStorage", "UntypedStorage"),
                                     refusal="is not simulated").load()
        if load_format == "flattened_bucket":
            metadata = weights["metadata"]
            if not metadata:
                return []
            if "flattened_tensor" in weights:
                rank.ipc_tensor = rank.construct(weights["flattened_tensor"],
                                                 weights.get("require_clone", True))
                self.flattened_tensor_sent += 1
                key = f"{rank.device}:{rank.ipc_tensor.dtype.name}"
                cycle = self.arrivals[-1]
                cycle[key] = cycle.get(key, 0) + 1
            elif rank.ipc_tensor is None:
                raise ValueError("flattened_tensor is not provided and no cached ipc tensor")
            if "event_ipc_handle" in weights:
                if not isinstance(weights["event_ipc_handle"], bytes) or \
                        len(weights["event_ipc_handle"]) != HANDLE_BYTES:
                    raise LoadError("event_ipc_handle must be 64 bytes")
                rank.ipc_event = weights["event_ipc_handle"]
            flat = rank.ipc_tensor
            if len(flat.shape) != 1:
                raise LoadError("the flattened tensor must be 1-D")
            flat_bytes = flat.data()  # after waiting on the event, if any
            out = []
            for m in metadata:
                if not isinstance(m, FlattenedTensorMetadata):
                    raise LoadError("metadata entries must be FlattenedTensorMetadata")
                if not 0 <= m.start_idx <= m.end_idx <= flat.shape[0]:
                    raise LoadError(f"{m.name}: range {m.start_idx}..{m.end_idx} is outside")
                count = m.end_idx - m.start_idx
                if numel_of(m.shape) != count:
                    raise LoadError(f"{m.name}: cannot reshape {count} elements to {m.shape}")
                unit = flat.dtype.itemsize
                piece = flat_bytes[m.start_idx * unit:m.end_idx * unit]
                if m.dtype.name != flat.dtype.name:
                    piece = cast(piece, flat.dtype, m.dtype)
                    self.casts += 1
                out.append((m.name, piece))
            return out
        if load_format is not None:
            raise LoadError(f"load_format {load_format!r} is not simulated")
        out = []
        for name, item in weights:
            out.append((name, rank.construct(item).data()))
        return out

    def update_params(self, body):
        """agent.py's update_params, on every rank; raises on any failure."""
        load_format = body.get("load_format")
        entries = body["serialized_named_tensors"]
        finished = body.get("finished", False)
        if not isinstance(finished, bool):
            raise LoadError("finished must be a bool")
        loaded = 0
        for r, rank in enumerate(self.ranks):
            entry = entries[r] if isinstance(entries, list) else entries
            weights = self.deserialize(rank, entry, load_format)
            if weights and "weights" in self.sleeping_tags:
                self.loads_while_asleep += 1
                raise LoadError("weights loaded while the engine's weights sleep")
            for name, data in weights:
                rank.tensors[name] = data
            loaded += len(weights)
            if finished:
                # update_weights() hooks, synchronize, drop the cache.
                rank.ipc_tensor = None
                rank.ipc_event = None
        if finished:
            self.finished_calls += 1
            self.new_cycle()
        return loaded, finished

    def new_cycle(self):
        if self.arrivals[-1]:
            self.arrivals.append({})
            del self.arrivals[:-100]

    def sleep(self, level):
        self.sleeping_tags = {"weights", "kv_cache"}
        self.new_cycle()
        for rank in self.ranks:
            rank.ipc_tensor = None
            rank.ipc_event = None
            if level == 2:
                rank.tensors = {}  # weights on the meta device: every one must be sent again
        self.event(f"sleep:{level}")

    def wakeup(self, tags):
        tags = tags or sorted(self.sleeping_tags)
        if any(t not in self.sleeping_tags for t in tags):
            self.event(f"wakeup-ignored:{','.join(tags)}")
            return
        self.sleeping_tags -= set(tags)
        self.event(f"wakeup:{','.join(tags)}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine = None
    openapi = True
    nccl_routes = True

    def log_message(self, fmt, *args):
        sys.stderr.write("lmdeploy_ipc_sim: " + (fmt % args) + "\n")

    def send(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply(self, status, obj):
        self.send(status, json.dumps(obj).encode(), "application/json")

    def error(self, status, message):
        self.reply(status, {"error": {"message": message, "type": "invalid_request_error",
                                      "code": status}})

    def do_GET(self):
        e = self.engine
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/openapi.json" and self.openapi:
            routes = ROUTES + (NCCL_ROUTES if self.nccl_routes else [])
            paths = {path: {method: {"summary": path.strip("/")}} for path, method in routes}
            return self.reply(200, {"openapi": "3.1.0",
                                    "info": {"title": "FastAPI", "version": "0.1.0"},
                                    "paths": paths})
        if url.path == "/health":
            with e.lock:
                status = "sleeping" if e.sleeping_tags else "healthy"
            return self.reply(200, {"status": status})
        if url.path == "/is_sleeping":
            with e.lock:
                return self.reply(200, {"is_sleeping": bool(e.sleeping_tags)})
        if url.path == "/sim/checksums":
            with e.lock:
                ranks = {str(i + 1): {n: format(zlib.crc32(b), "08x") for n, b in r.tensors.items()}
                         for i, r in enumerate(e.ranks)}
                return self.reply(200, {
                    "weight_version": None, "ranks": ranks, "updates_received": e.updates,
                    "flattened_tensor_sent": e.flattened_tensor_sent,
                    "flattened_arrivals": [c for c in e.arrivals if c],
                    "finished_calls": e.finished_calls, "casts": e.casts,
                    "ipc_opens": [r.shm.opens for r in e.ranks],
                    "loads_while_asleep": e.loads_while_asleep,
                    "is_sleeping": bool(e.sleeping_tags),
                    "sleeping_tags": sorted(e.sleeping_tags), "events": e.events,
                    "last_error": e.last_error})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        e = self.engine
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        n = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(n) if n else b""
        if url.path == "/sim/knobs":
            e.knobs.update(json.loads(raw or b"{}"))
            return self.reply(200, e.knobs)
        if url.path not in ("/update_weights", "/sleep", "/wakeup"):
            return self.reply(404, {"detail": "Not Found"})
        media = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            with e.lock:
                e.event(f"refused:{url.path}:content-type")
            return self.error(400, "Unsupported Media Type: Only 'application/json' is allowed")
        if url.path == "/sleep":
            level = query.get("level", ["1"])[-1]
            if level not in ("1", "2"):
                return self.error(400, 'The "level" query parameter must be 1 or 2.')
            with e.lock:
                e.sleep(int(level))
            return self.send(200, b"", "text/plain")
        if url.path == "/wakeup":
            with e.lock:
                e.wakeup(query.get("tags", []))
            return self.send(200, b"", "text/plain")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(
                body.get("serialized_named_tensors"), (str, list, dict)):
            return self.error(400, "serialized_named_tensors: Field required")
        return self.update(body)

    def update(self, body):
        e = self.engine
        with e.lock:
            index = e.updates
            e.updates += 1
        if index == e.knobs["die_at_update"]:
            os._exit(3)
        if index == e.knobs["fail_update_at"]:
            return self.send(500, b"Internal Server Error", "text/plain")
        if index == e.knobs["hang_update_at"]:
            time.sleep(3600)
        if e.knobs["refuse_pickle"]:
            return self.error(400, "Pickle payloads are not accepted on HTTP /update_weights; "
                                   "set LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1 for trusted IPC "
                                   "or use load_format='safetensors'")
        try:
            with e.lock:
                loaded, finished = e.update_params(body)
                e.event(f"update:{loaded}" + (":finished" if finished else ""))
        except Exception as err:  # LMDeploy: any exception is a 500
            with e.lock:
                e.last_error = f"{type(err).__name__}: {err}"
                e.event("update:failed")
            traceback.print_exc()
            return self.send(500, b"Internal Server Error", "text/plain")
        self.send(200, b"null", "application/json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gpus", required=True, help="comma-separated GPU UUIDs, one per rank")
    parser.add_argument("--disable-fastapi-docs", action="store_true",
                        help="serve no /openapi.json, as LMDeploy's flag of that name")
    parser.add_argument("--no-nccl-routes", action="store_true",
                        help="an LMDeploy from before PR #4638")
    args = parser.parse_args()
    Handler.engine = Engine([g for g in args.gpus.split(",") if g])
    Handler.openapi = not args.disable_fastapi_docs
    Handler.nccl_routes = not args.no_nccl_routes
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
