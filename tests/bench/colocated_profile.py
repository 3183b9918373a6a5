"""Where a colocated update's time goes, at the bucket sizes where every design sits near the
engine's own cost (2 and 4 GiB): the peers' design and push(state_dict) with nothing set,
interleaved run by run on one GPU, each run split into what the engine's handler spent on its
requests (decode and map, the copies' launches, the wait for them) and the rest (client, wsyncd,
HTTP). The same engine, model and designs as ipc_bench.py; prints one line per run and a median
table, and writes profile.json.

    python3 tests/bench/colocated_profile.py --wsyncd build/dev-bundle/bin/wsyncd \\
        --nccl-lib ... --python-client client/python --out $OUT/profile
"""

import json
import os
import statistics
import sys
import time
import urllib.request

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_update import note, plan  # noqa: E402
from ipc_bench import (Daemon, Engine, colocated_arguments,  # noqa: E402
                       fake_sglang_metadata_class, flat_and_separate_models, peers)

GIB = 2**30
TIMING_KEYS = ("verify_seconds", "idle_seconds", "wire_seconds", "answer_seconds",
               "request_late_seconds", "first_launch_seconds", "finish_seconds")


def engine_phases(url):
    """Rank 0's recent requests and the handler's, with how many each has recorded in all."""
    with urllib.request.urlopen(url + "/sim/ipc_phases") as r:
        got = json.loads(r.read())
    return got["ranks"][0], got["handler_ms"], got["counts"]


def split(url, before, run_s):
    """The engine's requests since `before` (the counts engine_phases returned), summed."""
    ranks, handler, counts = engine_phases(url)
    new_ranks = ranks[len(ranks) - (counts[0] - before[0]):]
    new_handler = handler[len(handler) - (counts[1] - before[1]):]
    t0, t1 = run_s
    out = {"total_ms": (t1 - t0) * 1e3, "requests": len(new_handler),
           "handler_ms": sum(b - a for a, b in new_handler) * 1e3}
    if new_handler:
        # Before the first request reached the engine, between an answer and the next request,
        # and after the last answer (the client's and wsyncd's share, on the engine's clock).
        out["lead_ms"] = (new_handler[0][0] - t0) * 1e3
        out["gaps_ms"] = sum(new_handler[k + 1][0] - new_handler[k][1]
                             for k in range(len(new_handler) - 1)) * 1e3
        out["tail_ms"] = (t1 - new_handler[-1][1]) * 1e3
    for k in ("map_ms", "launch_ms", "wait_ms"):
        out[k] = sum(p[k] for p in new_ranks)
    return out, counts


def main():
    args = colocated_arguments("2GiB,4GiB", 9).parse_args()
    os.makedirs(args.out, exist_ok=True)
    sys.path.insert(0, args.python_client)
    import wsync

    model, separate = flat_and_separate_models()
    sizes = [t.numel() * t.element_size() for _, t in model]
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    log = open(os.path.join(args.out, "processes.log"), "w")
    engine = Engine(args, log)
    metadata_cls = fake_sglang_metadata_class()
    rows = []
    try:
        for text in args.sizes.split(","):
            slot = int(text[:-3]) * {"MiB": 2**20, "GiB": 2**30}[text[-3:]]
            buckets = plan(sizes, slot)
            daemon = Daemon(args, slot, None, engine.url, uuid, log)
            runs = {"peers": [], "defaults": [], "defaults/separate": []}
            try:
                with wsync.Client("unix:" + daemon.sock, device=0, name="profile") as client:
                    seen = engine_phases(engine.url)[2]
                    for r in range(args.runs + 1):
                        t0 = time.monotonic()
                        peers(engine.url, model, buckets, metadata_cls, f"{text}-p-{r}")
                        got, seen = split(engine.url, seen, (t0, time.monotonic()))
                        if r:
                            runs["peers"].append(got)
                        for name, m in (("defaults", model), ("defaults/separate", separate)):
                            torch.cuda.synchronize()
                            t0 = time.monotonic()
                            res = client.push(m, version=f"{text}-{name}-{r}", group="colo")
                            got, seen = split(engine.url, seen, (t0, time.monotonic()))
                            timing = res.get("daemon_timing", {})
                            got.update({k: timing.get(k, 0) * 1e3 for k in TIMING_KEYS})
                            got["pulled"] = res["buckets_pulled"]
                            got["in_place"] = res["buckets_read_in_place"]
                            if r:
                                runs[name].append(got)
                        note(f"{text} run {r}: " + ", ".join(
                            f"{k} {runs[k][-1]['total_ms']:.1f} ms" for k in runs if r))
            finally:
                daemon.stop()
            rows.append({"size": text, "buckets": len(buckets), "runs": runs})
    finally:
        engine.stop()

    keys = ("total_ms", "handler_ms", "map_ms", "launch_ms", "wait_ms", "lead_ms", "gaps_ms",
            "tail_ms")
    print(f"# colocated profile on {torch.cuda.get_device_name(0)}: designs interleaved run by "
          f"run, median of {args.runs} after a warm-up; engine = its handler's time for the "
          "update's requests (map = decode and map, launch = the copies' launches, wait = for "
          "the copies; lead, gaps, tail = before the first request, between answers and requests, "
          "after the last answer)")
    print("#  size  design            " + "".join(f"{k[:-3]:>9}" for k in keys) + "  vs-peers")
    for row in rows:
        for name, rs in row["runs"].items():
            med = {k: statistics.median(x[k] for x in rs) for k in keys}
            paired = statistics.median(p["total_ms"] / d["total_ms"]
                                       for p, d in zip(row["runs"]["peers"], rs))
            print(f"  {row['size']:>6}  {name:<18}" + "".join(f"{med[k]:9.1f}" for k in keys)
                  + f"  {paired:8.2f}")
        for name in ("defaults", "defaults/separate"):
            rs = row["runs"][name]
            print(f"#   {row['size']} {name} wsyncd timing (median ms): " + ", ".join(
                f"{k[:-8]} {statistics.median(x[k] for x in rs):.1f}" for k in TIMING_KEYS))
    with open(os.path.join(args.out, "profile.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
