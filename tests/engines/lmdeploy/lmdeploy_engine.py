#!/usr/bin/env python3
"""LMDeploy's API server (PyTorch backend) as wsyncd sees it: one simulator, two memory backends
(tests/sim/memory.py). `--memory host` keeps the ranks' tensors in host memory and maps wsyncd's
shared-memory slots (CI, no torch); `--memory cuda` holds them on real GPUs with real torch and
reads wsyncd's slots through CUDA IPC (the device runs). One process per TP rank either way,
running the same receive code; what the code relies on is written in docs/engines/lmdeploy.md.

POST /update_weights follows the worker's update_params after PR #4397:
- every POST needs Content-Type: application/json, the bodiless /sleep and /wakeup included (400
  otherwise, as LMDeploy's validation handler answers);
- serialized_named_tensors is a base64 pickle, or a list of them where TP rank r takes entry r;
  LMDeploy loads it with an unrestricted ForkingPickler; here an unpickler of exact (module, name)
  pairs admits only what that path carries: torch's rebuild_cuda_tensor, Tensor, Size,
  TypedStorage/UntypedStorage, dtypes and lmdeploy.utils.FlattenedTensorMetadata; anything else
  fails the request;
- tensors travel as (func, args); the worker sets args[6] to its current device and calls
  func(*args);
- load_format null: list[(name, (func, args))], each tensor cloned, then loaded;
- load_format "flattened_bucket": a dict. Empty metadata returns before anything is cached.
  flattened_tensor, when present, is rebuilt and cached as the rank's ipc tensor, cloned unless
  require_clone is False (forced True when event_ipc_handle comes and torch has no
  Event.from_ipc_handle), which keeps a live view of wsyncd's buffer; without it the cached
  tensor is used, and with none cached the call fails (ValueError). event_ipc_handle, when
  present, replaces the cached event, waited on before the read and recorded after the load.
  Each entry is flat[start_idx:end_idx].reshape(shape), then .to(dtype) if the dtypes differ;
- finished: the post-load hooks (none here), a synchronize, and the cache dropped;
- the answer is null with HTTP 200; an exception is HTTP 500 "Internal Server Error";
- --refuse-pickle: every /update_weights is refused with PR #4964's 400.
/sleep?level=1|2 drops the cache, moves the parameters to host memory (level 2: drops them; every
one must come again) and puts weights and kv_cache to sleep; /wakeup?tags=... wakes those tags
(none: every sleeping one; a tag not asleep: nothing happens); loading while the weights sleep
fails (500) and is counted. GET /openapi.json lists the routes (LMDeploy has no version route;
404 with --disable-fastapi-docs), /health and /is_sleeping report the state.

The NCCL path (PR #4638; absent with --no-nccl-routes, 501 with --backend-501 as on turbomind):
POST /init_weights_update_group {master_address, master_port, rank_offset, world_size,
group_name (required), backend} makes every rank join through SGLang's helper (tcp:// TCPStore,
PrefixStore(group_name), ProcessGroupNCCL, or the host collective) as rank rank_offset + tp_rank;
a name already held is refused. POST /update_weights_from_distributed {names, dtypes, shapes,
group_name, load_format, finished}: "flattened_bucket" is FlattenedTensorBucket (ValueError on
mixed dtypes) and one broadcast of the element-typed concatenation, split by numel; null is one
async broadcast per tensor; names may be empty (finish only). POST
/destroy_weights_update_group {group_name}. They answer {success, message}, 200 or 400.

flattened_tensor is counted per cycle (a cycle ends with a `finished` request, one weight
version, or at a sleep, where the worker drops its cache), per GPU and dtype, beside the layout's
floor: the arrivals a sender that sends it only when it must would make (the first non-empty call
of the cycle and each call whose buffer or dtype differs from the previous call's). GET
/sim/flattened answers {"cycles": [{"cycle", "finished", "requests", "counts": {"<gpu
uuid>/<dtype>": {"arrivals", "floor", "calls", "buffers"}}}]}; each finished cycle is logged.

GET /sim/checksums: {"weight_version": null, "ranks": {"<global rank>": {name: crc32 hex}},
"digests", "updates_received", "flattened_tensor_sent", "flattened_arrivals" (per cycle,
{"<device>:<dtype>": arrivals}), "finished_calls", "casts", "ipc_opens" (per rank, host memory
only), "loads_while_asleep", "is_sleeping", "sleeping_tags", "events" (the lifecycle in order),
"group", "last_error"}. POST /sim/knobs sets fail_update_at / hang_update_at / die_at_update
(the n-th weight update, from 0), refuse_pickle, and the answers' delivery (engine_common.py).

  lmdeploy_engine.py --port P --gpus G[,G...] [--memory host|cuda] [--disable-fastapi-docs]
                     [--no-nccl-routes] [--backend-501] [--die-at-update N] [--refuse-pickle]
(--gpus: device indexes; host memory also takes host mode's stand-in GPU UUIDs.)
"""

import argparse
import base64
import json
import os
import sys
import threading
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sim"))
import memory as memories  # noqa: E402
from engine_common import (FifoLock, JsonReplies, RankPool, add_engine_flags,  # noqa: E402
                           digest_of, exact_name_unpickler, gpus_of, load_weights, next_update,
                           rank_checksums, ranks_and_stats, serve, serve_rank, sleep_params,
                           stamp, unpickle, wake_params)

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
NCCL_PATHS = tuple(path for path, _ in NCCL_ROUTES)
REFUSE_PICKLE = ("Pickle payloads are not accepted on HTTP /update_weights; set "
                 "LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1 for trusted IPC or use "
                 "load_format='safetensors'")


class FlattenedTensorMetadata:
    """lmdeploy.utils.FlattenedTensorMetadata (a dataclass: NEWOBJ, then BUILD sets its six
    fields name, shape, dtype, start_idx, end_idx, numel)."""


class RankState:
    def __init__(self):
        self.params = {}
        self.crcs = {}
        self.ipc_tensor = None  # LMDeploy's _update_params_ipc_tensor
        self.ipc_event = None  # _update_params_ipc_event
        # Which buffer the cached tensor was rebuilt from: "<crc32 of the whole 64-byte IPC
        # handle>+<storage offset>". A prefix of the handle does not tell allocations apart (the
        # first H100 run read wsyncd's two slots as one buffer by their first 8 bytes).
        self.ipc_key = None
        self.casts = 0
        self.groups = {}  # group_name -> process group (the NCCL path)


def rank_main(gpu, tp_rank, conn, memory_kind):
    mem = memories.load(memory_kind)
    torch = mem.torch
    torch.cuda.set_device(gpu)
    uuid = mem.device_uuid(gpu)
    unpickler = exact_name_unpickler(
        torch, mem.reductions.rebuild_cuda_tensor, storages=("TypedStorage", "UntypedStorage"),
        extra={(METADATA_MODULE, "FlattenedTensorMetadata"): FlattenedTensorMetadata},
        refusal="is not admitted by this simulator")
    st = RankState()

    def construct(item, require_clone=True):
        # LMDeploy's _construct: (func, args), args[6] = current device, func(*args).
        func, args = item
        args = list(args)
        args[6] = torch.cuda.current_device()
        tensor = func(*args)
        return tensor.clone() if require_clone else tensor

    def deserialize(entry, load_format, info):
        weights = unpickle(base64.b64decode(entry, validate=True), unpickler)
        if load_format == "flattened_bucket":
            metadata = weights["metadata"]
            if not metadata:
                return []
            info["nonempty"] = True
            if "flattened_tensor" in weights:
                require_clone = weights.get("require_clone", True)
                if "event_ipc_handle" in weights and not hasattr(torch.cuda.Event,
                                                                 "from_ipc_handle"):
                    require_clone = True
                item = weights["flattened_tensor"]
                st.ipc_tensor = construct(item, require_clone=require_clone)
                args = item[1]
                st.ipc_key = f"{zlib.crc32(bytes(args[7])):08x}+{int(args[9])}"
                info["flattened"] = True
            elif st.ipc_tensor is None:
                raise ValueError(
                    "flattened_tensor is not provided in weights and no cached ipc tensor is "
                    "available. Please provide flattened_tensor on the first update_params call.")
            if "event_ipc_handle" in weights and hasattr(torch.cuda.Event, "from_ipc_handle"):
                st.ipc_event = torch.cuda.Event.from_ipc_handle(
                    device=torch.cuda.current_device(), handle=weights["event_ipc_handle"])
            flat = st.ipc_tensor
            info["dtype"] = str(flat.dtype).split(".")[-1]
            info["buffer"] = st.ipc_key
            if st.ipc_event is not None:
                st.ipc_event.wait()
            out = []
            for m in metadata:
                t = flat[m.start_idx:m.end_idx].reshape(m.shape)
                if t.dtype != m.dtype:
                    t = t.to(m.dtype)
                    st.casts += 1
                out.append((m.name, t))
            return out
        if load_format is not None:
            raise ValueError(f"load_format {load_format!r} is not simulated")
        info["nonempty"] = bool(weights)
        return [(name, construct(item)) for name, item in weights]

    def receive(body, pg):
        """The NCCL path's receive: FlattenedTensorBucket's one broadcast, or one per tensor."""
        dist = mem.dist
        dtypes = [getattr(torch, d) for d in body["dtypes"]]
        shapes = [torch.Size(s) for s in body["shapes"]]
        received = []
        if body["names"] and body.get("load_format") == "flattened_bucket":
            if any(d != dtypes[0] for d in dtypes):
                raise ValueError("All tensors in a FlattenedTensorBucket must share a dtype")
            numels = [s.numel() for s in shapes]
            flat = torch.empty(sum(numels), dtype=dtypes[0], device=f"cuda:{gpu}")
            dist.broadcast(flat, src=0, group=pg)
            at = 0
            for name, shape, n in zip(body["names"], shapes, numels):
                received.append((name, flat[at:at + n].view(shape)))
                at += n
        elif body["names"]:
            handles = []
            for name, shape, dtype in zip(body["names"], shapes, dtypes):
                t = torch.empty(shape, dtype=dtype, device=f"cuda:{gpu}")
                handles.append(dist.broadcast(t, src=0, group=pg, async_op=True))
                received.append((name, t))
            for h in handles:
                h.wait()
        return received

    def drop_cache():
        st.ipc_event = None
        st.ipc_tensor = None
        st.ipc_key = None

    def update(arg):
        entries = arg["body"]["serialized_named_tensors"]
        entry = entries[tp_rank] if isinstance(entries, list) else entries
        info = {"gpu": uuid, "device": gpu, "rank": tp_rank, "nonempty": False,
                "flattened": False}
        weights = deserialize(entry, arg["body"].get("load_format"), info)
        if weights and arg["weights_asleep"]:
            raise RuntimeError("weights loaded while the engine's weights sleep")
        load_weights(st.params, weights)
        info["loaded"] = len(weights)
        del weights
        if st.ipc_event is not None:
            st.ipc_event.record()
        if arg["body"].get("finished", False):
            torch.cuda.synchronize()
            drop_cache()
        torch.cuda.empty_cache()
        st.crcs.clear()
        return info

    def dist_init(arg):
        name = arg["group_name"]
        if name in st.groups:
            raise RuntimeError(f"group '{name}' already initialized")
        st.groups[name] = mem.init_custom_process_group(
            arg.get("backend", "nccl"), f"tcp://{arg['master_address']}:{arg['master_port']}",
            arg["world_size"], arg["rank_offset"] + tp_rank, name)
        return "ok"

    def dist_update(arg):
        body = arg["body"]
        pg = st.groups.get(body["group_name"])
        if pg is None:
            raise RuntimeError(f"group '{body['group_name']}' is not initialized")
        received = receive(body, pg)
        if received and arg["weights_asleep"]:
            raise RuntimeError("weights loaded while the engine's weights sleep")
        load_weights(st.params, received)
        if body.get("finished", False):
            torch.cuda.synchronize()
        st.crcs.clear()
        return len(received)

    def dist_destroy(name):
        pg = st.groups.pop(name, None)
        if pg is not None:
            mem.dist.destroy_process_group(pg)
        return "ok"

    def sleep(level):
        drop_cache()
        sleep_params(mem, st.params, level)
        st.crcs.clear()
        return "ok"

    # LMDeploy: any exception in the worker fails the request.
    serve_rank(conn, {
        "update": update, "dist_init": dist_init, "dist_update": dist_update,
        "dist_destroy": dist_destroy, "sleep": sleep,
        "wake_weights": lambda _: wake_params(mem, st.params, gpu),
        "checksums": lambda _: dict(rank_checksums(mem, st.params, st.crcs)),
        "stats": lambda _: {"casts": st.casts, "ipc_opens": mem.ipc_opens()},
    })


class Engine:
    def __init__(self, gpus, memory_kind, knobs, log_digest):
        self.ranks = RankPool(rank_main, gpus, memory_kind)
        self.gpus = gpus
        self.memory_kind = memory_kind
        self.lock = FifoLock()  # LMDeploy runs one update_params at a time, in arrival order
        self.state = threading.Lock()  # the counters below
        self.knobs = knobs
        self.log_digest = log_digest
        self.updates = 0
        self.flattened_tensor_sent = 0
        self.finished_calls = 0
        self.loads_while_asleep = 0
        self.sleeping_tags = set()
        self.events = []
        self.last_error = ""
        self.group = ""  # the NCCL path's group, while one is formed
        self.rank_offset = 1
        self.cycles = [self.new_cycle(1)]
        self.previous = {}  # TP rank -> (buffer, dtype) of the cycle's last non-empty call

    @staticmethod
    def new_cycle(n):
        return {"cycle": n, "finished": False, "requests": 0, "counts": {}, "arrivals": {}}

    def event(self, text):
        self.events.append(text)
        del self.events[:-500]

    def end_cycle(self, finished):
        cycle = self.cycles[-1]
        if not finished and not cycle["counts"]:
            return
        cycle["finished"] = finished
        self.cycles.append(self.new_cycle(cycle["cycle"] + 1))
        del self.cycles[:-64]
        self.previous = {}

    def account(self, infos, finished):
        """Counts one /update_weights in the current cycle: per GPU and dtype, whether
        flattened_tensor came, and whether the layout's floor needed it."""
        cycle = self.cycles[-1]
        cycle["requests"] += 1
        for info in infos:
            if not info.get("nonempty") or "dtype" not in info:
                continue
            key = f"{info['gpu']}/{info['dtype']}"
            c = cycle["counts"].setdefault(key, {"arrivals": 0, "floor": 0, "calls": 0,
                                                 "buffers": []})
            c["calls"] += 1
            if info["buffer"] not in c["buffers"]:
                c["buffers"].append(info["buffer"])
            here = (info["buffer"], info["dtype"])
            if self.previous.get(info["rank"]) != here:
                c["floor"] += 1
            self.previous[info["rank"]] = here
            if info.get("flattened"):
                c["arrivals"] += 1
                arrivals = cycle["arrivals"]
                device_key = f"{info['device']}:{info['dtype']}"
                arrivals[device_key] = arrivals.get(device_key, 0) + 1
                self.flattened_tensor_sent += 1
        if finished:
            counts = ", ".join(f"{k}: {v['arrivals']} arrivals (floor {v['floor']}, "
                               f"{v['calls']} calls, {len(v['buffers'])} buffers)"
                               for k, v in sorted(cycle["counts"].items()))
            print(f"{stamp()} cycle {cycle['cycle']} finished after {cycle['requests']} "
                  f"requests; flattened_tensor {counts or 'never sent'}", flush=True)
            self.end_cycle(True)

    def sleep(self, level):
        """level: the query's, or None (LMDeploy's default, 1); the event names what came."""
        res = self.ranks.all("sleep", int(level or 1))
        with self.state:
            self.sleeping_tags = {"weights", "kv_cache"}
            self.end_cycle(False)
            self.event(f"sleep:{level or '(no level)'}")
        return res

    def wakeup(self, given):
        """given: the query's tags, or none (every sleeping tag); the event names what came."""
        with self.state:
            tags = given or sorted(self.sleeping_tags)
            if any(t not in self.sleeping_tags for t in tags):
                self.event(f"wakeup-ignored:{','.join(tags)}")
                return
        if "weights" in tags:
            self.ranks.all("wake_weights")
        with self.state:
            self.sleeping_tags -= set(tags)
            self.event(f"wakeup:{','.join(given) or '(no tags)'}")

    def checksums(self):
        ranks, digests, stats = ranks_and_stats(self)
        with self.state:
            return {
                "weight_version": None, "ranks": ranks,
                "digests": digests,
                "updates_received": self.updates,
                "flattened_tensor_sent": self.flattened_tensor_sent,
                "flattened_arrivals": [c["arrivals"] for c in self.cycles if c["arrivals"]],
                "finished_calls": self.finished_calls,
                "casts": sum(s["casts"] for s in stats),
                "ipc_opens": [s["ipc_opens"] for s in stats],
                "loads_while_asleep": self.loads_while_asleep,
                "is_sleeping": bool(self.sleeping_tags),
                "sleeping_tags": sorted(self.sleeping_tags), "events": self.events,
                "group": self.group, "memory": self.memory_kind, "last_error": self.last_error}


ENGINE = None


class Handler(JsonReplies, BaseHTTPRequestHandler):
    openapi = True
    unlisted = set()
    nccl_routes = True
    backend_501 = False

    def error(self, status, message):
        self.reply(status, {"error": {"message": message, "type": "invalid_request_error",
                                      "code": status}})

    def do_OPTIONS(self):
        """As FastAPI: 405 where the path is served (for any method), 404 where nothing is."""
        routes = ROUTES + (NCCL_ROUTES if self.nccl_routes else [])
        if urllib.parse.urlsplit(self.path).path in {path for path, _ in routes}:
            return self.reply(405, {"detail": "Method Not Allowed"})
        self.reply(404, {"detail": "Not Found"})

    def do_GET(self):
        e = ENGINE
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/openapi.json" and self.openapi:
            routes = ROUTES + (NCCL_ROUTES if self.nccl_routes else [])
            paths = {path: {method: {"summary": path.strip("/")}} for path, method in routes
                     if path not in self.unlisted}
            return self.reply(200, {"openapi": "3.1.0",
                                    "info": {"title": "FastAPI", "version": "0.1.0"},
                                    "paths": paths})
        if url.path == "/health":
            return self.reply(200, {"status": "sleeping" if e.sleeping_tags else "healthy"})
        if url.path == "/is_sleeping":
            return self.reply(200, {"is_sleeping": bool(e.sleeping_tags)})
        if url.path == "/sim/checksums":
            return self.reply(200, e.checksums())
        if url.path == "/sim/flattened":
            with e.state:
                cycles = [{k: v for k, v in c.items() if k != "arrivals"} for c in e.cycles]
            return self.reply(200, {"cycles": cycles})
        served = ROUTES + (NCCL_ROUTES if self.nccl_routes else [])
        if (url.path, "post") in served:
            return self.reply(405, {"detail": "Method Not Allowed"})  # as FastAPI
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        e = ENGINE
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        raw = self.raw_body()
        if url.path == "/sim/knobs":
            knobs = json.loads(raw or b"{}")
            self.delivery.update(knobs)
            e.knobs.update(knobs)
            return self.reply(200, dict(e.knobs, updates_received=e.updates))
        nccl = self.nccl_routes and url.path in NCCL_PATHS
        if url.path not in ("/update_weights", "/sleep", "/wakeup") and not nccl:
            return self.reply(404, {"detail": "Not Found"})
        if nccl and self.backend_501:
            return self.reply(501, {"detail": "Not Implemented"})
        media = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            with e.state:
                e.event(f"refused:{url.path}:content-type")
            return self.error(400, "Unsupported Media Type: Only 'application/json' is allowed")
        if url.path == "/sleep":
            level = query.get("level", [None])[-1]
            if level not in (None, "1", "2"):
                return self.error(400, 'The "level" query parameter must be 1 or 2.')
            with e.lock:
                res = e.sleep(level)
            if not all(ok for ok, _ in res):
                return self.send(500, b"Internal Server Error", "text/plain")
            return self.send(200, b"", "text/plain")
        if url.path == "/wakeup":
            with e.lock:
                e.wakeup(query.get("tags", []))
            return self.send(200, b"", "text/plain")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if nccl:
            return self.nccl(url.path, body)
        if not isinstance(body, dict) or not isinstance(
                body.get("serialized_named_tensors"), (str, list, dict)):
            return self.error(400, "serialized_named_tensors: Field required")
        return self.update(body)

    def nccl(self, path, body):
        """The NCCL path's routes: {success, message}, 200 or 400, as LMDeploy answers them."""
        e = ENGINE
        if not isinstance(body, dict) or not body.get("group_name"):
            return self.reply(400, {"success": False, "message": "group_name is required"})
        if path == "/init_weights_update_group":
            try:
                offset, world = int(body["rank_offset"]), int(body["world_size"])
            except (KeyError, TypeError, ValueError) as err:
                return self.reply(400, {"success": False, "message": f"bad group: {err!r}"})
            if offset < 1 or offset + len(e.ranks) > world:
                return self.reply(400, {"success": False, "message":
                                        f"rank_offset {offset} + tp {len(e.ranks)} exceeds "
                                        f"world_size {world}"})
            with e.lock:
                res = e.ranks.all("dist_init", body)
                if all(ok for ok, _ in res):
                    with e.state:
                        e.group = body["group_name"]
                        e.rank_offset = int(body.get("rank_offset", 1))
            ok_message = "Succeeded to initialize custom process group."
        elif path == "/destroy_weights_update_group":
            with e.lock:
                res = e.ranks.all("dist_destroy", body["group_name"])
                with e.state:
                    if e.group == body["group_name"]:
                        e.group = ""
            ok_message = "Succeeded to destroy custom process group."
        else:
            names, dtypes, shapes = (body.get(k) for k in ("names", "dtypes", "shapes"))
            if not all(isinstance(v, list) for v in (names, dtypes, shapes)) or \
                    not len(names) == len(dtypes) == len(shapes):
                return self.reply(400, {"success": False, "message":
                                        "names, dtypes and shapes must have equal lengths"})
            next_update(e)
            finished = bool(body.get("finished", False))
            with e.lock:
                asleep = "weights" in e.sleeping_tags
                res = e.ranks.all("dist_update", {"body": body, "weights_asleep": asleep})
                with e.state:
                    if all(ok for ok, _ in res):
                        e.event(f"update:{sum(v for _, v in res)}" +
                                (":finished" if finished else ""))
                        if finished:
                            e.finished_calls += 1
            ok_message = "Succeeded to update parameter online from distributed."
        bad = [m for ok, m in res if not ok]
        if bad:
            with e.state:
                e.last_error = "; ".join(bad)
            print(f"{stamp()} {path} failed: {'; '.join(bad)}", flush=True)
            return self.reply(400, {"success": False, "message": "; ".join(bad)})
        self.reply(200, {"success": True, "message": ok_message})

    def update(self, body):
        e = ENGINE
        index = next_update(e)
        if index == e.knobs["fail_update_at"]:
            return self.send(500, b"Internal Server Error", "text/plain")
        if e.knobs["refuse_pickle"]:
            with e.state:
                e.event("update:refused-pickle")
            return self.error(400, REFUSE_PICKLE)
        finished = body.get("finished", False)
        entries = body["serialized_named_tensors"]
        problem = None
        if not isinstance(finished, bool):
            problem = "finished must be a bool"
        elif isinstance(entries, list) and len(entries) < len(e.ranks):
            problem = (f"serialized_named_tensors has {len(entries)} entries for {len(e.ranks)} "
                       "ranks")
        if problem is not None:
            with e.state:
                e.last_error = problem
                e.event("update:failed")
            return self.send(500, b"Internal Server Error", "text/plain")
        with e.lock:
            asleep = "weights" in e.sleeping_tags
            res = e.ranks.all("update", {"body": body, "weights_asleep": asleep})
            bad = [m for ok, m in res if not ok]
            with e.state:
                if bad:
                    e.last_error = "; ".join(bad)
                    if asleep and any("sleep" in m for m in bad):
                        e.loads_while_asleep += 1
                    e.event("update:failed")
                else:
                    e.account([info for _, info in res], finished)
                    loaded = sum(info.get("loaded", 0) for _, info in res)
                    e.event(f"update:{loaded}" + (":finished" if finished else ""))
                    if finished:
                        e.finished_calls += 1
            if not bad and finished and e.log_digest:
                digests = [digest_of(c) for ok, c in e.ranks.all("checksums") if ok]
                print(f"{stamp()} parameters after finished call {e.finished_calls}: "
                      f"digest {','.join(digests)}", flush=True)
        if bad:
            print(f"{stamp()} /update_weights failed: {'; '.join(bad)}", flush=True)
            return self.send(500, b"Internal Server Error", "text/plain")
        self.send(200, b"null")


def main():
    global ENGINE
    ap = argparse.ArgumentParser()
    add_engine_flags(ap)
    ap.add_argument("--disable-fastapi-docs", action="store_true",
                    help="serve no /openapi.json, as LMDeploy's flag of that name")
    ap.add_argument("--no-nccl-routes", action="store_true", help="an LMDeploy before PR #4638")
    ap.add_argument("--backend-501", action="store_true",
                    help="another backend (turbomind): the NCCL path's routes answer 501")
    ap.add_argument("--die-at-update", type=int, default=-1,
                    help="the server exits when the Nth weight update (0-based) arrives")
    ap.add_argument("--refuse-pickle", action="store_true",
                    help="refuse pickled payloads as LMDeploy PR #4964 does without "
                         "LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1")
    ap.add_argument("--no-digest-log", action="store_true",
                    help="do not checksum the parameters at each finished call")
    args = ap.parse_args()
    knobs = {"fail_update_at": -1, "hang_update_at": -1, "die_at_update": args.die_at_update,
             "refuse_pickle": args.refuse_pickle}
    ENGINE = Engine(gpus_of(args), args.memory, knobs, not args.no_digest_log)
    Handler.openapi = not args.disable_fastapi_docs
    Handler.unlisted = set(args.unlisted_route)
    Handler.nccl_routes = not args.no_nccl_routes
    Handler.backend_501 = args.backend_501
    serve(Handler, args, "lmdeploy engine")


if __name__ == "__main__":
    main()
