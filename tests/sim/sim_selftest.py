#!/usr/bin/env python3
"""Checks the front ends of the engine simulators (tests/engines/lmdeploy/lmdeploy_engine.py,
tests/engines/vllm/vllm_engine.py) apart from their ranks, on a machine without torch or a GPU:

1. their HTTP routes and answers, with the rank processes replaced by a stand-in that answers as
   a rank would (no torch is imported): LMDeploy's OpenAPI document, content-type rule, pickle
   refusal, null answer, 500 on a rank failure and the flattened_tensor count with its layout
   floor; vLLM's session order (409s), init_info checks, pause modes, the request-form counts,
   the packed-config mismatch and the dead engine after a missing GPU UUID;
2. checkpoint-engine's worker (tests/sim/checkpoint_engine_worker.py) over the libzmq-through-
   ctypes REP socket the GPU machine uses (it has no pyzmq), driven by a pyzmq REQ socket: both
   worker generations' end sequences, a failed bucket's traceback answer, and the timeout;
3. with the pickles wsyncd writes (tests/pickle/write_torch_pickles, if its path is given): that
   the engines' exact-name unpicklers admit them (over a stand-in torch module), and that the
   vLLM entry form is told apart.

    python3 tests/sim/sim_selftest.py [WRITE_TORCH_PICKLES_BINARY]
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import types
from http.server import ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "engines", "lmdeploy"))
sys.path.insert(0, os.path.join(HERE, "..", "engines", "vllm"))

import engine_common as common  # noqa: E402
import lmdeploy_engine as lmd  # noqa: E402
import vllm_engine as vllm  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


class FakeRanks:
    """Stands for RankPool: answers each command with what `script` returns."""

    def __init__(self, n, script):
        self.n, self.script, self.calls = n, script, []

    def __len__(self):
        return self.n

    def all(self, cmd, arg=None):
        self.calls.append((cmd, arg))
        return [self.script(cmd, arg, r) for r in range(self.n)]


def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def request(port, method, path, body=None, content_type="application/json"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    headers = {"Content-Type": content_type} if content_type else {}
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    try:
        return r.status, json.loads(raw) if raw else None
    except ValueError:
        return r.status, raw.decode(errors="replace")


def lmdeploy_checks():
    infos = []  # what the stand-in ranks answer to the next "update"

    def script(cmd, arg, rank):
        if cmd == "update":
            return infos[rank] if infos else (True, {"gpu": "g", "nonempty": False})
        if cmd == "checksums":
            return True, {"w": "00000001"}
        if cmd == "stats":
            return True, {"casts": 0, "ipc_opens": None}
        return True, "ok"

    lmd.RankPool = lambda *a: FakeRanks(1, script)
    knobs = {"fail_update_at": -1, "hang_update_at": -1, "die_at_update": -1,
             "refuse_pickle": False}
    engine = lmd.Engine([0], "cuda", knobs, False)
    lmd.ENGINE = engine
    lmd.Handler.delivery = common.Delivery()
    server = serve(lmd.Handler)
    port = server.server_address[1]

    status, doc = request(port, "GET", "/openapi.json")
    paths = doc["paths"]
    check(status == 200 and all(m in paths.get(p, {}) for m, p in
                                [("post", "/update_weights"), ("post", "/sleep"),
                                 ("post", "/wakeup")]),
          "lmdeploy: /openapi.json lists POST /update_weights, /sleep, /wakeup")
    status, _ = request(port, "POST", "/sleep?level=1", b"", content_type=None)
    check(status == 400, "lmdeploy: /sleep without a JSON content type is refused (400)")
    status, _ = request(port, "POST", "/sleep?level=3", {})
    check(status == 400, "lmdeploy: /sleep?level=3 is refused (400)")
    status, _ = request(port, "POST", "/sleep?level=1", {})
    check(status == 200 and request(port, "GET", "/is_sleeping")[1] == {"is_sleeping": True},
          "lmdeploy: /sleep?level=1 puts it to sleep")
    request(port, "POST", "/wakeup?tags=weights", {})
    check(request(port, "GET", "/sim/checksums")[1]["sleeping_tags"] == ["kv_cache"],
          "lmdeploy: /wakeup?tags=weights leaves kv_cache asleep")
    request(port, "POST", "/wakeup", {})
    check(request(port, "GET", "/health")[1] == {"status": "healthy"},
          "lmdeploy: /wakeup wakes the rest")

    def info(buffer, flattened, dtype="bfloat16"):
        return True, {"gpu": "GPU0", "device": 0, "rank": 0, "nonempty": True,
                      "flattened": flattened, "event": True, "dtype": dtype, "buffer": buffer,
                      "loaded": 3}

    body = {"serialized_named_tensors": ["eA=="], "load_format": "flattened_bucket",
            "finished": False}
    # Two slots alternating, flattened_tensor every call: as few as the layout allows.
    for i, buf in enumerate(["A", "B", "A", "B"]):
        infos[:] = [info(buf, True)]
        status, answer = request(port, "POST", "/update_weights", dict(body, finished=i == 3))
        check(status == 200 and answer is None, f"lmdeploy: bucket {i} answers null with 200")
    cycles = request(port, "GET", "/sim/flattened")[1]["cycles"]
    c = cycles[0]["counts"]["GPU0/bfloat16"]
    check(cycles[0]["finished"] and (c["arrivals"], c["floor"], c["calls"]) == (4, 4, 4),
          "lmdeploy: alternating slots: 4 arrivals, floor 4")
    # One slot, flattened_tensor every call: more than needed.
    for i in range(3):
        infos[:] = [info("A", True)]
        request(port, "POST", "/update_weights", dict(body, finished=i == 2))
    c = request(port, "GET", "/sim/flattened")[1]["cycles"][1]["counts"]["GPU0/bfloat16"]
    check((c["arrivals"], c["floor"]) == (3, 1), "lmdeploy: one slot resent: 3 arrivals, floor 1")
    # One slot, sent once, then cached; a dtype change needs it again.
    for i, (flat, dtype) in enumerate([(True, "bfloat16"), (False, "bfloat16"),
                                       (True, "float32")]):
        infos[:] = [info("A", flat, dtype)]
        request(port, "POST", "/update_weights", dict(body, finished=i == 2))
    counts = request(port, "GET", "/sim/flattened")[1]["cycles"][2]["counts"]
    check((counts["GPU0/bfloat16"]["arrivals"], counts["GPU0/bfloat16"]["floor"],
           counts["GPU0/float32"]["arrivals"], counts["GPU0/float32"]["floor"]) == (1, 1, 1, 1),
          "lmdeploy: cached between calls, re-sent for a new dtype: floor met per dtype")
    infos[:] = [(False, "ValueError: flattened_tensor is not provided")]
    status, _ = request(port, "POST", "/update_weights", body)
    check(status == 500, "lmdeploy: a rank's exception is a 500")
    status, _ = request(port, "POST", "/update_weights", {"load_format": None})
    check(status == 400, "lmdeploy: no serialized_named_tensors is a 400")
    engine.knobs["refuse_pickle"] = True
    status, answer = request(port, "POST", "/update_weights", body)
    check(status == 400 and "pickle" in json.dumps(answer).lower()
          and "LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS" in json.dumps(answer),
          "lmdeploy: --refuse-pickle answers PR #4964's 400 naming the opt-in")
    server.shutdown()


def vllm_checks():
    answers = {}

    def script(cmd, arg, rank):
        if cmd == "update":
            return answers.get("update", (True, {"loaded": 2, "forms": {"args": 2},
                                                 "packed": False}))
        if cmd == "checksums":
            return True, {"w": "00000001"}
        if cmd == "ipc_opens":
            return True, None
        return True, "ok"

    args = types.SimpleNamespace(version="0.29.0", entry_form="any", packed="any",
                                 lenient_sessions=False, no_session_routes=False,
                                 refuse_pickle=False, die_at_update=-1, memory="cuda",
                                 no_world_size=False, backend="ipc", fail_update_at=-1,
                                 conflict_update_at=-1, init_delay_ms=0, weight_checker=False,
                                 corrupt_tensor="", no_docs=False, missing_route=[],
                                 unlisted_route=[])
    vllm.RankPool = lambda *a: FakeRanks(1, script)
    vllm.ENGINE = vllm.Engine(args, [0])
    vllm.Handler.delivery = common.Delivery()
    server = serve(vllm.Handler)
    port = server.server_address[1]
    update = {"update_info": {"names": ["a", "b"], "dtype_names": ["bfloat16"] * 2,
                              "shapes": [[2], [2]], "ipc_handles_pickled": "eA=="}}

    check(request(port, "GET", "/version")[1] == {"version": "0.29.0"}, "vllm: /version")
    check(request(port, "POST", "/init_weight_transfer_engine", {})[0] == 400,
          "vllm: init without init_info is a 400")
    check(request(port, "POST", "/init_weight_transfer_engine",
                  {"init_info": {"master_address": "x"}})[0] == 500,
          "vllm: init_info with NCCL keys fails the IPC dataclass (500)")
    check(request(port, "POST", "/init_weight_transfer_engine", {"init_info": {}})
          == (200, {"message": "Weight transfer initialized"}), "vllm: init with {}")
    check(request(port, "POST", "/update_weights", update)[0] == 409,
          "vllm: /update_weights outside a session is a 409")
    check(request(port, "POST", "/finish_weight_update", None, content_type=None)[0] == 409,
          "vllm: /finish_weight_update outside a session is a 409")
    check(request(port, "POST", "/start_weight_update", None, content_type=None)
          == (200, {"message": "Weight update started"}), "vllm: start with no body")
    check(request(port, "POST", "/start_weight_update", {})[0] == 409,
          "vllm: a second start is a 409")
    check(request(port, "POST", "/update_weights", {"x": 1})[0] == 400,
          "vllm: no update_info is a 400")
    check(request(port, "POST", "/update_weights", update) == (200, {"message": "Weights updated"}),
          "vllm: unpacked update in a session")
    answers["update"] = (True, {"loaded": 2, "forms": {"func_args": 1}, "packed": True})
    packed = {"update_info": dict(update["update_info"], packed=True, tensor_sizes=[4, 4],
                                  first_chunk=True, last_chunk=True)}
    check(request(port, "POST", "/update_weights", packed)[0] == 200, "vllm: packed update")
    check(request(port, "POST", "/finish_weight_update", {"weight_version": "v7"})
          == (200, {"message": "Weight update finished"}), "vllm: finish with a weight_version")
    stats = request(port, "GET", "/sim/stats")[1]
    s = stats["stats"]
    check((s["packed"], s["unpacked"], s["args"], s["func_args"], s["first_chunk"],
           s["conflicts"]) == (1, 1, 1, 1, 1, 3) and stats["weight_version"] == "v7",
          "vllm: forms, chunk flags, conflicts and the weight version are counted")
    check(request(port, "GET", "/sim/checksums")[1]["weight_version"] == "v7",
          "vllm: /sim/checksums reports the finished weight version")
    check(request(port, "POST", "/pause?mode=drain")[0] == 400, "vllm: a bad pause mode is a 400")
    check(request(port, "POST", "/pause?mode=keep")[1] == {"status": "paused"}, "vllm: pause keep")
    check(request(port, "POST", "/resume")[1] == {"status": "resumed"}, "vllm: resume")
    request(port, "POST", "/start_weight_update")
    vllm.ENGINE.args.packed = "false"
    check(request(port, "POST", "/update_weights", packed)[0] == 500,
          "vllm: packed request on a packed=false server fails")
    vllm.ENGINE.args.packed = "any"
    answers["update"] = (False, "ValueError: IPC handle not found for GPU UUID x")
    check(request(port, "POST", "/update_weights", update)[0] == 500,
          "vllm: a missing GPU UUID fails the update")
    check(request(port, "GET", "/health")[0] == 503, "vllm: ... and the engine is dead (503)")
    server.shutdown()


def pickle_checks(binary):
    torch = types.ModuleType("torch")

    class Tensor:
        pass

    class Size(tuple):
        pass

    class TypedStorage:
        pass

    class UntypedStorage:
        pass

    torch.Tensor, torch.Size = Tensor, Size
    torch.storage = types.SimpleNamespace(TypedStorage=TypedStorage,
                                          UntypedStorage=UntypedStorage)
    for name in common.DTYPE_NAMES:
        setattr(torch, name, f"torch.{name}")
    sys.modules["torch"] = torch

    def rebuild(*args):
        return ("rebuilt", args)

    lmd_unpickler = common.exact_name_unpickler(
        torch, rebuild, storages=("TypedStorage", "UntypedStorage"),
        extra={(lmd.METADATA_MODULE, "FlattenedTensorMetadata"): lmd.FlattenedTensorMetadata})
    vllm_unpickler = common.exact_name_unpickler(torch, rebuild,
                                                 storages=("TypedStorage", "UntypedStorage"))
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([binary, d], check=True, stdout=subprocess.DEVNULL)

        def load(name, unpickler):
            with open(os.path.join(d, name), "rb") as f:
                return common.unpickle(f.read(), unpickler)

        flat = load("lmdeploy_flattened.pkl", lmd_unpickler)
        check(isinstance(flat, dict) and flat.get("require_clone") is False
              and len(flat["flattened_tensor"]) == 2 and len(flat["flattened_tensor"][1]) == 15
              and all(isinstance(m, lmd.FlattenedTensorMetadata) for m in flat["metadata"])
              and len(flat.get("event_ipc_handle", b"")) == 64,
              "pickles: LMDeploy flattened bucket admitted: (func, 15 args), metadata, event")
        cached = load("lmdeploy_flattened_cached.pkl", lmd_unpickler)
        check("flattened_tensor" not in cached and cached["metadata"],
              "pickles: LMDeploy cached form has metadata and no flattened_tensor")
        null = load("lmdeploy_null.pkl", lmd_unpickler)
        check(isinstance(null, list) and all(isinstance(n, str) and len(item) == 2
                                             for n, item in null),
              "pickles: LMDeploy per-tensor list[(name, (func, args))] admitted")
        func_args = load("vllm_func_args.pkl", vllm_unpickler)
        args = load("vllm_args.pkl", vllm_unpickler)
        packed = load("vllm_packed.pkl", vllm_unpickler)
        check(all(vllm.entry_form(v) == "func_args" for e in func_args for v in e.values()),
              "pickles: vLLM older entries read as (FUNC, ARGS)")
        check(all(vllm.entry_form(v) == "args" and len(v) == 15
                  for e in args for v in e.values()),
              "pickles: vLLM newest entries read as the 15 args")
        check(isinstance(packed, dict) and all(vllm.entry_form(v) == "args"
                                               for v in packed.values()),
              "pickles: vLLM packed chunk is one dict of args")
        for name in sorted(os.listdir(d)):
            if not name.startswith(("lmdeploy", "vllm", "forbidden")):
                continue
            unpickler = lmd_unpickler if name.startswith("lmdeploy") else vllm_unpickler
            try:
                load(name, unpickler)
                refused = ""
            except Exception as e:  # noqa: BLE001
                refused = str(e)
            if name.startswith("forbidden"):
                check(bool(refused), f"pickles: {name} is refused ({refused})")
            else:
                check(not refused, f"pickles: {name} is admitted{': ' + refused if refused else ''}")
    del sys.modules["torch"]


def worker_checks():
    import pickle
    import checkpoint_engine_worker as cew
    import zmq_rep
    from host_torch import Dtype
    if not zmq_rep.HAVE_PYZMQ:
        print("skip worker: no pyzmq to drive the ctypes socket")
        return
    import zmq
    for generation in cew.GENERATIONS:
        ctx = zmq.Context()
        req = ctx.socket(zmq.REQ)
        req.setsockopt(zmq.RCVTIMEO, 5000)
        path = tempfile.mktemp(prefix="wsync-selftest-", suffix=".sock")
        req.bind("ipc://" + path)
        rep = zmq_rep.rep_socket("ipc://" + path, timeout_s=5, prefer_ctypes=True)
        loaded, posts, outcome = [], [], {}

        def load(payload, buffer):
            if payload and payload[0]["name"] == "bad":
                raise RuntimeError("bad tensor")
            loaded.extend(cew.extract(payload, len(buffer),
                                      lambda off, n, dtype, shape: buffer[off:off + n]))

        def run():
            try:
                cew.serve(rep, pickle.loads, lambda h: h[1][0], load,
                          post_hook=lambda: posts.append(1), generation=generation)
                outcome["ok"] = True
            except cew.WorkerError as e:
                outcome["error"] = str(e)

        t = threading.Thread(target=run)
        t.start()
        req.send(pickle.dumps(("func", (b"0123456789",))))
        check(req.recv() == b"", f"worker {generation}: the buffer frame is answered empty")
        req.send(pickle.dumps([{"name": "w", "shape": [4], "dtype": Dtype("uint8"), "offset": 2}]))
        check(req.recv() == b"", f"worker {generation}: a bucket is answered empty")
        check(loaded == [("w", b"2345")], f"worker {generation}: the tensor at its offset")
        if generation == "g4":
            req.send(pickle.dumps([{"name": "bad", "shape": [1], "dtype": Dtype("uint8"), "offset": 0}]))
            check(b"bad tensor" in req.recv(), "worker g4: a failed bucket answers its traceback")
        req.send(pickle.dumps(None))
        check(req.recv() == b"", f"worker {generation}: the first None is answered")
        if generation == "g4":
            check(posts == [], "worker g4: no post-processing at the first None")
            req.send(pickle.dumps(None))
            check(req.recv() == b"", "worker g4: the second None is answered")
        t.join(timeout=5)
        check(outcome.get("ok") and posts == [1], f"worker {generation}: post-processed once")
        rep.close()
        req.close(linger=0)
        ctx.term()
        os.unlink(path)
    # Nobody sends: the ctypes socket times out instead of hanging.
    rep = zmq_rep.rep_socket("ipc:///tmp/wsync-selftest-nobody.sock", timeout_s=0.2,
                             prefer_ctypes=True)
    try:
        rep.recv()
        check(False, "worker: recv times out")
    except zmq_rep.Timeout:
        check(True, "worker: recv times out")
    rep.close()


def host_torch_checks():
    """The host memory backend behaves as torch does where the simulators' rank code relies on
    it: dtype views and their alignment, value casts (bf16 rounds to nearest even), slicing
    and splitting, shape checks."""
    import numpy as np
    import host_torch as t

    def raises(fn):
        try:
            fn()
        except (RuntimeError, t.LoadError):
            return True
        return False

    flat = t.empty(16, dtype=t.uint8)
    flat.raw[:] = np.arange(16, dtype=np.uint8)
    check(flat[4:12].view(t.float32).shape == (2,), "host_torch: 8 bytes at 4 view as 2 float32")
    check(raises(lambda: flat[2:10].view(t.float32)),
          "host_torch: a view at byte 2 as float32 is refused (torch's alignment rule)")
    check(flat[4:8].view(t.int32).tobytes() == bytes([4, 5, 6, 7]),
          "host_torch: a view keeps the bytes")
    f32 = t.empty(3, dtype=t.float32)
    f32.raw.view(np.uint32)[:] = [0x3F800000, 0x3F808000, 0x3F818000]
    bf = f32.to(t.bfloat16)
    check(list(bf.raw.view(np.uint16)) == [0x3F80, 0x3F80, 0x3F82],
          "host_torch: float32 -> bfloat16 rounds to nearest even")
    check(bf.to(t.float32).raw.view(np.uint32)[2] == 0x3F820000, "host_torch: bf16 -> float32")
    pieces = flat.split([3, 5, 8])
    check([p.shape[0] for p in pieces] == [3, 5, 8] and pieces[1].offset == 3,
          "host_torch: split cuts in order, each piece at its offset")
    check(raises(lambda: flat.split([3, 5])), "host_torch: split sizes must add up")
    check(flat[10:99].shape == (6,), "host_torch: a slice past the end is clamped, as torch's")
    check(raises(lambda: flat[0:6].reshape(4)), "host_torch: a reshape to another numel fails")
    copy = t.empty(2, dtype=t.float32)
    copy.copy_(flat[8:16].view(t.float32))
    check(copy.tobytes() == bytes(range(8, 16)), "host_torch: copy_ copies the bytes")
    # rebuild_cuda_tensor's arguments as torch's pickles carry them map a shared-memory region.
    name = f"/wsync-selftest-{os.getpid()}"
    with open("/dev/shm" + name, "wb") as f:
        f.write(bytes(range(16)))
    try:
        handle = name.encode().ljust(t.HANDLE_BYTES, b"\0")
        args = (t.TorchClass("Tensor"), t.Size((2,)), (1,), 1, t.TorchClass("TypedStorage"),
                t.float32, 0, handle, 16, 0, False, b"ref", 0, b"\0" * t.HANDLE_BYTES, True)
        mappings = t.ShmMappings()
        region, start, dtype, shape = mappings.rebuild(args, ("TypedStorage",), lambda d: None)
        got = (start, dtype, shape, region[start:start + 8])
        check(got == (4, t.float32, (2,), bytes(range(4, 12))),
              "host_torch: rebuild_cuda_tensor's 15 arguments map the storage at the view's offset")
        check(raises(lambda: mappings.rebuild(args[:10] + (1,) + args[11:], ("TypedStorage",),
                                              lambda d: None)),
              "host_torch: requires_grad must be a bool")
    finally:
        os.unlink("/dev/shm" + name)


def main():
    host_torch_checks()
    lmdeploy_checks()
    vllm_checks()
    worker_checks()
    if len(sys.argv) > 1:
        pickle_checks(sys.argv[1])
    else:
        print("skip pickles: no write_torch_pickles binary given")
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
