#!/usr/bin/env python3
"""vLLM's API server (VLLM_SERVER_DEV_MODE=1) with its weight-transfer backend, IPC (wsyncd's
colocated path, --backend ipc) or NCCL (the disaggregated one, --backend nccl), as wsyncd sees it:
one simulator, two memory backends (tests/sim/memory.py). `--memory host` keeps the workers'
tensors in host memory, maps wsyncd's shared-memory slots and receives broadcasts over the host
collective (CI, no torch); `--memory cuda` holds them on real GPUs, reads wsyncd's slots through
CUDA IPC with torch's own rebuild_cuda_tensor and drives NCCL through ctypes as vLLM's PyNccl
does (the device runs). One process per worker (TP rank) either way, running the same receive
code; what the code relies on is written in docs/engines/vllm.md.

The server behaves as the generation its GET /version names (--version, or the knob "version");
a pre-release (rc, dev) orders before its release:
  < 0.17.0  no IPC weight transfer: /init_weight_transfer_engine and /update_weights are 404;
  >= 0.17.0 entries are (rebuild_cuda_tensor, ARGS): the worker calls func(*args); no session
            routes (404); update_info has names, dtype_names, shapes, ipc_handles(_pickled);
  >= 0.22.0 entries are the 15 ARGS alone (the worker imports rebuild_cuda_tensor itself);
            /start_weight_update and /finish_weight_update exist (PR #39212, the strict state
            machine: a start while one is open, and /update_weights or /finish_weight_update while
            none is, answer 409); packed: ONE dict {uuid: ARGS} for a 1-D uint8 chunk plus
            tensor_sizes, packed, first_chunk, last_chunk;
  >= 0.29.0 /finish_weight_update reads {"weight_version"}.
update_info keys the generation does not know fail the dataclass constructor (TypeError: 500).
Flags override the generation: --entry-form args|func_args|any (auto: by version),
--no-session-routes, --lenient-sessions (updates outside a session run), --packed true|false (the
server config's packed setting; any takes both), --refuse-pickle (no
VLLM_ALLOW_INSECURE_SERIALIZATION=1: ipc_handles_pickled is refused, 400).

POST /update_weights {"update_info"} follows IPCWeightTransferEngine.receive_weights on every
worker: ipc_handles_pickled is standard base64 of a pickle that vLLM reads with pickle.loads;
here an unpickler of exact (module, name) pairs admits only torch's rebuild_cuda_tensor, Tensor,
Size, TypedStorage/UntypedStorage and dtypes. Each worker picks the entry of its own GPU UUID
(none: ValueError, and the engine is dead from then on: every call answers 500 and /health 503,
vLLM #57853, as does an update posted while the weights sleep, EngineCore's segfault), overwrites
args[6] with its device index and rebuilds. Packed: the chunk is cut to sum(tensor_sizes), split by
tensor_sizes, each piece viewed as its dtype (the offset must be a multiple of its item size) and
shape, and cloned; unpacked: the views are loaded as they are. The tensors are copied into the
parameters, then the device synchronised. Answers {"message": "Weights updated"}; an exception in
a worker is 500; a body without update_info 400 {"detail"}.

The NCCL backend (--backend nccl): POST /init_weight_transfer_engine {"init_info"} is read as its
dataclass reads it (>= 0.28.0 the packed fields, >= 0.30.0 nccl_unique_id_b64; another key, or a
rendezvous given both ways or neither, is a 500). The store rendezvous opens torch's TCPStore
client to master_address:master_port and reads "/broadcast_from/0/0", vLLM's pickled ctypes
ncclUniqueId (plain pickle.loads against a stand-in module at vLLM's path); the unique-id one
decodes nccl_unique_id_b64 (standard base64 of 128 bytes). Every worker then joins as
rank_offset + its index and runs the warm-up all-reduce of one float32 zero; the answer comes once
all have. POST /update_weights {"update_info": {names, dtype_names, shapes}} (before 0.28.0 the
packed fields ride here): one broadcast per tensor in names order, or packed uint8 chunks cut
after the tensor that takes the running total past packed_buffer_size_bytes (packed_tensor.py),
split back and viewed. --weight-checker serves POST /weight_checker {"action": "checksum"} (every
worker's checksums keyed "dp0:pp0:pcp0:tp<r>:ep0:<name>", 409 while paused); --corrupt-tensor N
makes the first worker keep N with its first byte flipped; --init-delay-ms delays each init.

Other routes: GET /version, POST /init_weight_transfer_engine ({"init_info": {}}; 400 without it;
keys other than packed, packed_buffer_size_bytes and packed_num_buffers fail as the dataclass
would, 500), POST /pause?mode=abort|wait|keep (400 on another), /resume, GET /is_paused, POST
/sleep?level=1|2 (weights to host memory; level 2: dropped), POST /wake_up?tags=... (none: all),
GET /is_sleeping, POST /reset_prefix_cache, GET /health, GET /get_world_size (404 with
--no-world-size), GET /weight_info,
POST /update_weight_version, POST /abort_requests. GET /openapi.json lists every route served
(404 with --no-docs); --missing-route P (repeatable) serves no POST P (404, and not listed).

GET /sim/state (and /sim/checksums, /sim/stats): {"ranks": {"<rank>": {name: crc32 hex}} (an NCCL
worker by its global rank, once a group formed; else 1, 2, ...), "digests", "calls" (the POSTs in
order: init, start, update, "finish <weight_version>", "pause?<query>", resume, ...), "inits",
"store_port", "packed", "last_chunks" (the NCCL backend's chunk sizes of the last update),
"weight_version", "version", "requests" (every request but /sim/*, {"method", "path" with its
query, "body"}, ipc_handles_pickled given as its length), "updates_received", "stats" (request
forms, chunk flags, session calls, 409s), "ipc_opens" (host memory), "dead", "session_open",
"paused", "is_sleeping", "sleeping_tags", "events", "last_error"}. POST /sim/knobs sets version,
insecure_serialization, fail_update_at (500), die_at_update (the server exits), hang_update_at,
conflict_update_at (409): each the n-th /update_weights, from 0.

  vllm_engine.py --port P --gpus G[,G...] [--memory host|cuda] [--backend ipc|nccl]
                 [--version 0.23.0] [...]
(--gpus: device indexes; host memory also takes host mode's stand-in GPU UUIDs.)
"""

import argparse
import base64
import json
import os
import pickle
import re
import sys
import threading
import time
import types
import urllib.parse
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sim"))
import memory as memories  # noqa: E402
from engine_common import (FifoLock, JsonReplies, RankPool, add_engine_flags,  # noqa: E402
                           digest_of, exact_name_unpickler, flip_first_byte, gpus_of,
                           load_weights, rank_checksums, serve, serve_rank, sleep_params, stamp,
                           unpickle, wake_params)

INIT_KEYS = {"packed", "packed_buffer_size_bytes", "packed_num_buffers"}
PAUSE_MODES = ("abort", "wait", "keep")
BASE_FIELDS = {"names", "dtype_names", "shapes", "ipc_handles", "ipc_handles_pickled"}
PACKED_FIELDS = {"tensor_sizes", "packed", "first_chunk", "last_chunk"}
INSECURE = ("Refusing to deserialize `ipc_handles_pickled` without "
            "VLLM_ALLOW_INSECURE_SERIALIZATION=1")


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


def entry_form(value):
    """'func_args' for a (FUNC, ARGS) pair, 'args' for the rebuild arguments alone."""
    if isinstance(value, tuple) and len(value) == 2 and callable(value[0]):
        return "func_args"
    return "args"


ID_KEY = "broadcast_from/0/0"  # torch's TCPStore client prefixes "/" on the wire


def install_vllm_standin():
    """vLLM's pickled id names vllm.distributed.device_communicators.pynccl_wrapper.ncclUniqueId
    (a ctypes structure of 128 bytes): a stand-in module at that path lets plain pickle.loads
    resolve it as vLLM's own would."""
    import ctypes
    path = "vllm.distributed.device_communicators.pynccl_wrapper"
    parts = path.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    if not hasattr(sys.modules[path], "ncclUniqueId"):
        class ncclUniqueId(ctypes.Structure):  # noqa: N801 - vLLM's name
            _fields_ = [("internal", ctypes.c_byte * 128)]
        ncclUniqueId.__module__ = path
        sys.modules[path].ncclUniqueId = ncclUniqueId


def rank_main(gpu, tp_rank, conn, memory_kind):
    mem = memories.load(memory_kind)
    torch = mem.torch
    torch.cuda.set_device(gpu)
    uuid = mem.device_uuid(gpu)
    rebuild_cuda_tensor = mem.reductions.rebuild_cuda_tensor
    unpickler = exact_name_unpickler(
        torch, rebuild_cuda_tensor, storages=("TypedStorage", "UntypedStorage"),
        refusal="is not admitted by this simulator")
    params, crcs = {}, {}

    def rebuild(value, form_rule, forms):
        form = entry_form(value)
        forms[form] = forms.get(form, 0) + 1
        rule = form if form_rule == "any" else form_rule
        if rule == "args":  # newest builds: the ARGS tuple, rebuilt with torch's function
            args = list(value)
            args[6] = torch.cuda.current_device()
            return rebuild_cuda_tensor(*args)
        func, args = value  # older builds: (FUNC, ARGS), func(*args)
        args = list(args)
        args[6] = torch.cuda.current_device()
        return func(*args)

    def pick(handle_dict):
        if not isinstance(handle_dict, dict) or uuid not in handle_dict:
            keys = list(handle_dict.keys()) if isinstance(handle_dict, dict) else handle_dict
            raise ValueError(f"IPC handle not found for GPU UUID {uuid}. Available UUIDs: {keys}")
        return handle_dict[uuid]

    def receive(info, form_rule):
        names, dtype_names, shapes = info["names"], info["dtype_names"], info["shapes"]
        if len(dtype_names) != len(names) or len(shapes) != len(names):
            raise ValueError("`dtype_names` and `shapes` should be of the same size as `names`: "
                             f"got {len(dtype_names)}, {len(shapes)} and {len(names)}")
        handles = unpickle(base64.b64decode(info["ipc_handles_pickled"]), unpickler)
        forms = {}
        if info.get("packed", False):
            sizes = info.get("tensor_sizes")
            if sizes is None:
                raise ValueError("`tensor_sizes` is required when packed=True")
            if not isinstance(handles, dict):
                raise ValueError("packed: ipc_handles must be one dict")
            if len(sizes) != len(names):
                raise ValueError(f"tensor_sizes has {len(sizes)} entries for {len(names)} names")
            buf = rebuild(pick(handles), form_rule, forms)
            if buf.dtype != torch.uint8 or buf.dim() != 1:
                raise ValueError(f"a packed chunk is a 1-D uint8 tensor, not {buf.dtype} "
                                 f"{tuple(buf.shape)}")
            pieces = buf[:sum(sizes)].split(sizes)
            weights = [(n, p.contiguous().view(getattr(torch, d)).view(*s).clone())
                       for n, s, d, p in zip(names, shapes, dtype_names, pieces)]
        else:
            if not isinstance(handles, list) or len(handles) != len(names):
                raise ValueError(f"`ipc_handles` should be of the same size as `names`: got "
                                 f"{len(handles) if isinstance(handles, list) else handles!r} "
                                 f"and {len(names)}")
            weights = [(name, rebuild(pick(h), form_rule, forms))
                       for name, h in zip(names, handles)]
            # What the request declares must be what was rebuilt: a mislabelled tensor has the
            # right bytes, which a checksum alone would pass.
            for (name, t), dname, shape in zip(weights, dtype_names, shapes):
                if str(t.dtype).split(".")[-1] != dname or list(t.shape) != list(shape):
                    raise ValueError(f"{name}: rebuilt as {t.dtype}{list(t.shape)}, declared "
                                     f"{dname}{list(shape)}")
        return weights, forms

    nccl = {}  # the NCCL backend's store and communicator, held for the group's life

    def nccl_init(info, world, uid):
        rank = info["rank_offset"] + tp_rank
        if uid is None:
            # StatelessProcessGroup.create, then PyNcclCommunicator: broadcast_obj(src=0) reads
            # the id vLLM pickled, a ctypes ncclUniqueId.
            install_vllm_standin()
            nccl["store"] = mem.open_store(info["master_address"], info["master_port"], world)
            nccl["store"].wait([ID_KEY])
            obj = pickle.loads(nccl["store"].get(ID_KEY))
            if type(obj).__name__ != "ncclUniqueId" or \
                    type(obj).__module__ != "vllm.distributed.device_communicators.pynccl_wrapper":
                raise TypeError(f"the object under {ID_KEY} is a {type(obj).__qualname__}, not "
                                "vLLM's ncclUniqueId")
            uid = bytes(obj)
        nccl["comm"] = mem.communicator(uid, world, rank)
        nccl["comm"].warm_up()
        return rank

    def nccl_receive(names, dtypes, shapes, packed, chunk, corrupt):
        """One broadcast per tensor in names order, or packed_tensor.py's uint8 chunks, each cut
        after the tensor that takes the running total past `chunk` bytes. Returns the chunks'
        sizes."""
        comm = nccl.get("comm")
        if comm is None:
            raise RuntimeError("the weight transfer engine is not initialized")
        tensors = [torch.empty(s, dtype=getattr(torch, d), device=f"cuda:{gpu}")
                   for d, s in zip(dtypes, shapes)]
        sizes = []
        if not packed:
            for t in tensors:
                comm.broadcast(t)
                sizes.append(t.nbytes)
        else:
            group, running = [], 0
            for i, t in enumerate(tensors):
                group.append(t)
                running += t.nbytes
                if running > chunk or i + 1 == len(tensors):
                    buf = torch.empty(running, dtype=torch.uint8, device=f"cuda:{gpu}")
                    comm.broadcast(buf)
                    offset = 0
                    for g in group:
                        g.view(-1).view(torch.uint8).copy_(buf[offset:offset + g.nbytes])
                        offset += g.nbytes
                    sizes.append(running)
                    group, running = [], 0
        received = list(zip(names, tensors))
        for name, t in received:
            if tp_rank == 0 and name == corrupt and t.nbytes:
                flip_first_byte(mem, t)
        load_weights(params, received)
        torch.cuda.synchronize()
        crcs.clear()
        return sizes

    def update(arg):
        weights, forms = receive(arg["update_info"], arg["form_rule"])
        load_weights(params, weights)
        n = len(weights)
        del weights
        torch.cuda.synchronize()
        crcs.clear()
        return {"loaded": n, "forms": forms}

    def sleep(level):
        sleep_params(mem, params, level)
        crcs.clear()
        return "ok"

    # An exception in a worker fails the request.
    serve_rank(conn, {
        "nccl_init": lambda arg: nccl_init(*arg),
        "nccl_update": lambda arg: nccl_receive(*arg),
        "update": update, "sleep": sleep,
        "finish": lambda _: torch.cuda.synchronize(),
        "wake_weights": lambda _: wake_params(mem, params, gpu),
        "checksums": lambda _: dict(rank_checksums(mem, params, crcs)),
        "ipc_opens": lambda _: mem.ipc_opens(),
    })


class Engine:
    def __init__(self, args, gpus):
        self.ranks = RankPool(rank_main, gpus, args.memory)
        self.lock = FifoLock()
        self.state = threading.Lock()
        self.args = args
        self.version = args.version
        self.knobs = {"insecure_serialization": not args.refuse_pickle,
                      "fail_update_at": args.fail_update_at, "die_at_update": args.die_at_update,
                      "hang_update_at": -1, "conflict_update_at": args.conflict_update_at}
        self.session_open = False
        self.paused = False
        self.sleeping_tags = set()
        self.dead = ""
        self.weight_version = None
        self.updates = 0
        self.stats = {"updates": 0, "updates_ok": 0, "packed": 0, "unpacked": 0, "args": 0,
                      "func_args": 0, "first_chunk": 0, "last_chunk": 0, "init": 0,
                      "starts": 0, "finishes": 0, "conflicts": 0, "tensors": 0}
        self.requests = []
        self.events = []
        self.last_error = ""
        # The NCCL backend: the group (world_size, rank_offset, packed, chunk_bytes) of the last
        # init, the inits, the store port the last init_info named, and the chunks' sizes of the
        # last update (the first worker's). `calls`: the POSTs in order, as wsyncd made them.
        self.group = None
        self.inits = 0
        self.store_port = 0
        self.last_chunks = []
        self.calls = []

    # The generation the version names, and the flags that override it.
    def has_ipc(self):
        return self.args.backend == "nccl" or at_least(self.version, (0, 17, 0))

    def has_sessions(self):
        return at_least(self.version, (0, 22, 0)) and not self.args.no_session_routes

    def routes(self):
        """The OpenAPI "paths" of the routes this server serves, as FastAPI lists them (less
        --unlisted-route)."""
        return {p: entry for p, entry in self.served_routes().items()
                if p not in self.args.unlisted_route}

    def served_routes(self):
        """Every route this server serves, by path: {method: {...}}."""
        posts = ["/pause", "/resume", "/sleep", "/wake_up", "/reset_prefix_cache",
                 "/abort_requests", "/update_weight_version"]
        if self.has_ipc():
            posts += ["/init_weight_transfer_engine", "/update_weights"]
        if self.has_sessions():
            posts += ["/start_weight_update", "/finish_weight_update"]
        if self.args.weight_checker:
            posts.append("/weight_checker")
        gets = ["/version", "/health", "/is_sleeping", "/is_paused", "/weight_info"]
        if not self.args.no_world_size:
            gets.append("/get_world_size")
        paths = {p: {"post": {"summary": p}} for p in posts if p not in self.args.missing_route}
        paths.update({p: {"get": {"summary": p}} for p in gets})
        return paths

    def form_rule(self):
        if self.args.entry_form != "auto":
            return self.args.entry_form
        return "args" if at_least(self.version, (0, 22, 0)) else "func_args"

    def update_fields(self):
        packed = PACKED_FIELDS if at_least(self.version, (0, 22, 0)) else set()
        return BASE_FIELDS | packed

    def reads_weight_version(self):
        return at_least(self.version, (0, 29, 0))

    def event(self, text):
        self.events.append(text)
        del self.events[:-500]

    def call(self, text):
        with self.state:
            self.calls.append(text)
            del self.calls[:-2000]

    def rank_names(self):
        """Each worker's rank as its checksums name it: its global rank in an NCCL group, else
        1, 2, ..."""
        if self.args.backend == "nccl" and self.group is not None:
            return [str(self.group["rank_offset"] + i) for i in range(len(self.ranks))]
        return [str(i + 1) for i in range(len(self.ranks))]

    def snapshot(self):
        return {"weight_version": self.weight_version, "version": self.version,
                "stats": dict(self.stats), "updates_received": self.updates,
                "session_open": self.session_open, "paused": self.paused,
                "is_sleeping": bool(self.sleeping_tags),
                "sleeping_tags": sorted(self.sleeping_tags), "dead": self.dead,
                "requests": list(self.requests), "events": list(self.events),
                "memory": self.args.memory, "last_error": self.last_error,
                "backend": self.args.backend, "calls": list(self.calls),
                "last_chunks": list(self.last_chunks), "inits": self.inits,
                "store_port": self.store_port,
                "packed": bool(self.group and self.group["packed"])}


ENGINE = None


class Handler(JsonReplies, BaseHTTPRequestHandler):
    def detail(self, status, text):
        self.reply(status, {"detail": text})

    def internal_error(self, message):
        e = ENGINE
        with e.state:
            e.last_error = message
            e.event("error")
        print(f"{stamp()} {self.path}: {message}", flush=True)
        self.send(500, b"Internal Server Error", "text/plain")

    def record(self, method, url, raw):
        if url.path.startswith("/sim/"):
            return
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = "<not json>"
        if isinstance(body, dict) and isinstance(body.get("update_info"), dict):
            info = dict(body["update_info"])
            if "ipc_handles_pickled" in info:
                info["ipc_handles_pickled"] = len(info["ipc_handles_pickled"])
            body = dict(body, update_info=info)
        path = url.path + ("?" + url.query if url.query else "")
        with ENGINE.state:
            ENGINE.requests.append({"method": method, "path": path, "body": body})
            del ENGINE.requests[:-2000]

    def body_of(self, raw, required):
        """The JSON object of the body; {} for an empty optional body; None when unreadable."""
        if not raw.strip():
            return None if required else {}
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def do_OPTIONS(self):
        """As FastAPI: 405 where the path is served (for any method), 404 where nothing is."""
        if urllib.parse.urlsplit(self.path).path in ENGINE.served_routes():
            return self.detail(405, "Method Not Allowed")
        self.detail(404, "Not Found")

    def do_GET(self):
        e = ENGINE
        url = urllib.parse.urlsplit(self.path)
        self.record("GET", url, b"")
        if url.path in ("/sim/state", "/sim/checksums", "/sim/stats"):
            with e.lock:
                res = e.ranks.all("checksums")
                opens = [v for _, v in e.ranks.all("ipc_opens")]
            names = e.rank_names()
            ranks = {names[i]: c for i, (ok, c) in enumerate(res) if ok}
            if e.args.backend == "nccl" and e.group is None:
                ranks = {}
            with e.state:
                out = e.snapshot()
            out.update({"ranks": ranks, "digests": {r: digest_of(c) for r, c in ranks.items()},
                        "ipc_opens": opens})
            return self.reply(200, out)
        if url.path == "/version":
            return self.reply(200, {"version": e.version})
        if url.path == "/openapi.json":
            if e.args.no_docs:
                return self.detail(404, "Not Found")
            return self.reply(200, {"openapi": "3.1.0", "info": {"title": "vLLM API"},
                                    "paths": e.routes()})
        if url.path == "/health":
            return self.send(503 if e.dead else 200, b"", "text/plain")
        if e.dead:
            return self.send(500, b"Internal Server Error", "text/plain")
        if url.path == "/is_sleeping":
            return self.reply(200, {"is_sleeping": bool(e.sleeping_tags)})
        if url.path == "/is_paused":
            return self.reply(200, {"is_paused": e.paused})
        if url.path == "/get_world_size" and not e.args.no_world_size:
            return self.reply(200, {"world_size": len(e.ranks)})
        if url.path == "/weight_info":
            return self.reply(200, {"weight_version": e.weight_version})
        if "post" in e.served_routes().get(url.path, {}):
            return self.detail(405, "Method Not Allowed")  # as FastAPI
        self.detail(404, "Not Found")

    def do_POST(self):
        e = ENGINE
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        path = url.path
        raw = self.raw_body()
        self.record("POST", url, raw)
        if path == "/sim/knobs":
            knobs = json.loads(raw or b"{}")
            self.delivery.update(knobs)
            with e.state:
                if "version" in knobs:
                    parse_version(knobs["version"])
                    e.version = knobs.pop("version")
                e.knobs.update(knobs)
                return self.reply(200, dict(e.knobs, version=e.version))
        if e.dead:
            return self.send(500, b"Internal Server Error", "text/plain")
        if path in e.args.missing_route:
            return self.detail(404, "Not Found")
        if (path in ("/init_weight_transfer_engine", "/update_weights") and not e.has_ipc()) or \
                (path in ("/start_weight_update", "/finish_weight_update") and
                 not e.has_sessions()):
            return self.detail(404, "Not Found")
        if path == "/init_weight_transfer_engine" and e.args.backend == "nccl":
            e.call("init")
            return self.nccl_init(self.body_of(raw, required=True))
        if path == "/init_weight_transfer_engine":
            e.call("init")
            body = self.body_of(raw, required=True)
            if body is None:
                return self.detail(400, "Invalid JSON format")
            init_info = body.get("init_info")
            if init_info is None:
                return self.detail(400, "Missing 'init_info' in request body")
            if not isinstance(init_info, dict) or set(init_info) - INIT_KEYS:
                return self.internal_error(
                    f"IPCWeightTransferInitInfo got unexpected init_info {init_info!r}")
            with e.state:
                e.stats["init"] += 1
                e.event("init")
            return self.reply(200, {"message": "Weight transfer initialized"})
        if path == "/start_weight_update":
            e.call("start")
            if self.body_of(raw, required=False) is None:
                return self.detail(400, "Invalid JSON format")
            with e.state:
                if e.session_open:
                    e.stats["conflicts"] += 1
                    e.event("start:409")
                    return self.detail(409, "start_weight_update called while a weight update is "
                                            "already in progress. Call finish_weight_update "
                                            "first.")
                e.session_open = True
                e.stats["starts"] += 1
                e.event("start")
            return self.reply(200, {"message": "Weight update started"})
        if path == "/finish_weight_update":
            return self.finish_update(self.body_of(raw, required=False))
        if path == "/update_weights":
            return self.update(self.body_of(raw, required=True))
        if path == "/weight_checker" and e.args.weight_checker:
            return self.weight_checker(self.body_of(raw, required=True))
        if path == "/pause":
            e.call(f"pause?{url.query}")
            mode = query.get("mode", ["abort"])[-1]
            if mode not in PAUSE_MODES:
                return self.detail(400, f"Invalid mode {mode!r}; expected one of {PAUSE_MODES}")
            with e.state:
                e.paused = True
                e.event(f"pause:{mode}")
            return self.reply(200, {"status": "paused"})
        if path == "/resume":
            e.call("resume")
            with e.state:
                e.paused = False
                e.event("resume")
            return self.reply(200, {"status": "resumed"})
        if path == "/sleep":
            level = query.get("level", ["1"])[-1]
            if level not in ("1", "2"):
                return self.detail(400, "level must be 1 or 2")
            with e.lock:
                res = e.ranks.all("sleep", int(level))
            with e.state:
                e.sleeping_tags = {"weights", "kv_cache"}
                e.event(f"sleep:{level}")
            if not all(ok for ok, _ in res):
                return self.internal_error("; ".join(m for ok, m in res if not ok))
            return self.send(200, b"", "text/plain")
        if path == "/wake_up":
            with e.state:
                tags = query.get("tags", []) or sorted(e.sleeping_tags)
                wake = [t for t in tags if t in e.sleeping_tags]
            if "weights" in wake:
                with e.lock:
                    e.ranks.all("wake_weights")
            with e.state:
                e.sleeping_tags -= set(wake)
                e.event(f"wake_up:{','.join(tags)}")
            return self.send(200, b"", "text/plain")
        if path == "/reset_prefix_cache":
            e.call("reset_prefix_cache")
            with e.state:
                e.event("reset_prefix_cache")
            return self.send(200, b"", "text/plain")
        if path == "/update_weight_version":
            body = self.body_of(raw, required=True)
            if body is None or "new_version" not in body:
                return self.detail(400, "new_version is required")
            with e.state:
                e.weight_version = str(body["new_version"])
            return self.reply(200, {"success": True, "new_version": e.weight_version})
        if path == "/abort_requests":
            return self.reply(200, {"status": "aborted", "aborted": 0})
        self.detail(404, "Not Found")

    def finish_update(self, body):
        e = ENGINE
        version = body.get("weight_version") if isinstance(body, dict) else None
        e.call(f"finish {version}" if version and e.reads_weight_version() else "finish")
        if body is None:
            return self.detail(400, "Invalid JSON format")
        with e.state:
            if not e.session_open:
                e.stats["conflicts"] += 1
                e.event("finish:409")
                return self.detail(409, "finish_weight_update called without a weight update "
                                        "in progress. Call start_weight_update first.")
        with e.lock:
            res = e.ranks.all("finish")
        with e.state:
            e.session_open = False
            e.stats["finishes"] += 1
            version = body.get("weight_version") if e.reads_weight_version() else None
            if version not in (None, ""):
                e.weight_version = str(version)
            e.event(f"finish:{version}")
        if not all(ok for ok, _ in res):
            return self.internal_error("; ".join(m for ok, m in res if not ok))
        return self.reply(200, {"message": "Weight update finished"})

    def die(self, reason):
        with ENGINE.state:
            ENGINE.dead = reason
        return self.internal_error(f"engine died: {reason}")

    def update(self, body):
        e = ENGINE
        e.call("update")
        if body is None:
            return self.detail(400, "Invalid JSON format")
        info = body.get("update_info")
        if info is None:
            return self.detail(400, "Missing 'update_info' in request body")
        with e.state:
            index = e.updates
            e.updates += 1
            e.stats["updates"] += 1
            outside = e.has_sessions() and not e.session_open and not e.args.lenient_sessions
            if outside:
                e.stats["conflicts"] += 1
                e.event("update:409")
        if outside:
            return self.detail(409, "update_weights called without a weight update in "
                                    "progress. Call start_weight_update first.")
        if index == e.knobs["die_at_update"]:
            print(f"{stamp()} dying at update {index} as asked", flush=True)
            os._exit(17)
        if index == e.knobs["hang_update_at"]:
            time.sleep(3600)
        if index == e.knobs["fail_update_at"]:
            return self.send(500, b"Internal Server Error", "text/plain")
        if index == e.knobs["conflict_update_at"]:
            return self.detail(409, "update_weights: out of order")
        if e.args.backend == "nccl":
            return self.nccl_update(info)
        if not isinstance(info, dict):
            return self.internal_error("update_info must be an object")
        if "ipc_handles_pickled" in info:
            if "ipc_handles" in info:
                return self.internal_error("ValueError: Cannot specify both `ipc_handles` and "
                                           "`ipc_handles_pickled`")
            if not e.knobs["insecure_serialization"]:
                return self.detail(400, INSECURE)
        unknown = set(info) - e.update_fields()
        if unknown:
            return self.internal_error(f"TypeError: __init__() got an unexpected keyword "
                                       f"argument {sorted(unknown)[0]!r}")
        if "ipc_handles_pickled" not in info:
            return self.internal_error("Either `ipc_handles` or `ipc_handles_pickled` must be "
                                       "provided (ipc_handles only travels over Ray)")
        packed = bool(info.get("packed", False))
        if e.args.packed != "any" and packed != (e.args.packed == "true"):
            return self.internal_error(f"this server's weight-transfer config has packed="
                                       f"{e.args.packed}; the request has packed={packed}")
        if "weights" in e.sleeping_tags:
            return self.die("update_weights while the weights sleep: EngineCore segfault "
                            "(#57853)")
        with e.lock:
            res = e.ranks.all("update", {"update_info": info, "form_rule": e.form_rule()})
        bad = [m for ok, m in res if not ok]
        if bad:
            if any("IPC handle not found" in m for m in bad):
                return self.die(bad[0])
            return self.internal_error("; ".join(bad))
        with e.state:
            e.stats["updates_ok"] += 1
            e.stats["packed" if packed else "unpacked"] += 1
            e.stats["tensors"] += len(info.get("names", []))
            for key in ("first_chunk", "last_chunk"):
                if info.get(key):
                    e.stats[key] += 1
            for _, r in res[:1]:
                for form, n in r["forms"].items():
                    e.stats[form] += 1 if n else 0
            e.event(f"update:{len(info.get('names', []))}:{'packed' if packed else 'unpacked'}")
        self.reply(200, {"message": "Weights updated"})

    def weight_checker(self, body):
        """POST /weight_checker {"action": "checksum"}: every worker's checksums keyed as vLLM
        keys them ("dp0:pp0:pcp0:tp<r>:ep0:<name>"); 409 while paused."""
        e = ENGINE
        if body is None or body.get("action") != "checksum":
            return self.detail(400, "unknown action")
        if e.paused:
            return self.detail(409, "engine is paused")
        with e.lock:
            res = e.ranks.all("checksums")
        checksums = {f"dp0:pp0:pcp0:tp{r}:ep0:{name}": crc
                     for r, (ok, crcs) in enumerate(res) if ok for name, crc in crcs.items()}
        self.reply(200, {"checksums": checksums})

    def nccl_init(self, body):
        """The NCCL backend's init: init_info read as its dataclass reads it (>= 0.28.0 the
        packed fields, >= 0.30.0 nccl_unique_id_b64), one rendezvous of the two, then every
        worker joins as rank_offset + its index and runs the warm-up all-reduce; the answer
        comes once all have."""
        e = ENGINE
        if body is None or "init_info" not in body:
            return self.reply(400, {"message": "init_info is required"})
        info = body["init_info"]
        if isinstance(info, dict) and isinstance(info.get("master_port"), int):
            with e.state:
                e.store_port = info["master_port"]
        time.sleep(e.args.init_delay_ms / 1000)
        fields = {"master_address", "master_port", "rank_offset", "world_size"}
        if at_least(e.version, (0, 28, 0)):
            fields |= {"packed", "packed_buffer_size_bytes", "packed_num_buffers"}
        if at_least(e.version, (0, 30, 0)):
            fields.add("nccl_unique_id_b64")
        if not isinstance(info, dict) or set(info) - fields:
            return self.internal_error(f"Invalid init_info for NCCLWeightTransferEngine: "
                                       f"unexpected keys in {info!r}")
        has_uid = "nccl_unique_id_b64" in info
        if has_uid == ("master_address" in info or "master_port" in info):
            return self.internal_error("NCCLWeightTransferInitInfo: pass nccl_unique_id_b64 OR "
                                       "master_address/master_port")
        uid = None
        if has_uid:
            try:
                uid = base64.b64decode(info["nccl_unique_id_b64"], validate=True)
            except (ValueError, TypeError):
                uid = b""
            if len(uid) != 128:
                return self.internal_error("nccl_unique_id_b64 is not valid standard base64 of "
                                           "128 bytes")
        try:
            world, offset = int(info["world_size"]), int(info["rank_offset"])
        except (KeyError, TypeError, ValueError) as err:
            return self.internal_error(f"init_info: {err!r}")
        if offset < 1 or offset + len(e.ranks) > world:
            return self.internal_error("rank_offset and world_size leave no room for the workers")
        with e.lock:
            res = e.ranks.all("nccl_init", (info, world, uid))
            if not all(ok for ok, _ in res):
                return self.internal_error("; ".join(m for ok, m in res if not ok))
            with e.state:
                e.group = {"world_size": world, "rank_offset": offset,
                           "packed": bool(info.get("packed", False)),
                           "chunk": int(info.get("packed_buffer_size_bytes", 1 << 30))}
                e.inits += 1
                e.event("init")
        self.reply(200, {"message": "Weight transfer initialized"})

    def nccl_update(self, info):
        """The NCCL backend's receive: update_info read as its dataclass (the packed fields move
        to init_info at 0.28.0), then one broadcast per tensor or packed chunks on every
        worker."""
        e = ENGINE
        if e.group is None:
            return self.internal_error("the weight transfer engine is not initialized")
        fields = {"names", "dtype_names", "shapes"}
        moved = at_least(e.version, (0, 28, 0))
        if not moved:
            fields |= {"packed", "packed_buffer_size_bytes", "packed_num_buffers"}
        if not isinstance(info, dict) or set(info) - fields:
            return self.internal_error(f"Invalid update_info for NCCLWeightTransferEngine: "
                                       f"unexpected keys in {info!r}")
        names, dtypes, shapes = (info.get(k) for k in ("names", "dtype_names", "shapes"))
        if not all(isinstance(v, list) for v in (names, dtypes, shapes)) or \
                not len(names) == len(dtypes) == len(shapes):
            return self.internal_error("names, dtype_names and shapes differ in length")
        source = e.group if moved else {"packed": info.get("packed", False),
                                        "chunk": info.get("packed_buffer_size_bytes", 1 << 30)}
        with e.lock:
            res = e.ranks.all("nccl_update", (names, dtypes, shapes, bool(source["packed"]),
                                              int(source["chunk"]), e.args.corrupt_tensor))
        bad = [m for ok, m in res if not ok]
        if bad:
            return self.internal_error("; ".join(bad))
        with e.state:
            e.last_chunks = res[0][1]
            e.stats["updates_ok"] += 1
            e.stats["tensors"] += len(names)
            e.event(f"update:{len(names)}:broadcast")
        self.reply(200, {"message": "Weights updated"})


def main():
    global ENGINE
    ap = argparse.ArgumentParser()
    add_engine_flags(ap, "worker")
    ap.add_argument("--version", default="0.23.0", help="what GET /version answers")
    ap.add_argument("--entry-form", choices=("auto", "any", "args", "func_args"), default="auto",
                    help="the IPC entry this build reads (auto: by version; any takes both)")
    ap.add_argument("--packed", choices=("any", "true", "false"), default="any",
                    help="the server config's packed setting; any takes both")
    ap.add_argument("--lenient-sessions", action="store_true",
                    help="let /update_weights run outside a start/finish session")
    ap.add_argument("--no-session-routes", action="store_true",
                    help="a build from before PR #39212: no /start_weight_update, "
                         "/finish_weight_update")
    ap.add_argument("--no-docs", action="store_true", help="serve no /openapi.json")
    ap.add_argument("--missing-route", action="append", default=[],
                    help="a POST route this server lacks (404, and not in /openapi.json)")
    ap.add_argument("--no-world-size", action="store_true",
                    help="serve no GET /get_world_size (vLLM serves it in dev mode only)")
    ap.add_argument("--refuse-pickle", action="store_true",
                    help="a server without VLLM_ALLOW_INSECURE_SERIALIZATION=1")
    ap.add_argument("--die-at-update", type=int, default=-1,
                    help="the server exits when the Nth /update_weights (0-based) arrives")
    ap.add_argument("--backend", choices=("ipc", "nccl"), default="ipc",
                    help="the weight-transfer backend the server was started with")
    ap.add_argument("--fail-update-at", type=int, default=-1,
                    help="the Nth /update_weights (0-based) answers 500 without receiving")
    ap.add_argument("--conflict-update-at", type=int, default=-1,
                    help="the Nth /update_weights answers 409 without receiving")
    ap.add_argument("--init-delay-ms", type=int, default=0,
                    help="NCCL: each init waits this long before the workers join (a slow start)")
    ap.add_argument("--weight-checker", action="store_true", help="serve POST /weight_checker")
    ap.add_argument("--corrupt-tensor", default="",
                    help="NCCL: the first worker keeps this tensor with its first byte flipped")
    args = ap.parse_args()
    parse_version(args.version)
    ENGINE = Engine(args, gpus_of(args))
    serve(Handler, args, f"vllm engine {args.version}, {args.backend} backend")


if __name__ == "__main__":
    main()
