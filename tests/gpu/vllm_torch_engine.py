"""A vLLM server with the IPC weight-transfer backend (--weight-transfer-config '{"backend":"ipc"}',
VLLM_SERVER_DEV_MODE=1, VLLM_ALLOW_INSECURE_SERIALIZATION=1) as wsyncd's colocated path sees it,
built from real torch on real GPUs: one process per worker (TP rank), each on its own GPU, holding
the model's parameters (made at first sight and copied into afterwards, as
sglang_torch_engine.py does). docs/engines/vllm.md.

POST /update_weights {"update_info": {...}} follows IPCWeightTransferEngine.receive_weights:
- names, dtype_names and shapes of equal length, and ipc_handles_pickled: standard base64 of a
  pickle that vLLM reads with plain pickle.loads. Here an unpickler of exact (module, name) pairs
  admits only what the IPC path carries: torch.multiprocessing.reductions.rebuild_cuda_tensor,
  torch.Tensor, torch.Size, torch.storage.TypedStorage/UntypedStorage and torch dtypes;
- unpacked: a list with one dict {gpu_uuid: ENTRY} per name; packed ("packed": true): one dict
  {gpu_uuid: ENTRY} for the chunk's 1-D uint8 buffer, with tensor_sizes (bytes per tensor;
  first_chunk / last_chunk are accepted and counted);
- ENTRY is the 15 rebuild arguments alone (newest builds) or (FUNC, ARGS) (older builds).
  --entry-form args|func_args runs that build's code, which fails on the other form as it would
  (IndexError / ValueError: a 500); --entry-form any (the default) takes both and counts them;
- each worker picks the entry of str(get_device_properties(current).uuid) (none: ValueError, and
  the engine is dead from then on, /health 503, as vLLM #57853 reports), overwrites args[6] with
  its current device index and calls torch's real rebuild_cuda_tensor, so the bytes are read
  through CUDA IPC from wsyncd's slot;
- packed: the buffer is cut to sum(tensor_sizes), split by tensor_sizes, each piece viewed as its
  dtype and shape and cloned (packed_ipc_consumer); unpacked: the views are loaded as they are;
- the tensors are copied into the parameters, then torch.cuda.synchronize();
- answers {"message": "Weights updated"}; an exception in a worker is HTTP 500; a body without
  update_info 400 {"detail": ...}; --refuse-pickle answers as a server without
  VLLM_ALLOW_INSECURE_SERIALIZATION=1 (400).
Session (PR #39212, rl_state_machine.py's strict variant): /start_weight_update while one is open,
and /update_weights or /finish_weight_update while none is, answer 409 {"detail": ...}
(--lenient-sessions lets /update_weights run outside a session; --no-session-routes serves a build
from before #39212, where those two routes are 404). /finish_weight_update takes an optional
{"weight_version": str}, synchronises and closes the session.
Other routes: GET /version ({"version": --version}), POST /init_weight_transfer_engine
({"init_info": {}}; 400 without it; keys other than packed, packed_buffer_size_bytes and
packed_num_buffers fail as the dataclass would, 500), POST /pause?mode=abort|wait|keep (400 on
another), POST /resume, GET /is_paused, POST /sleep?level=1|2 (weights to host memory, level 2:
dropped), POST /wake_up?tags=..., GET /is_sleeping, POST /reset_prefix_cache, GET /health,
GET /get_world_size, GET /weight_info, POST /update_weight_version. Loading while the weights sleep
is vLLM #57853's EngineCore segfault: the server exits (139).

GET /sim/checksums: {"weight_version", "ranks": {"1": {name: crc32}}, "digests", plus /sim/stats};
GET /sim/stats: how many requests came in each form (packed / unpacked, args / func_args), chunk
flags, session calls and refusals (409s), the last error and the events in order.

  python3 vllm_torch_engine.py --port 30031 --gpus 0 [--version 0.23.0] [--entry-form any]
"""

import argparse
import base64
import json
import os
import signal
import sys
import threading
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_engine_common import (FifoLock, JsonReplies, RankPool, digest_of,  # noqa: E402
                                 exact_name_unpickler, load_weights, rank_checksums, stamp,
                                 unpickle)

INIT_KEYS = {"packed", "packed_buffer_size_bytes", "packed_num_buffers"}
PAUSE_MODES = ("abort", "wait", "keep")


def entry_form(value):
    """'func_args' for a (FUNC, ARGS) pair, 'args' for the rebuild arguments alone."""
    if isinstance(value, tuple) and len(value) == 2 and callable(value[0]):
        return "func_args"
    return "args"


def rank_main(gpu, tp_rank, conn, die_at_update, form_rule):
    import torch
    from torch.multiprocessing import reductions

    torch.cuda.set_device(gpu)
    uuid = str(torch.cuda.get_device_properties(gpu).uuid)
    unpickler = exact_name_unpickler(
        reductions.rebuild_cuda_tensor, storages=("TypedStorage", "UntypedStorage"),
        refusal="is not admitted by this simulator")
    params, crcs = {}, {}
    updates = 0

    def rebuild(value, device_index, forms):
        form = entry_form(value)
        forms[form] = forms.get(form, 0) + 1
        rule = form if form_rule == "any" else form_rule
        if rule == "args":  # newest builds: the ARGS tuple, rebuilt with torch's function
            list_args = list(value)
            list_args[6] = device_index
            return reductions.rebuild_cuda_tensor(*list_args)
        func, args = value  # older builds: (FUNC, ARGS), func(*args)
        list_args = list(args)
        list_args[6] = device_index
        return func(*list_args)

    def pick(handle_dict):
        if not isinstance(handle_dict, dict) or uuid not in handle_dict:
            keys = list(handle_dict.keys()) if isinstance(handle_dict, dict) else handle_dict
            raise ValueError(f"IPC handle not found for GPU UUID {uuid}. Available UUIDs: {keys}")
        return handle_dict[uuid]

    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "update":
                updates += 1
                if updates - 1 == die_at_update:
                    print(f"rank {tp_rank}: dying at update {updates - 1} as asked", flush=True)
                    os._exit(17)
                info = arg["update_info"]
                names, dtype_names, shapes = info["names"], info["dtype_names"], info["shapes"]
                if len(dtype_names) != len(names) or len(shapes) != len(names):
                    raise ValueError("`dtype_names` and `shapes` should be of the same size as "
                                     f"`names`: got {len(dtype_names)}, {len(shapes)} and "
                                     f"{len(names)}")
                handles = unpickle(base64.b64decode(info["ipc_handles_pickled"]), unpickler)
                packed = info.get("packed", False)
                device_index = torch.cuda.current_device()
                forms = {}
                if packed:
                    sizes = info.get("tensor_sizes")
                    if sizes is None:
                        raise ValueError("`tensor_sizes` is required when packed=True")
                    assert isinstance(handles, dict), "packed: ipc_handles must be one dict"
                    buf = rebuild(pick(handles), device_index, forms)
                    buf = buf[:sum(sizes)]
                    pieces = buf.split(sizes)
                    weights = [(n, p.contiguous().view(getattr(torch, d)).view(*s).clone())
                               for n, s, d, p in zip(names, shapes, dtype_names, pieces)]
                else:
                    assert isinstance(handles, list), "unpacked: ipc_handles must be a list"
                    if len(handles) != len(names):
                        raise ValueError(f"`ipc_handles` should be of the same size as `names`: "
                                         f"got {len(handles)} and {len(names)}")
                    weights = []
                    for name, h in zip(names, handles):
                        weights.append((name, rebuild(pick(h), device_index, forms)))
                if arg["weights_asleep"] and weights:
                    print(f"rank {tp_rank}: weights loaded while asleep: EngineCore segfaults "
                          "(vLLM #57853)", flush=True)
                    os._exit(139)
                load_weights(params, weights)
                n = len(weights)
                del weights
                torch.cuda.synchronize()
                crcs.clear()
                conn.send((True, {"loaded": n, "forms": forms, "packed": bool(packed)}))
            elif cmd == "finish":
                torch.cuda.synchronize()
                conn.send((True, "ok"))
            elif cmd == "sleep":
                torch.cuda.synchronize()
                if arg == 2:
                    params.clear()
                else:
                    for name in list(params):
                        params[name] = params[name].to("cpu")
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                crcs.clear()
                conn.send((True, "ok"))
            elif cmd == "wake_weights":
                for name in list(params):
                    params[name] = params[name].to(f"cuda:{gpu}")
                torch.cuda.synchronize()
                conn.send((True, "ok"))
            elif cmd == "checksums":
                conn.send((True, dict(rank_checksums(params, crcs))))
            elif cmd == "exit":
                conn.send((True, "bye"))
                return
        except Exception as e:
            traceback.print_exc()
            conn.send((False, f"{type(e).__name__}: {e}"))


class Engine:
    def __init__(self, args, gpus):
        self.ranks = RankPool(rank_main, gpus, args.die_at_update, args.entry_form)
        self.lock = FifoLock()
        self.state = threading.Lock()
        self.args = args
        self.session_open = False
        self.paused = False
        self.sleeping_tags = set()
        self.dead = ""
        self.weight_version = None
        self.stats = {"updates": 0, "updates_ok": 0, "packed": 0, "unpacked": 0, "args": 0,
                      "func_args": 0, "first_chunk": 0, "last_chunk": 0, "init": 0,
                      "starts": 0, "finishes": 0, "conflicts": 0, "tensors": 0}
        self.events = []
        self.last_error = ""

    def event(self, text):
        self.events.append(text)
        del self.events[:-500]

    def snapshot(self):
        return {"weight_version": self.weight_version, "version": self.args.version,
                "stats": dict(self.stats), "session_open": self.session_open,
                "paused": self.paused, "is_sleeping": bool(self.sleeping_tags),
                "sleeping_tags": sorted(self.sleeping_tags), "dead": self.dead,
                "events": list(self.events), "last_error": self.last_error}


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

    def json_body(self, required):
        raw = self.raw_body()
        if not raw.strip():
            return None if required else {}
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def do_GET(self):
        e = ENGINE
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/health":
            if e.dead:
                return self.send(503, b"", "text/plain")
            return self.send(200, b"", "text/plain")
        if url.path == "/version":
            return self.reply(200, {"version": e.args.version})
        if url.path == "/is_sleeping":
            return self.reply(200, {"is_sleeping": bool(e.sleeping_tags)})
        if url.path == "/is_paused":
            return self.reply(200, {"is_paused": e.paused})
        if url.path == "/get_world_size":
            return self.reply(200, {"world_size": len(e.ranks)})
        if url.path == "/weight_info":
            return self.reply(200, {"weight_version": e.weight_version})
        if url.path == "/sim/stats":
            with e.state:
                return self.reply(200, e.snapshot())
        if url.path == "/sim/checksums":
            with e.lock:
                res = e.ranks.all("checksums")
            ranks = {str(i + 1): c for i, (ok, c) in enumerate(res) if ok}
            with e.state:
                out = e.snapshot()
            out.update({"ranks": ranks, "digests": {r: digest_of(c) for r, c in ranks.items()},
                        "updates_received": out["stats"]["updates"]})
            return self.reply(200, out)
        self.detail(404, "Not Found")

    def do_POST(self):
        e = ENGINE
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        path = url.path
        if path in ("/start_weight_update", "/finish_weight_update") and \
                e.args.no_session_routes:
            return self.detail(404, "Not Found")
        if path == "/init_weight_transfer_engine":
            body = self.json_body(required=True)
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
            if self.json_body(required=False) is None:
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
            body = self.json_body(required=False)
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
                if body.get("weight_version") is not None:
                    e.weight_version = str(body["weight_version"])
                e.event(f"finish:{body.get('weight_version')}")
            if not all(ok for ok, _ in res):
                return self.internal_error("; ".join(m for ok, m in res if not ok))
            return self.reply(200, {"message": "Weight update finished"})
        if path == "/update_weights":
            return self.update()
        if path == "/pause":
            mode = query.get("mode", ["abort"])[-1]
            if mode not in PAUSE_MODES:
                return self.detail(400, f"Invalid mode {mode!r}; expected one of {PAUSE_MODES}")
            with e.state:
                e.paused = True
                e.event(f"pause:{mode}")
            return self.reply(200, {"status": "paused"})
        if path == "/resume":
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
            with e.state:
                e.event("reset_prefix_cache")
            return self.send(200, b"", "text/plain")
        if path == "/update_weight_version":
            body = self.json_body(required=True)
            if body is None or "new_version" not in body:
                return self.detail(400, "new_version is required")
            with e.state:
                e.weight_version = str(body["new_version"])
            return self.reply(200, {"success": True, "new_version": e.weight_version})
        if path == "/abort_requests":
            return self.reply(200, {"status": "aborted", "aborted": 0})
        self.detail(404, "Not Found")

    def update(self):
        e = ENGINE
        body = self.json_body(required=True)
        if body is None:
            return self.detail(400, "Invalid JSON format")
        info = body.get("update_info")
        if info is None:
            return self.detail(400, "Missing 'update_info' in request body")
        with e.state:
            e.stats["updates"] += 1
            dead = e.dead
            outside = not e.session_open and not e.args.lenient_sessions and \
                not e.args.no_session_routes
            if outside and not dead:
                e.stats["conflicts"] += 1
                e.event("update:409")
        if dead:
            return self.internal_error(f"EngineCore is dead: {dead}")
        if outside:
            return self.detail(409, "update_weights called without a weight update in "
                                    "progress. Call start_weight_update first.")
        if not isinstance(info, dict):
            return self.internal_error("update_info must be an object")
        if "ipc_handles_pickled" in info and e.args.refuse_pickle:
            return self.detail(400, "Refusing to deserialize `ipc_handles_pickled` without "
                                    "VLLM_ALLOW_INSECURE_SERIALIZATION=1")
        if "ipc_handles_pickled" not in info:
            return self.internal_error("Either `ipc_handles` or `ipc_handles_pickled` must be "
                                       "provided (ipc_handles only travels over Ray)")
        packed = info.get("packed", False)
        if e.args.packed != "any" and bool(packed) != (e.args.packed == "true"):
            return self.internal_error(f"this server's weight-transfer config has packed="
                                       f"{e.args.packed}; the request has packed={packed}")
        with e.lock:
            asleep = "weights" in e.sleeping_tags
            res = e.ranks.all("update", {"update_info": info, "weights_asleep": asleep})
        bad = [m for ok, m in res if not ok]
        if bad:
            with e.state:
                if any("IPC handle not found" in m for m in bad):
                    e.dead = bad[0]
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


def main():
    global ENGINE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--gpus", required=True, help="comma-separated GPU index per worker")
    ap.add_argument("--version", default="0.23.0", help="what GET /version answers")
    ap.add_argument("--entry-form", choices=("any", "args", "func_args"), default="any",
                    help="the IPC entry this build reads: args (newest), func_args (older) or any")
    ap.add_argument("--packed", choices=("any", "true", "false"), default="any",
                    help="the server config's packed setting (generation 3); any takes both")
    ap.add_argument("--lenient-sessions", action="store_true",
                    help="let /update_weights run outside a start/finish session")
    ap.add_argument("--no-session-routes", action="store_true",
                    help="a build from before PR #39212: no /start_weight_update, "
                         "/finish_weight_update")
    ap.add_argument("--refuse-pickle", action="store_true",
                    help="a server without VLLM_ALLOW_INSECURE_SERIALIZATION=1")
    ap.add_argument("--die-at-update", type=int, default=-1,
                    help="the workers exit when the Nth /update_weights (0-based) reaches them")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ENGINE = Engine(args, [int(g) for g in args.gpus.split(",")])
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"vllm torch engine {args.version} on :{args.port}, gpus {args.gpus}, entry form "
          f"{args.entry_form}, packed {args.packed}, pid {os.getpid()}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
