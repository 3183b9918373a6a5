#!/usr/bin/env python3
"""SGLang's server as wsyncd sees it: one simulator, two memory backends (tests/sim/memory.py).
`--memory host` keeps the ranks' tensors in host memory, maps wsyncd's shared-memory slots and
receives broadcasts over the host collective (CI, no torch); `--memory cuda` holds them on real
GPUs with real torch, CUDA IPC and NCCL (the device runs). One process per TP rank either way,
running the same receive code (sglang_ranks.py); what the code relies on is written in
docs/engines/sglang.md.

- The broadcast path: POST /init_weights_update_group joins every rank as SGLang's
  init_custom_process_group does (tcp:// TCPStore, PrefixStore(group), the c10d helper) as rank
  rank_offset + tp_rank; POST /update_weights_from_distributed receives each bucket inside the
  request (flattened: one uint8 broadcast viewed per entry; null: one async broadcast per
  tensor) and copies it into the parameters; POST /destroy_weights_update_group.
- POST /update_weights_from_tensor takes one standard-base64 pickle per TP rank (rank i takes
  entry i; fewer entries than ranks: 400), loaded by an unpickler of exact (module, name) pairs,
  as SGLang's SafeUnpickler does since September 2026; rebuild_cuda_tensor takes the device as
  the rank's GPU UUID (SGLang's patched reductions; another GPU's UUID is refused). load_format
  null is list[(name, tensor)]; "flattened_bucket" views flat[start_idx:end_idx] as each entry's
  dtype, or, before 0.5.6 (--version), reads it in the flat tensor's own dtype, reshapes and
  casts by value, as SGLang did before PR #13413. Failures answer 400 {"success": false}.
- POST /update_weights_from_ipc (the map-once route, >= 0.5.5; 404 before): each rank looks up
  "GPU-<its uuid>" in zmq_handles (missing: 400) and runs checkpoint-engine's worker
  (tests/sim/checkpoint_engine_worker.py, generation --ce-worker) on a REP socket there, in its
  own process as SGLang's scheduler processes do; the request answers 200 once every rank is
  done, or 400 with the first failure. On every update route flush_cache defaults to true, and a
  request that succeeds with weight_version records it and says "Weight version updated to V."
  in its message, as SGLang does (--label-in-request-ignored: an older build that does neither).
- --sessions: a session build. POST /begin_weight_update {"selector"} and /end_weight_update
  exist (GET on them: 405); an update outside a session, or a begin while one is open, kills
  the process (the scheduler's assert).
- GET /get_server_info reports --version (default 0.5.6) and tp_size; GET /openapi.json lists
  the routes (404 with --no-docs); release/resume_memory_occupation by tag (resuming a tag not
  released: 500 KeyError; a load into released weights: 500); pause/continue_generation,
  update_weight_version, flush_cache.
- GET /sim/checksums: weight_version, ranks (CRC-32 per tensor, by global rank), digests,
  updates_received (update requests, and on the map-once route rank 0's buckets), paused, group,
  ipc_opens, stream_maps, post_hooks, offload_tags, memory_calls, ipc_route_bodies,
  request_flushes (successful update requests that flushed), route_calls (POSTs to /flush_cache
  and /update_weight_version), session_open, session_log, last_error, master_port, max_waiting_requests.
  POST /sim/knobs (its answer: the knobs and updates_received): fail_update_at,
  hang_update_at, die_at_update (the n-th update, from 0; on the map-once route the n-th bucket)
  and stranger_at_update, the delivery knobs (oversize_routes, oversize_mib, trickle_routes,
  trickle_ms) and those of the broadcast path below. GET /sim/pids lists the rank processes'
  pids (without asking the ranks, which may be stuck in a collective). POST /sim/start_stranger
  {"wsyncd_pid", "at_update"} starts tests/sim/zmq_stranger.py on that wsyncd's sockets, let
  go at that bucket; POST /sim/stop_stranger answers what it took. Benchmark: POST /sim/mode
  {"data_plane"}, POST /bench/receive {"sizes"}, POST /bench/loads (each rank's load time per
  broadcast update).
- The broadcast path's faults, by /sim/knobs or the flags of the same names: fail_init,
  init_delay_ms (before the ranks join), answer_delay_ms (after a bucket is received, inside
  the update's turn), never_fetch_id (the ranks join the store but their first collective never
  completes: the device_id hazard), fail_destroy (400, the group stays), corrupt_tensor (TP
  rank 0 keeps that tensor with its first byte flipped), data_plane (updates answered without
  receiving; POST /sim/receive_ahead {"sizes"} posts the receives, GET /sim/received lists each
  rank's CRC-32 per bucket). --weights-checker serves POST /weights_checker {"action":
  "checksum"} (SGLang's {success, message, ranks: [{checksums, per_gpu_checksum,
  parallelism_info}]}). max_waiting_requests is 2 once a client sent a request on a connection
  before the previous answer came back (it pipelines), else 1.

  sglang_engine.py --port P (--gpus G[,G...] | --tp N) [--memory host|cuda] [--version V]
                   [--sessions] [--no-docs] [--ce-worker g1|g4] [--die-at-update N [--die-rank R]]
                   [--fail-init] [--fail-update-at N] [--hang-update-at N] [--answer-delay-ms MS]
                   [--weights-checker] [--oversize-route R --oversize-mib M]
                   [--trickle-route R --trickle-ms MS]
"""

import argparse
import json
import os
import sys
import threading
import time
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "sim"))
sys.path.insert(0, HERE)
from engine_common import (FifoLock, JsonReplies, RankPool, add_engine_flags,  # noqa: E402
                           count_update, gpus_of, next_update, ranks_and_stats, serve, stamp)
from sglang_ranks import rank_main  # noqa: E402

POSTS = ["/update_weights_from_tensor", "/update_weights_from_ipc", "/pause_generation",
         "/continue_generation", "/update_weight_version", "/flush_cache",
         "/release_memory_occupation", "/resume_memory_occupation",
         "/init_weights_update_group", "/update_weights_from_distributed",
         "/destroy_weights_update_group"]


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


def start_stranger(engine, wsyncd_pid):
    """Starts tests/sim/zmq_stranger.py as a child of the engine's process, on wsyncd
    `wsyncd_pid`'s sockets, held until arm_stranger."""
    import subprocess
    stranger = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "..", "..", "sim", "zmq_stranger.py"),
         "--wsyncd-pid", str(wsyncd_pid), "--seconds", "60", "--wait-signal"],
        stdout=subprocess.PIPE, text=True)
    if stranger.stdout.readline().strip() != "ready":
        raise RuntimeError("the stranger did not start")
    with engine.state:
        engine.stranger = stranger


def arm_stranger(engine):
    """Lets the stranger connect, and waits (up to 10 s) until wsyncd refused or admitted it."""
    import select
    import signal
    with engine.state:
        stranger = engine.stranger
    if stranger is None:
        return
    stranger.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stranger.stdout], [], [], 0.1)
        if ready and stranger.stdout.readline().startswith(("refused", "admitted")):
            return


class Engine:
    def __init__(self, args, gpus):
        uint8_reader = version_tuple(args.version) >= (0, 5, 6, 1)
        self.ranks = RankPool(rank_main, gpus, args.memory, uint8_reader, args.die_at_update,
                              args.die_rank)
        self.args = args
        self.lock = FifoLock()  # SGLang serialises weight updates, in arrival order
        self.state = threading.Lock()
        self.group = None
        self.rank_offset = 1
        self.weight_version = "default"
        self.paused = False
        self.master_port = 0
        self.updates = 0
        self.session_open = False
        self.session_log = []  # "begin <selector>", "end", "update selector=<s>" in order
        self.offload_tags = set()  # released by release_memory_occupation, not yet resumed
        self.memory_calls = []
        self.ipc_route_bodies = []
        self.request_flushes = 0  # successful update requests that flushed the cache
        self.route_calls = {}  # POST /flush_cache and /update_weight_version: how many
        self.last_error = ""
        # POST /sim/knobs sets these; the flags of the same names set them at start.
        self.knobs = {"fail_update_at": args.fail_update_at,
                      "hang_update_at": args.hang_update_at, "die_at_update": -1,
                      "stranger_at_update": -1, "fail_init": args.fail_init,
                      "init_delay_ms": 0, "answer_delay_ms": args.answer_delay_ms,
                      "never_fetch_id": False, "fail_destroy": False, "corrupt_tensor": "",
                      "data_plane": False}
        self.stranger = None  # the process /sim/start_stranger started
        # Each update_weights_from_tensor's time in the handler: [began, answered] on the
        # system-wide monotonic clock, which the benchmark reads too.
        self.ipc_handler_ms = []
        self.ipc_handled = 0

    def snapshot(self):
        ranks, digests, stats = ranks_and_stats(self)
        with self.state:
            return {"weight_version": self.weight_version, "ranks": ranks,
                    "digests": digests,
                    "updates_received": self.updates, "paused": self.paused,
                    "group": self.group or "", "master_port": self.master_port,
                    "max_waiting_requests": Handler.max_waiting,
                    "ipc_opens": [s["ipc_opens"] for s in stats],
                    "stream_maps": [s["stream_maps"] for s in stats],
                    "post_hooks": [s["post_hooks"] for s in stats],
                    "offload_tags": sorted(self.offload_tags),
                    "memory_calls": list(self.memory_calls),
                    "ipc_route_bodies": list(self.ipc_route_bodies),
                    "request_flushes": self.request_flushes,
                    "route_calls": dict(self.route_calls),
                    "session_open": self.session_open, "session_log": list(self.session_log),
                    "memory": self.args.memory, "last_error": self.last_error}


ENGINE = None


def session_guard(e, body):
    """A session build's scheduler asserts that every weight update sits inside a session: the
    process dies otherwise. The update is logged with its selector."""
    with e.state:
        if not e.session_open:
            print("AssertionError: weight update outside a session (the scheduler dies)",
                  flush=True)
            os._exit(6)
        e.session_log.append(f"update selector={body.get('selector', '(none)')}")


def took_request(body, message):
    """After an update request succeeded, what SGLang does with its flush_cache (default true) and
    weight_version: flushes the cache, records the label and says so in `message` (a build that
    ignores the field, --label-in-request-ignored, does neither of the last two)."""
    e = ENGINE
    with e.state:
        if body.get("flush_cache", True):
            e.request_flushes += 1
        if body.get("weight_version") is not None and not e.args.label_in_request_ignored:
            e.weight_version = body["weight_version"]
            message += f" Weight version updated to {body['weight_version']}."
    return message


def outcome(results, ok_message):
    """(status, body) of the ranks' answers: 400 with their failures (kept as last_error), else
    200 with `ok_message`."""
    bad = [m for ok, m in results if not ok]
    if bad:
        with ENGINE.state:
            ENGINE.last_error = "; ".join(bad)
        return 400, {"success": False, "message": "; ".join(bad)}
    return 200, {"success": True, "message": ok_message}


class Handler(JsonReplies, BaseHTTPRequestHandler):
    def result(self, results, ok_message):
        return self.reply(*outcome(results, ok_message))

    def do_OPTIONS(self):
        """As FastAPI: 405 where the path is served (for any method), 404 where nothing is."""
        e, path = ENGINE, urllib.parse.urlsplit(self.path).path
        served = ([p for p in POSTS if p not in e.args.missing_route]
                  + (["/begin_weight_update", "/end_weight_update"] if e.args.sessions else [])
                  + ["/health", "/get_server_info"] + ([] if e.args.no_docs else ["/openapi.json"]))
        if path in served:
            return self.reply(405, {"detail": "Method Not Allowed"})
        return self.reply(404, {"detail": "Not Found"})

    def do_GET(self):
        e, path = ENGINE, urllib.parse.urlsplit(self.path).path
        if path == "/health":
            return self.reply(200, {})
        if path == "/get_server_info":
            return self.reply(200, {"version": e.args.version, "tp_size": len(e.ranks),
                                    "dp_size": 1, "pp_size": 1,
                                    "weight_version": e.weight_version, "simulator": True})
        if path == "/openapi.json":
            if e.args.no_docs:
                return self.reply(404, {"detail": "Not Found"})
            posts = POSTS + (["/begin_weight_update", "/end_weight_update"]
                             if e.args.sessions else [])
            paths = {p: {"post": {"summary": p}} for p in posts
                     if p not in e.args.missing_route and p not in e.args.unlisted_route}
            paths["/get_server_info"] = {"get": {"summary": "server info"}}
            return self.reply(200, {"openapi": "3.1.0", "info": {"title": "FastAPI"},
                                    "paths": paths})
        if path in ("/begin_weight_update", "/end_weight_update") and e.args.sessions:
            return self.reply(405, {"detail": "Method Not Allowed"})
        if path in POSTS and path not in e.args.missing_route:
            return self.reply(405, {"detail": "Method Not Allowed"})  # as FastAPI
        if path == "/sim/checksums":
            return self.reply(200, e.snapshot())
        if path == "/sim/pids":
            # Without the ranks' attention: a rank may be stuck in a collective.
            return self.reply(200, {"ranks": [p.pid for p, _ in e.ranks.ranks]})
        if path == "/sim/ipc_phases":
            # The rank side of each update_weights_from_tensor request and the handler's span
            # for it (body read to answer), for the colocated benchmark's profile.
            with e.lock:
                res = e.ranks.all("ipc_phases")
            ranks = [v for ok, v in res if ok]
            with e.state:
                handler, handled = list(e.ipc_handler_ms), e.ipc_handled
            return self.reply(200, {"ranks": [r["recent"] for r in ranks], "handler_ms": handler,
                                    "counts": [ranks[0]["count"] if ranks else 0, handled]})
        if path == "/sim/received":
            res = e.ranks.all("received")
            return self.reply(200, {"ranks": {str(e.rank_offset + i): crcs
                                              for i, (ok, crcs) in enumerate(res) if ok}})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        e, path = ENGINE, urllib.parse.urlsplit(self.path).path
        # A build or a proxy without the route; one whose handler fails.
        if path in e.args.missing_route:
            return self.reply(404, {"detail": "Not Found"})
        if path in e.args.fail_route:
            return self.reply(500, {"success": False, "message": "simulated failure"})
        began = time.monotonic()
        try:
            raw = self.raw_body()
            body = json.loads(raw) if raw else {}
        except ValueError:
            return self.reply(400, {"success": False, "message": "invalid JSON"})
        if not isinstance(body, dict):
            return self.reply(400, {"success": False, "message": "a JSON object is required"})
        # The broadcast route checks at its turn (distributed_turn), as the scheduler does.
        if path in ("/update_weights_from_tensor", "/update_weights_from_ipc") \
                and e.args.sessions:
            session_guard(e, body)
        if path == "/begin_weight_update" and e.args.sessions:
            with e.state:
                if e.session_open:
                    print("AssertionError: a weight update session is already open (the "
                          "scheduler dies)", flush=True)
                    os._exit(6)
                e.session_open = True
                e.session_log.append(f"begin {body.get('selector', '?')}")
            return self.reply(200, {"success": True, "message": "Weight update session started."})
        if path == "/end_weight_update" and e.args.sessions:
            with e.state:
                if not e.session_open:
                    return self.reply(400, {"success": False,
                                            "message": "No weight update session is open."})
                e.session_open = False
                e.session_log.append("end")
            return self.reply(200, {"success": True, "message": "Weight update session ended."})
        if path == "/init_weights_update_group":
            return self.init_group(body)
        if path == "/update_weights_from_distributed":
            return self.update_from_distributed(body)
        if path == "/destroy_weights_update_group":
            return self.destroy_group(body)
        if path == "/weights_checker" and e.args.weights_checker:
            return self.weights_checker(body)
        if path == "/update_weights_from_tensor":
            return self.update_from_tensor(body, began)
        if path == "/update_weights_from_ipc":
            return self.update_from_ipc(body)
        if path == "/pause_generation":
            e.paused = True
            return self.reply(200, {"message": "Generation paused successfully.", "status": "ok"})
        if path == "/continue_generation":
            e.paused = False
            return self.reply(200, {"message": "Generation continued successfully.",
                                    "status": "ok"})
        if path in ("/update_weight_version", "/flush_cache"):
            with e.state:
                e.route_calls[path] = e.route_calls.get(path, 0) + 1
        if path == "/update_weight_version":
            if "new_version" not in body:
                return self.reply(400, {"success": False, "message": "new_version is required"})
            e.weight_version = body["new_version"]
            return self.reply(200, {"success": True, "message": "Weight version updated",
                                    "new_version": e.weight_version})
        if path == "/flush_cache":
            return self.send(200, b"Cache flushed.\n", "text/plain")
        if path in ("/release_memory_occupation", "/resume_memory_occupation"):
            return self.memory(path, body)
        if path == "/sim/knobs":
            # Answers at once, whatever the ranks do: the counts a test reads mid-update.
            self.delivery.update(body)
            with e.state:
                e.knobs.update(body)
                return self.reply(200, dict(e.knobs, updates_received=e.updates,
                                            max_waiting_requests=Handler.max_waiting))
        if path == "/sim/start_stranger":
            start_stranger(e, body["wsyncd_pid"])
            e.knobs["stranger_at_update"] = body["at_update"]
            return self.reply(200, {})
        if path == "/sim/arm_stranger":
            arm_stranger(e)
            return self.reply(200, {})
        if path == "/sim/stop_stranger":
            # What the stranger took, as it reports it at SIGTERM; {} if none was started.
            with e.state:
                stranger, e.stranger = e.stranger, None
            if stranger is None:
                return self.reply(200, {})
            stranger.terminate()
            out, _ = stranger.communicate(timeout=20)
            return self.reply(200, json.loads(out.strip().splitlines()[-1]))
        if path == "/sim/mode":
            e.knobs["data_plane"] = bool(body.get("data_plane", False))
            return self.reply(200, {"success": True, "data_plane": e.knobs["data_plane"]})
        if path == "/sim/receive_ahead":
            if not isinstance(body.get("sizes"), list):
                return self.reply(400, {"error": "sizes expected"})
            if e.group is None:
                return self.reply(400, {"error": "no group"})
            res = e.ranks.all("receive_ahead", body)
            bad = [m for ok, m in res if not ok]
            if bad:
                return self.reply(400, {"error": bad[0]})
            return self.reply(200, {"posted": len(body["sizes"])})
        if path == "/bench/receive":
            with e.lock:
                res = e.ranks.all("bench_receive", body)
            if not all(ok for ok, _ in res):
                return self.result(res, "")
            return self.reply(200, {"success": True, "seconds": max(sec for _, sec in res)})
        if path == "/bench/loads":
            with e.lock:
                res = e.ranks.all("bench_loads")
            return self.reply(200, {"success": True, "load_ms": [ms for _, ms in res]})
        self.reply(404, {"detail": "Not Found"})

    def init_group(self, body):
        """SGLang's init_custom_process_group on every rank, each joining the store on its
        own; the communicator comes at the first collective."""
        e = ENGINE
        if e.knobs["fail_init"]:
            return self.reply(400, {"success": False,
                                    "message": "Failed to init group: simulated"})
        if e.group is not None:
            return self.reply(400, {"success": False,
                                    "message": f"group '{e.group}' already initialized"})
        try:
            offset, world = int(body["rank_offset"]), int(body["world_size"])
            body["master_address"], int(body["master_port"])
        except (KeyError, TypeError, ValueError) as err:
            return self.reply(400, {"success": False, "message": f"bad request: {err!r}"})
        if offset + len(e.ranks) > world:
            return self.reply(400, {"success": False, "message":
                                    f"rank_offset {offset} + tp {len(e.ranks)} exceeds "
                                    f"world_size {world}"})
        if e.knobs["init_delay_ms"] > 0:
            time.sleep(e.knobs["init_delay_ms"] / 1000)
        res = e.ranks.all("init", dict(body, never_fetch_id=e.knobs["never_fetch_id"]))
        if all(ok for ok, _ in res):
            e.rank_offset = offset
            e.group = body.get("group_name", "weight_update_group")
            e.master_port = int(body["master_port"])
        else:
            e.ranks.all("destroy")  # the ranks that joined leave the store again
        return self.result(res, "Succeeded to initialize custom process group.")

    def update_from_distributed(self, body):
        """One bucket, broadcast from rank 0 inside the request, in arrival order (the update's
        turn, e.lock). At its turn the request is checked, then the knobs' faults on the n-th
        request (from 0) run: data_plane answers without receiving, fail answers HTTP 500, hang
        never answers nor receives, die has the ranks exit mid-bucket (17). The answer goes out
        after the turn, so a slow delivery holds no later update."""
        e = ENGINE
        with e.lock:
            status, answer = self.distributed_turn(body)
        if isinstance(answer, bytes):
            return self.send(status, answer, "text/plain")
        return self.reply(status, answer)

    def distributed_turn(self, body):
        e = ENGINE
        index = count_update(e)
        names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
        if not (isinstance(names, list) and isinstance(dtypes, list)
                and isinstance(shapes, list) and len(names) == len(dtypes) == len(shapes)):
            return 400, {"success": False,
                         "message": "names, dtypes and shapes must have equal lengths"}
        if e.args.sessions:
            session_guard(e, body)
        delay = e.knobs["answer_delay_ms"] / 1000
        if e.knobs["data_plane"]:
            # The bytes were (or will be) taken by the receives /sim/receive_ahead posted.
            time.sleep(delay)
            return 200, {"success": True, "message": "data plane"}
        if index == e.knobs["fail_update_at"]:
            return 500, b"Internal Server Error"
        if index == e.knobs["hang_update_at"]:
            time.sleep(3600)
        name = body.get("group_name", "weight_update_group")
        if e.group != name:
            return 400, {"success": False, "message": f"group '{name}' is not initialized"}
        res = e.ranks.all("update", dict(body, corrupt_tensor=e.knobs["corrupt_tensor"],
                                         die_midway=index == e.knobs["die_at_update"]))
        message = "Succeeded to update parameter online from distributed."
        if all(ok for ok, _ in res):
            time.sleep(delay)  # load_weights' own time
            message = took_request(body, message)
        return outcome(res, message)

    def destroy_group(self, body):
        """Behind the updates that came before it: their receives use the group's ranks."""
        e = ENGINE
        name = body.get("group_name", "weight_update_group") if isinstance(body, dict) \
            else "weight_update_group"
        with e.lock:
            if e.group != name:
                return self.reply(400, {"success": False, "message": f"group '{name}' not found"})
            if e.knobs["fail_destroy"]:
                # An engine whose ranks are wedged in the old group's collective, which only a
                # restart clears: the group stays.
                return self.reply(400, {"success": False, "message":
                                        "Failed to destroy custom process group: simulated"})
            res = e.ranks.all("destroy")
            e.group = None
        return self.result(res, "Succeeded to destroy custom process group.")

    def weights_checker(self, body):
        """POST /weights_checker {"action": "checksum"}: each TP rank's checksums, as SGLang's
        {success, message, ranks: [{checksums, per_gpu_checksum, parallelism_info}]}."""
        if body.get("action") != "checksum":
            return self.reply(400, {"success": False, "message": "unsupported action"})
        ranks, _, _ = ranks_and_stats(ENGINE)
        ordered = [ranks[k] for k in sorted(ranks, key=int)]
        out = []
        for r, crcs in enumerate(ordered):
            text = json.dumps(crcs, sort_keys=True, separators=(",", ":"))
            out.append({"checksums": crcs,
                        "per_gpu_checksum": format(zlib.crc32(text.encode()), "08x"),
                        "parallelism_info": {"tp_rank": r, "tp_size": len(ordered)}})
        self.reply(200, {"success": True, "message": "checksum", "ranks": out})

    def memory(self, path, body):
        """SGLang's release/resume by tag: null or [] means every tag; both answer null."""
        e = ENGINE
        tags = body.get("tags") or ["weights", "kv_cache", "cuda_graph"]
        with e.state:
            e.memory_calls.append([path.strip("/"), body.get("tags")])
            if path == "/release_memory_occupation":
                e.offload_tags.update(tags)
            else:
                missing = [t for t in tags if t not in e.offload_tags]
                if missing:
                    return self.reply(500, {"detail": f"KeyError: {missing[0]!r}"})
                e.offload_tags.difference_update(tags)
        self.send(200, b"null")

    def update_from_tensor(self, body, began):
        e = ENGINE
        if "weights" in e.offload_tags:
            return self.reply(500, {"detail": "the weights' memory is released"})
        if next_update(e, exit_code=3) == e.knobs["fail_update_at"]:
            return self.reply(500, {"detail": "Internal Server Error"})
        entries = body.get("serialized_named_tensors")
        if not isinstance(entries, list) or len(entries) < len(e.ranks):
            return self.reply(400, {"success": False, "message":
                                    f"serialized_named_tensors needs {len(e.ranks)} entries"})
        with e.lock:
            res = e.ranks.all("ipc_update", body)
        bad = [m for ok, m in res if not ok]
        if bad:
            with e.state:
                e.last_error = bad[0]
            return self.reply(400, {"success": False,
                                    "message": f"Failed to update weights: {bad[0]}"})
        with e.state:
            e.ipc_handled += 1
            e.ipc_handler_ms = (e.ipc_handler_ms + [[began, time.monotonic()]])[-256:]
        self.reply(200, {"success": True,
                         "message": took_request(body, "Succeeded to update parameter online.")})

    def update_from_ipc(self, body):
        e = ENGINE
        if version_tuple(e.args.version) < (0, 5, 5, 1):
            return self.reply(404, {"detail": "Not Found"})
        if "weights" in e.offload_tags:
            return self.reply(500, {"detail": "the weights' memory is released"})
        if not isinstance(body.get("zmq_handles"), dict):
            return self.reply(400, {"success": False, "message": "zmq_handles is required"})
        with e.state:
            e.ipc_route_bodies.append({k: v for k, v in body.items() if k != "zmq_handles"})
        with e.lock:
            before = e.ranks.all("stats")[0][1]["buckets_seen"]
            res = e.ranks.all("ipc_route", {
                "zmq_handles": body["zmq_handles"], "generation": e.args.ce_worker,
                "knobs": dict(e.knobs),
                "stranger_url": f"http://127.0.0.1:{self.server.server_address[1]}"
                                "/sim/arm_stranger"})
            stats = e.ranks.all("stats")
            with e.state:
                if stats[0][0]:
                    e.updates += stats[0][1]["buckets_seen"] - before
        bad = [m for ok, m in res if not ok]
        if bad:
            with e.state:
                e.last_error = bad[0]
            return self.reply(400, {"success": False, "message": bad[0]})
        self.reply(200, {"success": True, "message": took_request(
            body, "IPC weight update completed successfully")})


def main():
    global ENGINE
    ap = argparse.ArgumentParser()
    add_engine_flags(ap)
    ap.add_argument("--version", default="0.5.6",
                    help="what /get_server_info reports; before 0.5.6, the old flattened reader")
    ap.add_argument("--ce-worker", default="g4", choices=("g1", "g4"),
                    help="the checkpoint-engine worker generation on the map-once route")
    ap.add_argument("--sessions", action="store_true",
                    help="a session build: updates only inside begin/end, or the process dies")
    ap.add_argument("--no-docs", action="store_true", help="serve no /openapi.json")
    ap.add_argument("--missing-route", action="append", default=[],
                    help="a POST route this server lacks (404, and not in /openapi.json)")
    ap.add_argument("--fail-route", action="append", default=[],
                    help="a POST route that answers HTTP 500 success=false")
    ap.add_argument("--die-at-update", type=int, default=-1,
                    help="the rank processes exit when the Nth update (0-based) reaches them")
    ap.add_argument("--rank-processes", action="store_true",
                    help="accepted for the old host simulator's callers: every rank is its own "
                         "process here, as SGLang's scheduler processes are")
    ap.add_argument("--die-rank", type=int, default=-1,
                    help="with --die-at-update: only this TP rank's process exits")
    ap.add_argument("--fail-init", action="store_true",
                    help="init_weights_update_group answers success=false (400)")
    ap.add_argument("--fail-update-at", type=int, default=-1,
                    help="the Nth broadcast or tensor update (0-based) answers HTTP 500")
    ap.add_argument("--hang-update-at", type=int, default=-1,
                    help="the Nth update (0-based) never answers and never receives")
    ap.add_argument("--answer-delay-ms", type=int, default=0,
                    help="time a broadcast update takes after receiving, as load_weights does")
    ap.add_argument("--label-in-request-ignored", action="store_true",
                    help="an older build: weight_version in update requests is neither recorded "
                         "nor mentioned in the answer")
    ap.add_argument("--weights-checker", action="store_true",
                    help='serve POST /weights_checker {"action": "checksum"}')
    args = ap.parse_args()
    ENGINE = Engine(args, gpus_of(args))
    print(f"{stamp()} sglang engine {args.version}", flush=True)
    serve(Handler, args, "sglang engine")


if __name__ == "__main__":
    main()
