"""End-to-end weight-update benchmark, nccl-tests style: a model with Qwen2.5-7B's tensor names and
shapes in bf16 (random data, 14.19 GiB) on GPU 0, pushed to SGLang-semantics torch engines
(tests/engines/sglang/sglang_engine.py on GPU memory, one rank each) on GPUs 1..N, for each slot size. Beside wsync it measures, in the
same run on the same GPUs and NCCL:

  ceiling      rank 0 broadcasts the same buckets back to back while the receiver has posted all
               of its receives (POST /bench/receive): the wire's limit for those bytes and sizes.
  data plane   wsync with receivers that post their receives at once (engine in data-plane mode),
               so only trainer copy -> slot -> checksum -> NCCL is measured.
  torch-direct the trainer process itself is rank 0 and runs an update as slime's distributed
               updater does (the peers' design): pause every engine and flush its cache, then
               per bucket torch.cat into a flat uint8 bucket, post the HTTP update (labelled
               with the version), broadcast, wait; then resume the engines. Its buckets alone
               (without those three requests, as this table had it before 2026-11-28) are timed
               beside it and noted under each slot size.
  wsync        the trainer pushes through wsyncd (Python client, CUDA IPC slots), which posts the
               engine's HTTP updates and broadcasts as rank 0, pipelined.

Every configuration is a row: "defaults" (what push(state_dict, version, group) does with nothing
else set, to a wsyncd with nothing set: the group's transport asks for pull mode) and each
variant. Its end to end is also compared with the engine-bound limit: per bucket, the bucket's
bytes at the ceiling's rate plus the slowest receiving rank's own load time (POST /bench/loads:
CUDA events around the engine's load_weights), both measured in the run. Every time is the median
of --runs (5) after a warm-up. Gate lines (GATE ... PASS or MISSED) judge the defaults row of each
slot size: end to end >= 1.10x torch-direct at 128 MiB to 1 GiB and >= 1.0x at 2 to 4 GiB; a
missed gate fails the run (exit 1).

Per-bucket gap split (wsync end to end): "daemon" is the time rank 0's stream had nothing queued
before a bucket (the daemon or trainer was late) plus the time the engines, done with the previous
bucket, waited for this bucket's request to be written; "engine" is the rest of the broadcast time
beyond the wire time at the ceiling's rate (the engine had its request but had not yet posted its
receive: its own request handling).

    python3 tests/bench/bench_update.py --wsyncd build/dev-bundle/bin/wsyncd --nccl-lib ... \
        --engines http://127.0.0.1:30001 --python-client client/python --out $OUT/bench
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import torch
import torch.distributed as dist

GIB = 2**30


def qwen25_7b_shapes():
    hidden, inter, kv, vocab, layers = 3584, 18944, 4 * 128, 152064, 28
    yield "model.embed_tokens.weight", (vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        yield p + "self_attn.q_proj.weight", (hidden, hidden)
        yield p + "self_attn.q_proj.bias", (hidden,)
        yield p + "self_attn.k_proj.weight", (kv, hidden)
        yield p + "self_attn.k_proj.bias", (kv,)
        yield p + "self_attn.v_proj.weight", (kv, hidden)
        yield p + "self_attn.v_proj.bias", (kv,)
        yield p + "self_attn.o_proj.weight", (hidden, hidden)
        yield p + "mlp.gate_proj.weight", (inter, hidden)
        yield p + "mlp.up_proj.weight", (inter, hidden)
        yield p + "mlp.down_proj.weight", (hidden, inter)
        yield p + "input_layernorm.weight", (hidden,)
        yield p + "post_attention_layernorm.weight", (hidden,)
    yield "model.norm.weight", (hidden,)
    yield "lm_head.weight", (vocab, hidden)


def add_common_args(ap):
    """The arguments every benchmark here takes: wsyncd, NCCL, the client, where results go."""
    ap.add_argument("--wsyncd", required=True)
    ap.add_argument("--nccl-lib", required=True)
    ap.add_argument("--python-client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=5)


def qwen25_7b_model():
    """Qwen2.5-7B's tensors as (name, bf16 tensor) on GPU 0, random with a fixed seed."""
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = [(name, torch.randn(shape, dtype=torch.bfloat16, device="cuda:0"))
             for name, shape in qwen25_7b_shapes()]
    torch.cuda.synchronize()
    return model


def plan(sizes, bucket_bytes):
    """Buckets as wsync's planner (and the usual trainer loop) makes them: in order, closed before
    overflowing, a tensor larger than a bucket alone."""
    buckets, cur, cur_bytes = [], [], 0
    for i, n in enumerate(sizes):
        if cur and (cur_bytes + n > bucket_bytes or n > bucket_bytes):
            buckets.append(cur)
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += n
        if n > bucket_bytes:
            buckets.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        buckets.append(cur)
    return buckets


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def post_control(url, body):
    """A control request (pause, flush, resume) whose answer's body is not read: /flush_cache
    answers plain text."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()


def post_control_all(urls, path):
    """post_control on every engine at once, as the peers' trainers do (one Ray call each)."""
    calls = [Async(post_control, url + path, {}) for url in urls]
    for c in calls:
        c.join()


def post_all(urls, path, body):
    """Posts to every engine at once; returns their answers in order."""
    calls = [Async(post, url + path, body) for url in urls]
    return [c.join() for c in calls]


class Async:
    """Runs a call on a thread (as trainers post the engine's HTTP update beside the broadcast)."""

    def __init__(self, fn, *args):
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn,) + args)
        self.thread.start()

    def _run(self, fn, *args):
        try:
            self.result = fn(*args)
        except Exception as e:  # re-raised by join
            self.error = e

    def join(self):
        self.thread.join()
        if self.error:
            raise self.error
        return self.result


T0 = time.perf_counter()


def note(msg):
    print(f"[{time.perf_counter() - T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


def own_state_environment():
    """The environment of a wsyncd of its own: its default state directory in a fresh folder, so
    that no wsyncd restores an earlier one's groups."""
    return dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="wsync-bench-state-"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, args, slot_bytes, log, extra=()):
        self.log_path = log.name
        self.sock = f"/tmp/wsync-bench-{os.getpid()}.sock"
        self.ctl = os.path.join(os.path.dirname(args.wsyncd), "wsyncctl")
        self.proc = subprocess.Popen(
            [args.wsyncd, "--mode", "cuda", "--nccl-lib", args.nccl_lib, "--socket", self.sock,
             "--slot-bytes", str(slot_bytes), "--bucket-timeout", str(args.bucket_timeout),
             "--bind-address",
             "127.0.0.1", "--advertise-address", "127.0.0.1", *extra], stdout=log, stderr=log,
            env=own_state_environment())
        for _ in range(300):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)
        engines = [a for url in args.engines for a in ("--engine", url + "#1")]
        subprocess.run([self.ctl, "--socket", self.sock, "create-group", "bench", *engines],
                       check=True, stdout=log, stderr=log)

    def stop(self):
        """Stops wsyncd; says so on stderr (with its last log lines) if it had died."""
        died = self.proc.poll()
        subprocess.run([self.ctl, "--socket", self.sock, "destroy-group", "bench"], check=False,
                       capture_output=True)
        self.proc.terminate()
        self.proc.wait(timeout=60)
        if died is not None:
            with open(self.log_path) as f:
                tail = f.readlines()[-15:]
            note(f"wsyncd had exited with {died} before it was stopped; its log ends:\n" +
                 "".join(tail))
        return died


def wsync_push(client, model, version, pull=None):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = client.push(model, version=version, group="bench", pull=pull)
    return time.perf_counter() - t0, result


def direct_group(args):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sim"))
    from memory import cuda_init_custom_process_group as init_custom_process_group
    port = free_port()
    world = len(args.engines) + 1
    # Rank 0's store listens before any engine is told the port: an engine rank that dials a
    # loopback port nobody listens on yet may be given that same port as its own source port and
    # connect to itself (TCP self-connect), and then rank 0 cannot bind it (EADDRINUSE).
    root = Async(init_custom_process_group, "nccl", f"tcp://127.0.0.1:{port}", world, 0, "direct")
    deadline = time.time() + 30
    while time.time() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    inits = [Async(post, url + "/init_weights_update_group",
                   {"master_address": "127.0.0.1", "master_port": port, "rank_offset": 1 + i,
                    "world_size": world, "group_name": "direct", "backend": "nccl"})
             for i, url in enumerate(args.engines)]
    for i in inits:
        i.join()
    return root.join()


def torch_direct(args, pg, model, buckets, version, steps=True):
    """One update as slime's distributed updater runs it (update_weights in
    slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py): pause every
    engine and flush its cache, then the buckets, each labelled with the version, then resume.
    Without `steps`, the buckets alone."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if steps:
        post_control_all(args.engines, "/pause_generation")
        post_control_all(args.engines, "/flush_cache")
    for b in buckets:
        flat = torch.cat([model[i][1].view(-1).view(torch.uint8) for i in b])
        body = {"names": [model[i][0] for i in b], "dtypes": ["bfloat16"] * len(b),
                "shapes": [list(model[i][1].shape) for i in b], "group_name": "direct",
                "load_format": "flattened_bucket", "flush_cache": False}
        if steps:
            body["weight_version"] = version
        answer = Async(post_all, args.engines, "/update_weights_from_distributed", body)
        dist.broadcast(flat, src=0, group=pg)
        if not all(a.get("success") for a in answer.join()):
            raise RuntimeError("torch-direct update failed")
    torch.cuda.synchronize()
    if steps:
        post_control_all(args.engines, "/continue_generation")
    return time.perf_counter() - t0


def ceiling(args, pg, sizes, buf):
    receive = Async(post_all, args.engines, "/bench/receive", {"sizes": sizes})
    for n in sizes:
        dist.broadcast(buf[:n], src=0, group=pg)
    torch.cuda.synchronize()
    return max(r["seconds"] for r in receive.join())


def one_process(args, pg, model, buckets, bucket_sizes, bufs):
    """Rank 0 itself copies each bucket into one of two buffers on a side stream while the previous
    bucket is on the wire, receivers posted at once: the data plane when the copies and the
    broadcasts share one CUDA context (two processes on one GPU take turns by time slice)."""
    copy_stream = torch.cuda.Stream()
    done = [None, None]
    receive = Async(post_all, args.engines, "/bench/receive", {"sizes": bucket_sizes})
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for k, b in enumerate(buckets):
        buf = bufs[k % 2][:bucket_sizes[k]]
        with torch.cuda.stream(copy_stream):
            if done[k % 2] is not None:
                copy_stream.wait_event(done[k % 2])
            torch.cat([model[i][1].view(-1).view(torch.uint8) for i in b], out=buf)
            ready = torch.cuda.Event()
            ready.record(copy_stream)
        torch.cuda.current_stream().wait_event(ready)
        dist.broadcast(buf, src=0, group=pg)
        done[k % 2] = torch.cuda.Event()
        done[k % 2].record()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    receive.join()
    return seconds


def engine_loads(args):
    """Every receiving rank's load time (ms) of each update since the last ask, ranks of all
    engines in order: [[ms of bucket 0, ms of bucket 1, ...], ...] (POST /bench/loads)."""
    return [ms for answer in post_all(args.engines, "/bench/loads", {})
            for ms in answer["load_ms"]]


def engine_bound_seconds(bucket_sizes, wire_rate, load_ms):
    """The engine-bound limit of one update: per bucket, its bytes at the ceiling's rate plus the
    slowest receiving rank's own load of it (both measured in this run)."""
    total = 0.0
    for k, n in enumerate(bucket_sizes):
        slowest = max((ranks[k] for ranks in load_ms if k < len(ranks)), default=0.0)
        total += n / wire_rate + slowest / 1e3
    return total


# The gates, on the defaults row of each slot size: (name, applies to a slot of this many bytes,
# the ratio's key, its threshold).
GATES = [
    ("defaults end to end >= 1.10 x torch-direct (slots 128 MiB to 1 GiB)", lambda b: b <= GIB,
     "e2e_over_direct", 1.10),
    ("defaults end to end >= 1.0 x torch-direct (slots 2 to 4 GiB)", lambda b: b > GIB,
     "e2e_over_direct", 1.0),
]


_FLAT = {}


def flat_layout(model):
    """The same tensors as views, in order, into one buffer, as Megatron's contiguous parameter
    buffer holds them: every bucket then lies in one allocation exactly as it is sent."""
    if "model" not in _FLAT:
        total = sum(t.numel() * t.element_size() for _, t in model)
        buf = torch.empty(total, dtype=torch.uint8, device="cuda:0")
        out, at = [], 0
        for name, t in model:
            n = t.numel() * t.element_size()
            view = buf[at:at + n].view(t.dtype).view(t.shape)
            view.copy_(t)
            out.append((name, view))
            at += n
        torch.cuda.synchronize()
        _FLAT["model"], _FLAT["buffer"] = out, buf
    return _FLAT["model"]


def run_wsync(args, wsync, model, slot, label, bucket_sizes, log, extra):
    """Returns (end-to-end seconds, data-plane seconds, daemon timing of each measured push)."""
    # "client:..." in a variant's arguments is for the client, not for wsyncd: client:pull and
    # client:push choose the mode (neither: the group's, as push() does by default), client:flat
    # pushes the model laid out in one flat buffer.
    pull = True if "client:pull" in extra else False if "client:push" in extra else None
    if "client:flat" in extra:
        model = flat_layout(model)
    extra = tuple(a for a in extra if not a.startswith("client:"))
    mode = {True: " (pull mode)", False: " (push mode)", None: ""}[pull]
    note(f"{label}: starting wsyncd {' '.join(extra)}{mode}"
         f"{' (flat model buffer)' if model is _FLAT.get('model') else ''}")
    daemon = Daemon(args, slot, log, extra)
    tag = label.replace(" ", "-")
    try:
        with wsync.Client("unix:" + daemon.sock, device=0, name="bench") as client:
            seconds, _ = wsync_push(client, model, f"{tag}-warm", pull)
            note(f"{label}: wsync warm-up push {seconds:.3f} s")
            engine_loads(args)  # forgets the warm-up's
            runs = []
            for r in range(args.runs):
                seconds, result = wsync_push(client, model, f"{tag}-{r}", pull)
                result["load_ms"] = engine_loads(args)
                runs.append((seconds, result))
            note(f"{label}: wsync pushes {[round(s, 3) for s, _ in runs]} s")
            post_all(args.engines, "/sim/mode", {"data_plane": True})
            dp = []
            for r in range(args.runs + 1):
                receive = Async(post_all, args.engines, "/bench/receive", {"sizes": bucket_sizes})
                seconds, result = wsync_push(client, model, f"{tag}-dp{r}", pull)
                receive.join()
                dp.append((seconds, result))
            post_all(args.engines, "/sim/mode", {"data_plane": False})
            note(f"{label}: data-plane pushes {[round(s, 3) for s, _ in dp]} s")
    finally:
        daemon.stop()
    e2e = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    data_plane = sorted(dp[1:], key=lambda r: r[0])[len(dp[1:]) // 2]
    for what, (_, result) in (("e2e", e2e), ("data plane", data_plane)):
        t, n = result["daemon_timing"], result["buckets"]
        gaps = max(n - 1, 1)
        note(f"{label} {what}: daemon per bucket: verify {t['verify_seconds'] / n * 1e3:.2f} ms, "
             f"idle between buckets {t['idle_seconds'] / gaps * 1e3:.2f} ms, broadcast "
             f"{t['wire_seconds'] / n * 1e3:.2f} ms, request late "
             f"{t['request_late_seconds'] / n * 1e3:.2f} ms, answer "
             f"{t['answer_seconds'] / n * 1e3:.2f} ms; per update: first bucket launched "
             f"{t.get('first_launch_seconds', 0) * 1e3:.2f} ms after Begin, engines' commit "
             f"{t.get('finish_seconds', 0) * 1e3:.2f} ms, {result['seconds'] * 1e3:.1f} ms in all; "
             f"{result['buckets_pulled']}/{n} buckets pulled by wsyncd, "
             f"{result['buckets_read_in_place']} of them read in place")
    return (statistics.median(s for s, _ in runs), statistics.median(s for s, _ in dp[1:]),
            [r["daemon_timing"] for _, r in runs], e2e[1]["load_ms"],
            (e2e[1]["buckets_pulled"], e2e[1]["buckets"]))


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--engines", required=True,
                    help="comma-separated engine URLs, one receiving rank each (TP 1)")
    ap.add_argument("--slots", default="128MiB,256MiB,512MiB,1GiB,2GiB,4GiB")
    ap.add_argument("--bucket-timeout", type=int, default=120,
                    help="wsyncd's --bucket-timeout (seconds): how long a stuck bucket holds a run")
    ap.add_argument("--variants", default="",
                    help="extra wsyncd configurations to time, 'name=args;name=args', e.g. "
                         "'push=client:push;4-slots=--slots 4' (client:pull and client:push: "
                         "the mode, instead of the group's; client:flat: the model lies in one "
                         "flat buffer, as in Megatron)")
    args = ap.parse_args()
    args.engines = args.engines.split(",")
    variants = [(v.split("=", 1)[0], tuple(v.split("=", 1)[1].split()))
                for v in args.variants.split(";") if v]
    sys.path.insert(0, args.python_client)
    import wsync

    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "wsyncd.log"), "w")
    model = qwen25_7b_model()
    note("model ready")
    sizes = [t.numel() * 2 for _, t in model]
    total = sum(sizes)
    units = {"MiB": 2**20, "GiB": 2**30}
    rows, failures = [], []
    print(f"# wsync update benchmark: Qwen2.5-7B shapes, {len(model)} bf16 tensors, "
          f"{total / GIB:.2f} GiB; rank 0 on GPU 0, {len(args.engines)} receiving rank(s) on "
          f"GPUs 1-{len(args.engines)}; median of {args.runs} runs after a warm-up", flush=True)
    print("# defaults: push(state_dict, version, group) with nothing else set; the other configs "
          "are variants. limit: the engine-bound limit (per bucket, its bytes at the ceiling's "
          "rate plus the slowest rank's own load time)", flush=True)
    header = ("#    slot  config          buckets  ceiling    limit  dataplane   e2e  direct"
              "  dp/ceil  e2e/limit  e2e/direct")
    print(header + "\n#                                  GiB/s    GiB/s      GiB/s GiB/s   GiB/s",
          flush=True)
    for slot_text in args.slots.split(","):
        slot = int(slot_text[:-3]) * units[slot_text[-3:]]
        buckets = plan(sizes, slot)
        bucket_sizes = [sum(sizes[i] for i in b) for b in buckets]
        row = {"slot": slot_text, "slot_bytes": slot, "buckets": len(buckets), "bytes": total}

        configs = {}
        wsync_s, dataplane_s, timing, loads, (pulled, n) = run_wsync(
            args, wsync, model, slot, slot_text, bucket_sizes, log, ())
        configs["defaults"] = {"wsync_s": wsync_s, "dataplane_s": dataplane_s, "load_ms": loads}
        if pulled != n:
            # The broadcast transport asks for pull mode: a defaults row that pushed is not what
            # a user gets.
            failures.append(f"{slot_text} defaults: {pulled} of {n} buckets pulled")
        row["daemon_timing"] = timing
        for name, extra in variants:
            try:
                e2e, dp, _, loads, _ = run_wsync(args, wsync, model, slot,
                                                 f"{slot_text} {name}", bucket_sizes, log, extra)
                configs[name] = {"wsync_s": e2e, "dataplane_s": dp, "load_ms": loads}
            except Exception as e:  # the other variants and the baselines still run
                note(f"{slot_text} {name}: FAILED: {e}")
                failures.append(f"{slot_text} {name}: {e}")

        pg = direct_group(args)
        buf = torch.empty(max(bucket_sizes), dtype=torch.uint8, device="cuda:0")
        ceil = [ceiling(args, pg, bucket_sizes, buf) for _ in range(args.runs + 1)]
        row["ceiling_s"] = min(ceil[1:])
        note(f"{slot_text}: ceiling {[round(s, 4) for s in ceil]} s")
        del buf
        bufs = [torch.empty(max(bucket_sizes), dtype=torch.uint8, device="cuda:0")
                for _ in range(2)]
        one = [one_process(args, pg, model, buckets, bucket_sizes, bufs)
               for _ in range(args.runs + 1)]
        row["one_process_s"] = statistics.median(one[1:])
        note(f"{slot_text}: one-process pipelined copy+broadcast {[round(s, 4) for s in one]} s")
        del bufs
        # The whole update and its buckets alone, alternately.
        direct, bare = [], []
        for r in range(args.runs + 1):
            direct.append(torch_direct(args, pg, model, buckets, f"direct-{r}"))
            bare.append(torch_direct(args, pg, model, buckets, "", steps=False))
        row["direct_s"] = statistics.median(direct[1:])
        row["direct_buckets_s"] = statistics.median(bare[1:])
        note(f"{slot_text}: torch-direct {[round(s, 4) for s in direct]} s, its buckets alone "
             f"{[round(s, 4) for s in bare]} s")
        # torch tears a group down with its peers: both sides at once.
        destroy = Async(post_all, args.engines, "/destroy_weights_update_group",
                        {"group_name": "direct"})
        dist.destroy_process_group(pg)
        destroy.join()
        torch.cuda.empty_cache()

        wire_rate = total / row["ceiling_s"]
        ceiling_g = total / row["ceiling_s"] / GIB
        direct_g = total / row["direct_s"] / GIB
        for name, c in configs.items():
            c["limit_s"] = engine_bound_seconds(bucket_sizes, wire_rate, c["load_ms"])
            c["dp_over_ceiling"] = row["ceiling_s"] / c["dataplane_s"]
            c["e2e_over_limit"] = c["limit_s"] / c["wsync_s"]
            c["e2e_over_direct"] = row["direct_s"] / c["wsync_s"]
            print(f"{slot_text:>9}  {name:<15} {len(buckets):7d} {ceiling_g:8.1f} "
                  f"{total / c['limit_s'] / GIB:8.1f} {total / c['dataplane_s'] / GIB:10.1f} "
                  f"{total / c['wsync_s'] / GIB:5.1f} {direct_g:7.1f} "
                  f"{c['dp_over_ceiling']:8.2f} {c['e2e_over_limit']:10.2f} "
                  f"{c['e2e_over_direct']:11.2f}", flush=True)
        best = min(configs, key=lambda n: configs[n]["wsync_s"])
        row["configs"] = configs
        row["best"] = best
        mid = timing[len(timing) // 2]
        # The daemon's share: rank 0 idle, plus engines waiting for a request not yet written.
        row["daemon_ms_per_bucket"] = (mid["idle_seconds"] + mid["request_late_seconds"]) / len(buckets) * 1e3
        row["engine_ms_per_bucket"] = max(
            0.0, (mid["wire_seconds"] - mid["request_late_seconds"] - total / wire_rate) / len(buckets) * 1e3)
        one_g = total / row["one_process_s"] / GIB
        print(f"#   {slot_text:>7} best: {best}; defaults' gaps per bucket: daemon "
              f"{row['daemon_ms_per_bucket']:.2f} ms, engine {row['engine_ms_per_bucket']:.2f} ms; "
              f"one process, copy beside broadcast: {one_g:.1f} GiB/s "
              f"({one_g / ceiling_g:.2f} of ceiling); torch-direct's buckets alone "
              f"{total / row['direct_buckets_s'] / GIB:.1f} GiB/s (defaults e2e "
              f"{row['direct_buckets_s'] / configs['defaults']['wsync_s']:.2f}x that)", flush=True)
        rows.append(row)
        with open(os.path.join(args.out, "bench.json"), "w") as f:
            json.dump({"model": "Qwen2.5-7B shapes, bf16", "bytes": total,
                       "receivers": len(args.engines), "rows": rows}, f, indent=1)
    missed = 0
    for row in rows:
        defaults = row["configs"]["defaults"]
        for gate, applies, key, threshold in GATES:
            if not applies(row["slot_bytes"]):
                continue
            ok = defaults[key] >= threshold
            missed += 0 if ok else 1
            print(f"GATE {row['slot']:>7} {gate}: {'PASS' if ok else 'MISSED'} "
                  f"({defaults[key]:.2f})", flush=True)
    if failures:
        print("# FAILED: " + "; ".join(failures), flush=True)
    print(f"# gates: {'all PASS' if missed == 0 else f'{missed} MISSED'}", flush=True)
    return 1 if failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())
