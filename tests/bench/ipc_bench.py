"""Colocated weight-update benchmark, nccl-tests style: a model with Qwen2.5-7B's tensor names and
shapes in bf16 (random data, 14.19 GiB) on GPU 0, loaded by a torch engine rank on the same GPU
that follows SGLang's update_weights_from_tensor receive (tests/engines/sglang/sglang_engine.py on
GPU memory: exact-name unpickler, views of the sender's memory through CUDA IPC, copied into its
parameters). For each
bucket size, in the same run on the same GPU:

  ceiling   one device-to-device copy of the whole model (the engine's load alone): the least any
            path must do.
  peers     what RL frameworks do today, as slime's tensor updater runs an update: pause the
            engine and flush its cache; per bucket, torch.cat into a fresh tensor, reduce_tensor
            (a fresh IPC export), POST with load_format flattened_bucket and the version, wait for
            the answer; resume the engine. peers/buckets: its buckets alone (without the three
            requests, as this table had it before 2026-11-28).
  defaults  push(state_dict, version, group) with nothing set, to a wsyncd with nothing set (the
            headline row, which the gates judge), the model in one flat buffer; the group's
            transport asks for pull mode, so wsyncd copies each bucket into a slot, or lets the
            engine read it in place where the allocation is small enough against the bucket for
            that to pay (daemon/core/read_in_place.h). defaults/separate: the same with every
            tensor in an allocation of its own, as a plain state_dict holds them: wsyncd maps a
            colocated trainer's memory anew each update, so a bucket over several allocations is
            copied by the trainer (with the sampled checksum) and only one-allocation buckets
            are pulled. Both rows are gated.
  push/...  the trainer copies each bucket into wsyncd's slots (pull=False), with wsyncd's
            --checksum crc32 (every byte), its default for a colocated group (push/sampled:
            crc32-sampled, 4 KiB of every MiB) and none: the sampled check's cost is the
            difference between push/sampled and push/none.
  zero-copy beyond the slot sizes, --zero-copy-requests pushes in pull mode with requests up to
            that size (buckets larger than a slot, read in place; "model" = the whole model in one
            request) from a daemon with small slots: zero copy needs no staging memory. With
            --routes tensor,ipc also on SGLang's map-once route (POST /update_weights_from_ipc:
            one request per update, each rank maps its buffer once and takes each bucket's
            metadata over ZMQ, checkpoint-engine's worker protocol).

Every time is the median of --runs (5) after a warm-up. The gated rows take turns with the peers'
design run by run, and their speed-up is the median of the runs' ratios, so that the machine's
drift during the benchmark falls on both sides alike (at 2 to 4 GiB every design sits within a
few milliseconds of the engine's own cost, and whole-row medians taken minutes apart moved more
than that). Prints one table (size, seconds, GiB/s, fraction of the ceiling, speed-up over
peers) and writes bench.json. Gate lines judge the defaults rows (flat and separate) against the
peers' design (>= 1.10x at 128 MiB to 1 GiB, >= 1.0x at 2 to 4 GiB); --gate exits 1 when one is
missed.

    python3 tests/bench/ipc_bench.py --wsyncd build/dev-bundle/bin/wsyncd --nccl-lib ... \
        --python-client client/python --out $OUT/ipc-bench
"""

import argparse
import base64
import io
import json
import os
import statistics
import subprocess
import sys
import time
import types
import urllib.request

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_update import free_port, note, own_state_environment, plan, post, post_control  # noqa: E402,E501
from bench_update import qwen25_7b_shapes  # noqa: E402

GIB = 2**30


class Engine:
    """SGLang's simulator on GPU memory (one rank on GPU 0)."""

    def __init__(self, args, log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        here = os.path.dirname(__file__)
        engine = os.path.join(here, "..", "engines", "sglang", "sglang_engine.py")
        self.proc = subprocess.Popen([sys.executable, engine, "--memory", "cuda", "--port",
                                      str(self.port), "--gpus", "0"], stdout=log, stderr=log)
        for _ in range(600):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("engine never answered /health")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


class Daemon:
    def __init__(self, args, slot_bytes, checksum, engine_url, uuid, log):
        self.sock = f"/tmp/wsync-ipc-bench-{os.getpid()}.sock"
        self.ctl = os.path.join(os.path.dirname(args.wsyncd), "wsyncctl")
        self.proc = subprocess.Popen(
            [args.wsyncd, "--mode", "cuda", "--nccl-lib", args.nccl_lib, "--socket", self.sock,
             "--slot-bytes", str(slot_bytes), "--slots", str(args.slots_per_device),
             *(["--checksum", checksum] if checksum else []), "--bucket-timeout", "120"],
            stdout=log, stderr=log,
            env=own_state_environment())
        for _ in range(300):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)
        # Two groups on the one engine, one per route: "colo" (update_weights_from_tensor per
        # bucket) and "colo-route" (update_weights_from_ipc, mapped once).
        for group, extra in (("colo", []), ("colo-route", ["--sglang-ipc-route", "ipc"])):
            subprocess.run([self.ctl, "--socket", self.sock, "create-group", group, "--transport",
                            "ipc", "--engine", f"{engine_url}@GPU-{uuid}", *extra], check=True,
                           stdout=log, stderr=log)

    def stop(self):
        died = self.proc.poll()
        self.proc.terminate()
        self.proc.wait(timeout=60)
        return died


def fake_sglang_metadata_class():
    """A FlattenedTensorMetadata that pickles under SGLang's module name, as the peers' trainers
    import it from sglang itself."""
    name = "sglang.srt.weight_sync.tensor_bucket"
    for part in ("sglang", "sglang.srt", "sglang.srt.weight_sync", name):
        sys.modules.setdefault(part, types.ModuleType(part))

    class FlattenedTensorMetadata:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    FlattenedTensorMetadata.__module__ = name
    FlattenedTensorMetadata.__qualname__ = "FlattenedTensorMetadata"
    sys.modules[name].FlattenedTensorMetadata = FlattenedTensorMetadata
    return FlattenedTensorMetadata


def peers(engine_url, model, buckets, metadata_cls, version, steps=True):
    """One update as slime's tensor updater runs it (update_weights in
    slime/backends/megatron_utils/update_weight/update_weight_from_tensor.py): pause the engine
    and flush its cache; per bucket cat into a fresh tensor, export it anew, POST (labelled with
    the version), wait (the receive semantics of SGLang's flattened_bucket, uint8 since PR #13413);
    resume. Without `steps`, the buckets alone."""
    from torch.multiprocessing.reductions import reduce_tensor
    import pickle
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if steps:
        post_control(engine_url + "/pause_generation", {})
        post_control(engine_url + "/flush_cache", {})
    for b in buckets:
        flat = torch.cat([model[i][1].view(-1).view(torch.uint8) for i in b])
        meta, start = [], 0
        for i in b:
            name, t = model[i]
            n = t.numel() * t.element_size()
            meta.append(metadata_cls(name=name, shape=t.shape, dtype=t.dtype, start_idx=start,
                                     end_idx=start + n, numel=n))
            start += n
        torch.cuda.current_stream().synchronize()  # the bytes are ready before the engine reads
        fn, fn_args = reduce_tensor(flat)
        buf = io.BytesIO()

        class Reduced:
            def __reduce__(self):
                return fn, fn_args

        pickle.Pickler(buf, protocol=4).dump({"flattened_tensor": Reduced(), "metadata": meta})
        body = {"serialized_named_tensors": [base64.b64encode(buf.getvalue()).decode()],
                "load_format": "flattened_bucket", "flush_cache": False}
        if steps:
            body["weight_version"] = version
        answer = post(engine_url + "/update_weights_from_tensor", body)
        if not answer.get("success"):
            raise RuntimeError(f"peers' update failed: {answer}")
        del flat
    torch.cuda.synchronize()
    if steps:
        post_control(engine_url + "/continue_generation", {})
    return time.perf_counter() - t0


def ceiling(model, total_bytes):
    src = torch.empty(total_bytes, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del src, dst
    torch.cuda.empty_cache()
    return best


def check_engine(engine_url, expected, version=None):
    """The spot tensors hold `expected` on every rank (there must be one), and the engine's
    weight_version is `version` where given: the design's last push, not an earlier one's,
    delivered them."""
    with urllib.request.urlopen(engine_url + "/sim/checksums") as r:
        got = json.loads(r.read())
    ranks = got["ranks"]
    return (bool(ranks) and (version is None or got.get("weight_version") == version)
            and all(tensors.get(k) == v for tensors in ranks.values() for k, v in expected.items()))


def crc_of(model, names):
    import zlib
    out = {}
    for name, t in model:
        if name in names:
            out[name] = format(zlib.crc32(t.contiguous().view(-1).view(torch.uint8).cpu().numpy()
                                          .tobytes()), "08x")
    return out


# The configurations timed through wsyncd: (row name, wsyncd's --checksum or None for its default,
# push() keyword arguments, which model). "defaults" is push(state_dict, version, group) with
# nothing set, against a wsyncd with nothing set: the headline row, which the gates judge.
CONFIGS = [
    ("defaults", None, {}, "flat"),
    ("defaults/separate", None, {}, "separate"),
    ("push/crc32", "crc32", {"pull": False}, "flat"),
    ("push/sampled", None, {"pull": False}, "flat"),
    ("push/none", "none", {"pull": False}, "flat"),
]
# The rows the gates judge: what push(state_dict) gives from either layout.
GATED = ("defaults", "defaults/separate")
# The gated rows run in turn with the peers' design, so against one daemon: one checksum setting.
GATED_CHECKSUM = next(c for n, c, _, _ in CONFIGS if n in GATED)
assert all(c == GATED_CHECKSUM for n, c, _, _ in CONFIGS if n in GATED)
# The issue's targets for the defaults row: speed-up over the peers' design by bucket size.
GATES = [(lambda b: b <= GIB, 1.10, "128 MiB to 1 GiB"), (lambda b: b > GIB, 1.0, "2 to 4 GiB")]


def flat_and_separate_models():
    """Qwen2.5-7B's tensors in bf16 on GPU 0 (seed 0), twice: in one flat buffer back to back (a
    flat parameter buffer: pull mode reads them in place where that pays), and each in an
    allocation of its own, as a plain state_dict holds them."""
    torch.manual_seed(0)
    shapes = list(qwen25_7b_shapes())
    numels = [int(torch.Size(s).numel()) for _, s in shapes]
    flat = torch.randn(sum(numels), dtype=torch.bfloat16, device="cuda:0")
    model, at = [], 0
    for (n, s), k in zip(shapes, numels):
        model.append((n, flat[at:at + k].view(s)))
        at += k
    return model, [(n, t.clone()) for n, t in model]


def record(row, name, seconds, runs_s, res, ok):
    row["designs"][name] = {"s": seconds, "ok": ok, "pulled": res["buckets_pulled"],
                            "in_place": res["buckets_read_in_place"], "runs_s": runs_s}
    note(f"{row['size']} {name}: {seconds * 1e3:.1f} ms (runs {min(runs_s) * 1e3:.1f}"
         f"-{max(runs_s) * 1e3:.1f}), {res['buckets_pulled']}/{res['buckets']} buckets pulled, "
         f"{res['buckets_read_in_place']} read in place")


def timed_pushes(client, model, runs, version, **kwargs):
    """Median seconds of `runs` pushes after one warm-up, the last push's result, its version and
    every timed run's seconds (the spread behind the median)."""
    times, results = [], []
    for r in range(runs + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        results.append(client.push(model, version=f"{version}-{r}", group="colo", **kwargs))
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]), results[-1], f"{version}-{runs}", times[1:]


def colocated_arguments(sizes, runs):
    """The arguments every colocated benchmark takes: where wsyncd, NCCL and the client are, the
    output folder, bucket sizes, runs and slots."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--wsyncd", required=True)
    ap.add_argument("--nccl-lib", required=True)
    ap.add_argument("--python-client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default=sizes)
    ap.add_argument("--runs", type=int, default=runs, help="timed runs per design (median)")
    ap.add_argument("--slots-per-device", type=int, default=2)
    return ap


def main():
    ap = colocated_arguments("128MiB,512MiB,1GiB,2GiB,4GiB", 5)
    ap.add_argument("--zero-copy-requests", default="4GiB,8GiB,model",
                    help="request sizes for zero copy beyond the slot sizes ('' for none)")
    ap.add_argument("--routes", default="tensor",
                    help="SGLang routes for the zero-copy rows: tensor (a request per bucket) "
                         "and ipc (the map-once route)")
    ap.add_argument("--gate", action="store_true")
    args = ap.parse_args()
    routes = [("colo", "")] + ([("colo-route", "/map-once")] if "ipc" in args.routes else [])
    os.makedirs(args.out, exist_ok=True)
    sys.path.insert(0, args.python_client)
    import wsync

    model, separate = flat_and_separate_models()
    models = {"flat": model, "separate": separate}
    total = sum(t.numel() * t.element_size() for _, t in model)
    sizes = [t.numel() * t.element_size() for _, t in model]
    note(f"model: {len(model)} tensors, {total / GIB:.2f} GiB bf16 on GPU 0, flat and separate")
    # Spot checks: the first, a middle and the last tensor, read back from the engine after runs.
    spot = crc_of(model, {model[0][0], model[len(model) // 2][0], model[-1][0]})
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    log = open(os.path.join(args.out, "processes.log"), "w")
    engine = Engine(args, log)
    metadata_cls = fake_sglang_metadata_class()
    ceil = ceiling(model, total)
    note(f"ceiling: one d2d copy of {total / GIB:.2f} GiB in {ceil * 1e3:.1f} ms "
         f"({total / ceil / GIB:.0f} GiB/s)")
    results = []
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    for text in args.sizes.split(","):
        slot = int(text[:-3]) * units[text[-3:]]
        buckets = plan(sizes, slot)
        row = {"size": text, "bytes": slot, "buckets": len(buckets), "designs": {}}
        # The gated rows and the peers' design take turns run by run (after one warm-up each),
        # so that a drift of the machine's speed falls on all of them alike: each gated row's
        # ratio is the median of its runs' ratios to the peers' run just before. The peers'
        # whole update and its buckets alone alternate; the other rows run after, each design's
        # runs together, with a daemon of their own checksum.
        times, bare, paired = [], [], {}
        for checksum in dict.fromkeys([GATED_CHECKSUM] + [c for _, c, _, _ in CONFIGS]):
            daemon = Daemon(args, slot, checksum, engine.url, uuid, log)
            try:
                with wsync.Client("unix:" + daemon.sock, device=0, name="ipc bench") as client:
                    mine = [c for c in CONFIGS if c[1] == checksum]
                    turns = [c for c in mine if c[0] in GATED]
                    if turns:
                        runs = {name: [] for name, _, _, _ in turns}
                        last, ok = {}, {}
                        for r in range(args.runs + 1):
                            times.append(peers(engine.url, model, buckets, metadata_cls,
                                               f"{text}-peers-{r}"))
                            bare.append(peers(engine.url, model, buckets, metadata_cls, "",
                                              steps=False))
                            for name, _, kwargs, which in turns:
                                torch.cuda.synchronize()
                                t0 = time.perf_counter()
                                last[name] = client.push(models[which], version=f"{text}-{name}-{r}",
                                                         group="colo", **kwargs)
                                runs[name].append(time.perf_counter() - t0)
                                if r == args.runs:  # its last push, before the next design's
                                    ok[name] = check_engine(engine.url, spot,
                                                            f"{text}-{name}-{r}")
                        row["peers_s"] = statistics.median(times[1:])
                        row["designs"]["peers"] = {"s": row["peers_s"], "runs_s": times[1:],
                                                   "ok": check_engine(engine.url, spot)}
                        row["designs"]["peers/buckets"] = {"s": statistics.median(bare[1:]),
                                                           "ok": check_engine(engine.url, spot)}
                        for name, _, _, _ in turns:
                            runs_s = runs[name][1:]
                            paired[name] = statistics.median(
                                p / d for p, d in zip(times[1:], runs_s))
                            record(row, name, statistics.median(runs_s), runs_s, last[name],
                                   ok[name])
                    for name, c, kwargs, which in mine:
                        if name in row["designs"]:
                            continue
                        seconds, res, last_version, runs_s = timed_pushes(
                            client, models[which], args.runs, f"{text}-{name}", **kwargs)
                        record(row, name, seconds, runs_s, res,
                               check_engine(engine.url, spot, last_version))
            finally:
                if daemon.stop() is not None:
                    for name, c, _, _ in CONFIGS:
                        if c == checksum and name in row["designs"]:
                            row["designs"][name]["ok"] = False
        row["paired"] = paired
        results.append(row)
        note(f"{text}: {json.dumps(row)}")
    # Zero copy with requests larger than any slot: a daemon with small slots (staging memory is
    # never used), each request naming a run of the trainer's flat buffer.
    big = []
    for text in [t for t in args.zero_copy_requests.split(",") if t]:
        limit = total if text == "model" else int(text[:-3]) * units[text[-3:]]
        for group, suffix in routes:
            row = {"size": text, "bytes": limit, "buckets": len(plan(sizes, limit)),
                   "design": "zero-copy" + suffix}
            daemon = Daemon(args, 256 << 20, "none", engine.url, uuid, log)
            try:
                with wsync.Client("unix:" + daemon.sock, device=0, name="zero copy") as client:
                    times, in_place = [], True
                    for r in range(args.runs + 1):
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        res = client.push(model, version=f"{text}-zero-big{suffix}-{r}",
                                          group=group, pull=True, bucket_bytes=limit)
                        times.append(time.perf_counter() - t0)
                        in_place &= res["buckets_read_in_place"] == res["buckets"]
                        row["buckets"] = res["buckets"]
                    client.release_sources()
                row["zero_copy_s"] = statistics.median(times[1:])
                row["zero_copy_ok"] = (check_engine(engine.url, spot,
                                                    f"{text}-zero-big{suffix}-{args.runs}")
                                       and in_place)
            finally:
                if daemon.stop() is not None:
                    row["zero_copy_ok"] = False
            big.append(row)
            note(f"{row['design']}, requests up to {text}: {json.dumps(row)}")
    engine.stop()

    print(f"# colocated update of {total / GIB:.2f} GiB ({len(model)} bf16 tensors) on "
          f"{torch.cuda.get_device_name(0)}; ceiling = one d2d copy: {ceil * 1e3:.1f} ms, "
          f"{total / ceil / GIB:.0f} GiB/s; median of {args.runs} runs after a warm-up")
    print("# defaults: push(state_dict, version, group) with nothing set, to a wsyncd with nothing "
          "set, the model in one flat buffer; defaults/separate: each tensor its own allocation")
    print(f"# vs-peers: for {' and '.join(GATED)} (run in turn with the peers' design) the median "
          "of the runs' ratios to the peers' run before each; for the others the ratio of the "
          "medians")
    print("#  size     buckets  design                time(ms)   GiB/s  of-ceiling  vs-peers  "
          "bytes-ok  pulled/in-place")
    failed = []
    for row in results:
        for name, d in row["designs"].items():
            how = f"{d['pulled']}/{d['in_place']}" if "pulled" in d else "-"
            ratio = row["paired"].get(name, row["peers_s"] / d["s"])
            print(f"  {row['size']:>7}  {row['buckets']:>7}  {name:<20} {d['s'] * 1e3:9.1f} "
                  f"{total / d['s'] / GIB:7.1f}  {ceil / d['s']:10.2f}  "
                  f"{ratio:8.2f}  {'yes' if d['ok'] else 'NO':>8}  {how:>15}")
            if not d["ok"]:
                failed.append(f"{name} at {row['size']}: engine bytes differ")
    for row in big:
        seconds, ok = row["zero_copy_s"], row["zero_copy_ok"]
        print(f"  {row['size']:>7}  {row['buckets']:>7}  {row['design']:<20} {seconds * 1e3:9.1f} "
              f"{total / seconds / GIB:7.1f}  {ceil / seconds:10.2f}  {'-':>8}  "
              f"{'yes' if ok else 'NO':>8}")
        if not ok:
            failed.append(f"{row['design']} at {row['size']} requests: engine bytes differ")
    gates = []
    for row in results:
        for applies, threshold, what in GATES:
            for design in GATED:
                if applies(row["bytes"]) and design in row["designs"]:
                    ratio = row["paired"][design]
                    gates.append((f"{row['size']}: {design} >= {threshold:.2f}x peers ({what})",
                                  ratio >= threshold, ratio))
    for text, ok, ratio in gates:
        print(f"# gate: {text}: {'PASS' if ok else 'MISSED'} ({ratio:.2f})")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"ceiling_s": ceil, "bytes": total, "tensors": len(model), "rows": results,
                   "zero_copy_large_requests": big, "runs": args.runs,
                   "gates": gates, "device": torch.cuda.get_device_name(0)}, f, indent=1)
    if failed:
        print("# BYTES DIFFER: " + "; ".join(failed))
        sys.exit(1)
    if args.gate and not all(ok for _, ok, _ in gates):
        sys.exit(1)


if __name__ == "__main__":
    main()
