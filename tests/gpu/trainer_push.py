"""Trainer side of the GPU test: a Qwen2-architecture model built by transformers from a config
(random init, fixed seed, no download) on GPU 0, pushed through wsyncd with the Python client as
CUDA tensors, version after version; every engine rank must hold bit-identical tensors.
--model qwen2.5-7b-shapes pushes Qwen2.5-7B's 339 bf16 tensors instead (random data, 14.19 GiB,
the names and shapes of tests/bench/bench_update.py), with no transformers model behind them.

The engines are the torch simulators under tests/gpu (SGLang, LMDeploy, vLLM semantics): each
answers GET /sim/checksums with a CRC-32 per tensor per rank and its weight version (null for an
engine that has none: LMDeploy, or vLLM when no version was given; then only the bytes are
compared). --flattened-record checks LMDeploy's flattened_tensor count (GET /sim/flattened) after
every version; --expect-form checks which request form a vLLM engine received (GET /sim/stats)."""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
import zlib

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def crc(t):
    # zlib reads the array's buffer in place: no extra host copy (14 GiB for the 7B shapes).
    return format(zlib.crc32(t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy()),
                  "08x")


def get_json(url):
    with urllib.request.urlopen(url, timeout=600) as r:
        return json.loads(r.read())


class ShapesModel:
    """Named bf16 tensors with Qwen2.5-7B's names and shapes on GPU 0, random data; stands in
    for a transformers model where only parameters() and state_dict() are used."""

    def __init__(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
        from bench_update import qwen25_7b_shapes
        self.tensors = {name: torch.randn(shape, dtype=torch.bfloat16, device="cuda:0")
                        for name, shape in qwen25_7b_shapes()}

    def parameters(self):
        return iter(self.tensors.values())

    def state_dict(self):
        return dict(self.tensors)


def check_flattened(url, version, record):
    """LMDeploy: in the cycle the version just finished, flattened_tensor must have come once per
    GPU and dtype: wsyncd's slots of a GPU are regions of one allocation, which the tensor views
    whole, so only a second buffer (the oversize slot, a trainer allocation read in place) may
    need it again, exactly as often as the engine's floor says (first call, and each change of
    buffer or dtype). Appends what it saw to `record` (JSON lines)."""
    cycles = [c for c in get_json(url + "/sim/flattened")["cycles"] if c["finished"]]
    if not cycles:
        print(f"  {url}: no finished cycle: the version never sent finished=true", flush=True)
        return False
    cycle = cycles[-1]
    ok = bool(cycle["counts"])
    for key, c in sorted(cycle["counts"].items()):
        gpu, dtype = key.rsplit("/", 1)
        buffers = len(set(c.get("buffers", [])))
        expected = 1 if buffers <= 1 else c["floor"]
        good = c["arrivals"] == expected and c["floor"] == expected
        ok = ok and good
        verdict = "OK" if good else "MORE THAN NEEDED" if c["arrivals"] > expected else "WRONG"
        print(f"  {url} flattened_tensor, version {version}, GPU {gpu}, {dtype}: "
              f"{c['arrivals']} arrival(s) in {c['calls']} call(s) over {buffers} buffer(s); "
              f"expected {expected} (the engine's floor {c['floor']}): {verdict}", flush=True)
        if record:
            with open(record, "a") as f:
                f.write(json.dumps({"engine": url, "version": version, "gpu": gpu,
                                    "dtype": dtype, "arrivals": c["arrivals"],
                                    "floor": c["floor"], "calls": c["calls"],
                                    "buffers": len(c.get("buffers", [])),
                                    "requests": cycle["requests"], "cycle": cycle["cycle"]})
                        + "\n")
    if not cycle["counts"]:
        print(f"  {url}: the version's cycle had no flattened request", flush=True)
    return ok


FORMS = ("packed", "unpacked", "args", "func_args")


def engine_forms(urls):
    out = {}
    for url in urls:
        try:
            stats = get_json(url + "/sim/stats")["stats"]
        except (OSError, ValueError, KeyError):
            continue
        out[url] = {k: stats.get(k, 0) for k in FORMS}
    return out


def gpu_memory_mib(pid):
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    return sum(int(line.split(",")[1]) for line in out.splitlines()
               if line.strip() and int(line.split(",")[0]) == pid)


def as_dtensors(state):
    import os
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29577")
        dist.init_process_group("nccl", rank=0, world_size=1)
    mesh = init_device_mesh("cuda", (1,))
    out = {k: distribute_tensor(v, mesh, [Shard(0)] if v.dim() > 0 else [Replicate()])
           for k, v in state.items()}
    kinds = {type(v).__name__ for v in out.values()}
    print(f"  pushing {len(out)} tensors as {kinds}", flush=True)
    return out


def flatten_parameters(model):
    """Re-homes every parameter into one flat buffer, in order, as Megatron's contiguous parameter
    buffer does; the parameters become views into it."""
    params = list(model.parameters())
    flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype, device="cuda:0")
    at = 0
    for p in params:
        view = flat[at:at + p.numel()].view(p.shape)
        view.copy_(p.data)
        p.data = view
        at += p.numel()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--group", default="policy")
    ap.add_argument("--engines", required=True, help="comma-separated engine URLs")
    ap.add_argument("--versions", type=int, default=3)
    ap.add_argument("--python-client", required=True)
    ap.add_argument("--version-prefix", default="gpu-v")
    ap.add_argument("--expect-failure", default="",
                    help="the push must fail with an error containing this text")
    ap.add_argument("--watch-pid", type=int, default=0,
                    help="after every version, read this process's GPU memory (wsyncd): it must "
                         "not change after the first update")
    ap.add_argument("--verify-every", type=int, default=1, help="check the engines every Nth")
    ap.add_argument("--dtensor", action="store_true",
                    help="push the state as DTensors sharded on a 1-GPU mesh (the client calls "
                         "full_tensor() on each)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--pull", action="store_true",
                      help="pull mode: wsyncd copies the tensors out of this process's memory; "
                           "every bucket must be pulled, except with --dtensor, where the "
                           "gathered copies are temporaries the client must copy itself")
    mode.add_argument("--push", action="store_true",
                      help="push mode: this process copies the tensors into wsyncd's slots "
                           "(neither flag: the group's mode, as push() picks by default)")
    ap.add_argument("--flat", action="store_true",
                    help="parameters live in one flat buffer (Megatron-style); with --pull every "
                         "bucket must then be read in place, with no copy")
    ap.add_argument("--model", choices=("qwen2", "qwen2.5-7b-shapes"), default="qwen2",
                    help="qwen2: a small transformers Qwen2 (4 layers); qwen2.5-7b-shapes: "
                         "Qwen2.5-7B's 339 bf16 tensors, 14.19 GiB, random")
    ap.add_argument("--flattened-record", default="",
                    help="LMDeploy engines: after each version, flattened_tensor must have come "
                         "as rarely as the slot layout allows; the counts are appended to this "
                         "file (JSON lines)")
    ap.add_argument("--expect-form", default="",
                    help="vLLM engines: comma-separated request forms (packed, unpacked, args, "
                         "func_args) this run must have sent; the other of each pair must not "
                         "have come")
    ap.add_argument("--release-sources", action="store_true",
                    help="after each version, have wsyncd close its mappings of this process "
                         "(pull mode: there must be some); the next version maps them again")
    ap.add_argument("--expect-pulled", nargs="?", const="all", choices=("all", "one-allocation"),
                    help="left to the group: 'all' (the default), every bucket must have been "
                         "pulled by wsyncd (the group's transport prefers pull mode); "
                         "'one-allocation', a colocated group: wsyncd pulls only the buckets "
                         "that lie in one allocation, reads each of those in place, and the "
                         "client copies the others (this layout must have both kinds)")
    ap.add_argument("--temporaries", action="store_true",
                    help="push fresh copies of the parameters each version, dropped after the "
                         "push: where wsyncd pulled them, the client must have let wsyncd's "
                         "mappings and its hold on them go at the push's end (without this flag, "
                         "pulled parameters must stay held for the next push)")
    ap.add_argument("--device", type=int, default=0,
                    help="the GPU this trainer rank's model lives on and whose slots it fills")
    ap.add_argument("--tp-rank", type=int, default=None,
                    help="a colocated group whose engine's TP ranks span GPUs: this rank's place "
                         "among them (one trainer process per GPU pushes the same version)")
    args = ap.parse_args()
    sys.path.insert(0, args.python_client)
    import wsync

    torch.manual_seed(0)
    if args.model == "qwen2":
        config = Qwen2Config(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                             num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                             tie_word_embeddings=False)
        model = Qwen2ForCausalLM(config).to(f"cuda:{args.device}", torch.bfloat16)
    else:
        model = ShapesModel()
        total = sum(t.numel() * t.element_size() for t in model.parameters())
        print(f"model: {len(model.tensors)} bf16 tensors with Qwen2.5-7B's shapes, "
              f"{total / 2**30:.2f} GiB", flush=True)
    if args.flat:
        flatten_parameters(model)  # the parameters' views keep the buffer alive
    urls = args.engines.split(",")
    forms_before = engine_forms(urls) if args.expect_form else {}
    ok = True
    memory = []
    with wsync.Client("unix:" + args.socket, device=args.device,
                      name=f"gpu trainer (device {args.device})") as client:
        for v in range(1, args.versions + 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.01)
            state = model.state_dict()
            if args.temporaries:
                state = {k: t.clone() for k, t in state.items()}
            expected = {k: crc(t) for k, t in state.items()}
            if args.dtensor:
                state = as_dtensors(state)
            t0 = time.time()
            version = f"{args.version_prefix}{v}"
            if args.expect_failure:
                try:
                    client.push(state, version=version, group=args.group)
                except wsync.WsyncError as e:
                    hit = args.expect_failure in e.message
                    print(f"push failed as expected after {time.time() - t0:.2f} s: "
                          f"{e.code_name}: {e.message}", flush=True)
                    print("TRAINER RESULT:", "PASS" if hit else "FAIL (wrong error)", flush=True)
                    sys.exit(0 if hit else 1)
                print("TRAINER RESULT: FAIL (push succeeded)", flush=True)
                sys.exit(1)
            pull = True if args.pull else False if args.push else None
            result = client.push(state, version=version, group=args.group, pull=pull,
                                 tp_rank=args.tp_rank)
            total = sum(t.numel() * t.element_size() for t in state.values())
            print(f"version {version}: {result['buckets']} buckets "
                  f"({result['buckets_pulled']} pulled by wsyncd, "
                  f"{result['buckets_read_in_place']} read in place), {total / 2**30:.3f} GiB in "
                  f"{time.time() - t0:.3f} s, engines: "
                  f"{[(e['engine'], e['ok']) for e in result['engines']]}", flush=True)
            if args.temporaries:
                del state  # the push's tensors are the trainer's to drop now
            if result["buckets_pulled"] and bool(client._held_sources) == args.temporaries:
                print(f"  pulled storages held after the push: {len(client._held_sources)} "
                      f"(temporaries: {args.temporaries})", flush=True)
                ok = False
            want_pulled = 0 if args.dtensor else result["buckets"]
            if args.expect_pulled == "one-allocation":
                pulled, in_place = result["buckets_pulled"], result["buckets_read_in_place"]
                if not 0 < pulled < result["buckets"] or pulled != in_place:
                    print(f"  one-allocation pulls: {pulled} of {result['buckets']} buckets "
                          f"pulled, {in_place} read in place; expected some but not all "
                          "pulled, each read in place", flush=True)
                    ok = False
            elif (args.pull or args.expect_pulled) and result["buckets_pulled"] != want_pulled:
                print(f"  pull mode: {result['buckets_pulled']} buckets pulled, expected "
                      f"{want_pulled}", flush=True)
                ok = False
            if args.pull and args.flat and result["buckets_read_in_place"] != result["buckets"]:
                print(f"  flat buffer: only {result['buckets_read_in_place']} of "
                      f"{result['buckets']} buckets read in place", flush=True)
                ok = False
            if args.release_sources:
                closed = client.release_sources()
                print(f"  release_sources: wsyncd closed {closed} mapping(s)", flush=True)
                if args.pull and not args.dtensor and closed == 0:
                    ok = False
            if args.watch_pid:
                used = gpu_memory_mib(args.watch_pid)
                memory.append(used)
                print(f"  wsyncd GPU memory after {version}: {used} MiB", flush=True)
            if v % args.verify_every != 0 and v != args.versions:
                continue
            for url in urls:
                got = get_json(url + "/sim/checksums")
                if not got["ranks"]:
                    print(f"  {url}: no rank answered with checksums", flush=True)
                    ok = False
                for rank, tensors in got["ranks"].items():
                    bad = [k for k in expected if tensors.get(k) != expected[k]]
                    # An engine with no weight version (LMDeploy) reports null: bytes only.
                    wv = got["weight_version"]
                    print(f"  {url} rank {rank}: {len(expected) - len(bad)}/{len(expected)} "
                          f"tensors bit-identical, weight_version {wv}"
                          + (f", digest {got['digests'][rank]}" if rank in got.get("digests", {})
                             else ""), flush=True)
                    if bad:
                        print(f"    differing: {bad[:5]}{' ...' if len(bad) > 5 else ''}",
                              flush=True)
                    ok = ok and not bad and (wv is None or wv == version)
                if args.flattened_record:
                    ok = check_flattened(url, version, args.flattened_record) and ok
    if args.expect_form:
        after = engine_forms(urls)
        want = [f for f in args.expect_form.split(",") if f]
        pairs = {"packed": "unpacked", "unpacked": "packed", "args": "func_args",
                 "func_args": "args"}
        for url in urls:
            if url not in after:
                print(f"  {url}: no /sim/stats, so the request forms are unknown", flush=True)
                ok = False
                continue
            diff = {k: after[url][k] - forms_before.get(url, {}).get(k, 0) for k in FORMS}
            print(f"  {url} requests this run by form: " +
                  ", ".join(f"{k} {diff[k]}" for k in FORMS), flush=True)
            for form in want:
                if form not in pairs:
                    print(f"  unknown form {form!r}", flush=True)
                    ok = False
                elif diff[form] == 0 or diff[pairs[form]] != 0:
                    print(f"  expected {form} requests only", flush=True)
                    ok = False
    if args.watch_pid:
        flat = len(set(memory[1:])) <= 1
        print(f"wsyncd GPU memory over {len(memory)} updates: first {memory[0]} MiB, then "
              f"{sorted(set(memory[1:]))} MiB: {'flat' if flat else 'NOT FLAT'}", flush=True)
        # 0 MiB would mean nvidia-smi cannot see the process: that proves nothing.
        ok = ok and flat and memory[0] > 0
    print("TRAINER RESULT:", "PASS" if ok else "FAIL", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
