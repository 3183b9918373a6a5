"""Colocated weight-update benchmark, nccl-tests style: a model with Qwen2.5-7B's tensor names and
shapes in bf16 (random data, 14.19 GiB) on GPU 0, loaded by a torch engine rank on the same GPU that
follows SGLang's update_weights_from_tensor receive (tests/engines/sglang/sglang_engine.py on GPU memory: exact-name
unpickler, views of the sender's memory through CUDA IPC, copied into its parameters). For each
bucket size, in the same run on the same GPU:

  ceiling   one device-to-device copy of the whole model (the engine's load alone): the least any
            path must do.
  peers     what RL frameworks do today: per bucket, torch.cat into a fresh tensor, reduce_tensor
            (a fresh IPC export), POST with load_format flattened_bucket, wait for the answer.
  wsync     the trainer pushes through wsyncd (Python client into wsyncd's CUDA-IPC slots), which
            posts the engine one request per bucket naming its slot; --checksum crc32 and none.
  zero-copy the model lives in one flat buffer and is pushed in pull mode: each request names the
            trainer's buffer, the engine's load is the only copy (--checksum none).
  .../map-once  the same two (--checksum none) on SGLang's map-once route (--sglang-ipc-route ipc,
            POST /update_weights_from_ipc): one request per update, each rank maps its buffer once
            and takes each bucket's metadata over ZMQ (checkpoint-engine's worker protocol). Beyond the
            slot sizes, --zero-copy-requests pushes with requests up to that size (pull-mode
            buckets larger than a slot, read in place; "model" = the whole model in one request)
            from a daemon with small slots: zero copy needs no staging memory.

Prints one table (size, seconds, GiB/s, fraction of the ceiling, speed-up over peers) and writes
bench.json. --gate checks the issue's targets and exits 1 when one is missed.

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
from bench_update import free_port, note, own_state_environment, plan, post  # noqa: E402
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
             "--checksum", checksum, "--bucket-timeout", "120"], stdout=log, stderr=log,
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


def peers(engine_url, model, buckets, metadata_cls):
    """Per bucket: cat into a fresh tensor, export it anew, POST, wait (the receive semantics of
    SGLang's flattened_bucket, uint8 since PR #13413)."""
    from torch.multiprocessing.reductions import reduce_tensor
    import pickle
    torch.cuda.synchronize()
    t0 = time.perf_counter()
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
        answer = post(engine_url + "/update_weights_from_tensor",
                      {"serialized_named_tensors": [base64.b64encode(buf.getvalue()).decode()],
                       "load_format": "flattened_bucket", "flush_cache": False})
        if not answer.get("success"):
            raise RuntimeError(f"peers' update failed: {answer}")
        del flat
    torch.cuda.synchronize()
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


def check_engine(engine_url, expected):
    with urllib.request.urlopen(engine_url + "/sim/checksums") as r:
        got = json.loads(r.read())["ranks"]
    return all(tensors.get(k) == v for tensors in got.values() for k, v in expected.items())


def crc_of(model, names):
    import zlib
    out = {}
    for name, t in model:
        if name in names:
            out[name] = format(zlib.crc32(t.contiguous().view(-1).view(torch.uint8).cpu().numpy()
                                          .tobytes()), "08x")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wsyncd", required=True)
    ap.add_argument("--nccl-lib", required=True)
    ap.add_argument("--python-client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="128MiB,512MiB,1GiB,4GiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--slots-per-device", type=int, default=2)
    ap.add_argument("--checksums", default="crc32,none")
    ap.add_argument("--zero-copy-requests", default="4GiB,8GiB,model",
                    help="request sizes for zero copy beyond the slot sizes ('' for none)")
    ap.add_argument("--routes", default="tensor,ipc",
                    help="SGLang routes to measure: tensor (a request per bucket) and ipc (the "
                         "map-once route), the latter with --checksum none only")
    ap.add_argument("--gate", action="store_true")
    args = ap.parse_args()
    routes = [("colo", "")] + ([("colo-route", "/map-once")] if "ipc" in args.routes else [])
    os.makedirs(args.out, exist_ok=True)
    sys.path.insert(0, args.python_client)
    import wsync

    torch.manual_seed(0)
    shapes = list(qwen25_7b_shapes())
    # One flat buffer holding every tensor back to back (a flat parameter buffer): the same bytes
    # serve every design, and the zero-copy design reads them in place.
    numels = [int(torch.Size(s).numel()) for _, s in shapes]
    flat = torch.randn(sum(numels), dtype=torch.bfloat16, device="cuda:0")
    model, at = [], 0
    for (n, s), k in zip(shapes, numels):
        model.append((n, flat[at:at + k].view(s)))
        at += k
    total = sum(t.numel() * t.element_size() for _, t in model)
    sizes = [t.numel() * t.element_size() for _, t in model]
    note(f"model: {len(model)} tensors, {total / GIB:.2f} GiB bf16 on GPU 0")
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
        row = {"size": text, "bytes": slot, "buckets": len(buckets)}
        # The peers' design: best of the runs after one warm-up.
        times = [peers(engine.url, model, buckets, metadata_cls) for _ in range(args.runs + 1)]
        row["peers_s"] = min(times[1:])
        row["peers_ok"] = check_engine(engine.url, spot)
        for checksum in args.checksums.split(","):
            daemon = Daemon(args, slot, checksum, engine.url, uuid, log)
            try:
                with wsync.Client("unix:" + daemon.sock, device=0, name="ipc bench") as client:
                    times = []
                    for r in range(args.runs + 1):
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        client.push(model, version=f"{text}-{checksum}-{r}", group="colo")
                        times.append(time.perf_counter() - t0)
                row[f"wsync_{checksum}_s"] = min(times[1:])
                row[f"wsync_{checksum}_median_s"] = statistics.median(times[1:])
                row[f"wsync_{checksum}_ok"] = check_engine(engine.url, spot)
                if checksum == "none":
                    for group, suffix in routes:
                        key = suffix.strip("/").replace("-", "_")
                        if suffix and max(sizes) > slot:
                            # The route maps one allocation per update, and a tensor larger than
                            # the slot would travel in a slot of its own: slots do not apply.
                            note(f"{text}: map-once route from slots needs slots above the "
                                 f"largest tensor ({max(sizes) / GIB:.2f} GiB); zero copy only")
                        elif suffix:
                            # Slots through the map-once route.
                            with wsync.Client("unix:" + daemon.sock, device=0,
                                              name="map once") as client:
                                times = []
                                for r in range(args.runs + 1):
                                    torch.cuda.synchronize()
                                    t0 = time.perf_counter()
                                    client.push(model, version=f"{text}-route-{r}", group=group)
                                    times.append(time.perf_counter() - t0)
                            row[f"wsync_none_{key}_s"] = min(times[1:])
                            row[f"wsync_none_{key}_ok"] = check_engine(engine.url, spot)
                        with wsync.Client("unix:" + daemon.sock, device=0,
                                          name="zero copy") as client:
                            times, in_place = [], True
                            for r in range(args.runs + 1):
                                torch.cuda.synchronize()
                                t0 = time.perf_counter()
                                res = client.push(model, version=f"{text}-zero{suffix}-{r}",
                                                  group=group, pull=True)
                                times.append(time.perf_counter() - t0)
                                in_place &= res["buckets_read_in_place"] == res["buckets"]
                            client.release_sources()
                        zkey = "zero_copy" + (f"_{key}" if key else "")
                        row[f"{zkey}_s"] = min(times[1:])
                        row[f"{zkey}_ok"] = check_engine(engine.url, spot) and in_place
            finally:
                if daemon.stop() is not None:
                    row[f"wsync_{checksum}_ok"] = False
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
                row["zero_copy_s"] = min(times[1:])
                row["zero_copy_ok"] = check_engine(engine.url, spot) and in_place
            finally:
                if daemon.stop() is not None:
                    row["zero_copy_ok"] = False
            big.append(row)
            note(f"{row['design']}, requests up to {text}: {json.dumps(row)}")
    engine.stop()

    print(f"# colocated update of {total / GIB:.2f} GiB ({len(model)} bf16 tensors) on "
          f"{torch.cuda.get_device_name(0)}; ceiling = one d2d copy: {ceil * 1e3:.1f} ms, "
          f"{total / ceil / GIB:.0f} GiB/s")
    print("#  size     buckets  design                time(ms)   GiB/s  of-ceiling  vs-peers  bytes-ok")
    failed = []
    for row in results:
        designs = [("peers", row["peers_s"], row["peers_ok"])]
        for checksum in args.checksums.split(","):
            designs.append((f"wsync/{checksum}", row[f"wsync_{checksum}_s"],
                            row[f"wsync_{checksum}_ok"]))
        if "wsync_none_map_once_s" in row:
            designs.append(("wsync/none/map-once", row["wsync_none_map_once_s"],
                            row["wsync_none_map_once_ok"]))
        if "zero_copy_s" in row:
            designs.append(("zero-copy", row["zero_copy_s"], row["zero_copy_ok"]))
        if "zero_copy_map_once_s" in row:
            designs.append(("zero-copy/map-once", row["zero_copy_map_once_s"],
                            row["zero_copy_map_once_ok"]))
        for name, seconds, ok in designs:
            print(f"  {row['size']:>7}  {row['buckets']:>7}  {name:<20} {seconds * 1e3:9.1f} "
                  f"{total / seconds / GIB:7.1f}  {ceil / seconds:10.2f}  "
                  f"{row['peers_s'] / seconds:8.2f}  {'yes' if ok else 'NO'}")
            if not ok:
                failed.append(f"{name} at {row['size']}: engine bytes differ")
    for row in big:
        seconds, ok = row["zero_copy_s"], row["zero_copy_ok"]
        print(f"  {row['size']:>7}  {row['buckets']:>7}  {row['design']:<20} {seconds * 1e3:9.1f} "
              f"{total / seconds / GIB:7.1f}  {ceil / seconds:10.2f}  {'-':>8}  "
              f"{'yes' if ok else 'NO'}")
        if not ok:
            failed.append(f"{row['design']} at {row['size']} requests: engine bytes differ")
    best_fraction = max(ceil / row[k] for row in results for k in row
                        if k.endswith("_s") and k.startswith("wsync_"))
    gates = [("slots reach 0.40 of the ceiling at some size", best_fraction >= 0.40)]
    zero = [ceil / row[k] for row in results + big for k in row
            if k.startswith("zero_copy") and k.endswith("_s")]
    if zero:
        gates.append(("zero copy reaches 0.70 of the ceiling at some request size",
                      max(zero) >= 0.70))
    for row in results:
        best = min(row[k] for k in row
                   if k.endswith("_s") and k.startswith(("wsync_", "zero_copy")))
        if row["size"] == "128MiB":
            gates.append(("wsync >= 2.5x peers at 128 MiB", row["peers_s"] / best >= 2.5))
        if row["size"] == "1GiB":
            gates.append(("wsync >= 1.5x peers at 1 GiB", row["peers_s"] / best >= 1.5))
    for text, ok in gates:
        print(f"# gate: {text}: {'PASS' if ok else 'MISSED'}")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"ceiling_s": ceil, "bytes": total, "tensors": len(model), "rows": results,
                   "zero_copy_large_requests": big,
                   "gates": gates, "device": torch.cuda.get_device_name(0)}, f, indent=1)
    if failed:
        print("# BYTES DIFFER: " + "; ".join(failed))
        sys.exit(1)
    if args.gate and not all(ok for _, ok in gates):
        sys.exit(1)


if __name__ == "__main__":
    main()
