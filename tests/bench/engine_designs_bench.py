"""vLLM and LMDeploy end to end over NCCL: wsync beside each engine's own trainer-side design, in
the same run on the same GPUs (reported, not gated). The model is bench_update.py's: Qwen2.5-7B's
names and shapes in bf16 on GPU 0 (14.19 GiB); each engine is a torch simulator of its receive
side with one rank on GPU 1 (tests/engines/vllm/vllm_engine.py --backend nccl,
tests/engines/lmdeploy/lmdeploy_engine.py, both on GPU memory), started here, one at a time.

  wsync          the trainer pushes through wsyncd (Python client, defaults: nothing set but the
                 slot size), which drives the engine's routes and broadcasts as rank 0.
  vLLM design    the trainer process is rank 0, as vLLM's NCCLWeightTransferEngine.trainer_init
                 and trainer_send_weights do: PyNccl (ctypes NCCL) joined through
                 nccl_unique_id_b64 with the one-element all-reduce warm-up; per update
                 /start_weight_update, one /update_weights naming every tensor while the trainer
                 broadcasts each tensor in order (unpacked, vLLM's default), /finish_weight_update.
  LMDeploy design  the trainer process is rank 0 of a group made with SGLang's
                 init_custom_process_group, as LMDeploy's NCCL example does: per bucket of the
                 slot's size, torch.cat into a flat uint8 tensor, /update_weights_from_distributed
                 (flattened_bucket, finished on the last) and the broadcast.

    python3 tests/bench/engine_designs_bench.py --wsyncd build/dev-bundle/bin/wsyncd \
        --nccl-lib ... --python-client client/python --out $OUT/designs
"""

import argparse
import base64
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
sys.path.insert(0, os.path.join(HERE, "..", "sim"))
from bench_update import (GIB, Async, add_common_args, free_port, note,  # noqa: E402
                          own_state_environment, plan, post, qwen25_7b_model)


def wait_url(url, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} never answered")


class Engine:
    """One engine simulator on GPU 1, stopped when the block ends."""

    def __init__(self, kind, log, *extra):
        """kind: vllm (its NCCL backend) or lmdeploy, the kind's simulator on GPU memory."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [os.path.join(HERE, "..", "engines", kind, f"{kind}_engine.py"), "--memory",
                "cuda"] + (["--backend", "nccl"] if kind == "vllm" else [])
        self.proc = subprocess.Popen(
            [sys.executable, *argv, "--port", str(self.port), "--gpus", "1", *extra],
            stdout=log, stderr=log)
        wait_url(self.url + "/health")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wsync_seconds(args, wsync, kind, engine, model, slot, log):
    """Median end-to-end seconds of args.runs pushes through a wsyncd of this slot size."""
    sock = f"/tmp/wsync-designs-{os.getpid()}.sock"
    daemon = subprocess.Popen(
        [args.wsyncd, "--mode", "cuda", "--nccl-lib", args.nccl_lib, "--socket", sock,
         "--slot-bytes", str(slot), "--bind-address", "127.0.0.1", "--advertise-address",
         "127.0.0.1"], stdout=log, stderr=log, env=own_state_environment())
    try:
        for _ in range(300):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        ctl = os.path.join(os.path.dirname(args.wsyncd), "wsyncctl")
        subprocess.run([ctl, "--socket", sock, "create-group", "bench", "--kind", kind,
                        "--transport", "broadcast", "--engine", engine.url], check=True,
                       stdout=log, stderr=log)
        with wsync.Client("unix:" + sock, device=0, name="designs bench") as client:
            times = []
            for r in range(args.runs + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                client.push(model, version=f"{kind}-{slot}-{r}", group="bench")
                times.append(time.perf_counter() - t0)
        note(f"{kind} wsync {slot >> 20} MiB slots: {[round(t, 3) for t in times]} s")
        return statistics.median(times[1:])
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def vllm_design_seconds(args, engine, model):
    """Median seconds of vLLM's trainer-side design (see the module's docstring)."""
    from memory import NCCL_TYPES, NcclUniqueId, load_nccl
    nccl = load_nccl()

    def check(result, what):
        if result != 0:
            raise RuntimeError(f"{what}: NCCL error {result}")

    uid = NcclUniqueId()
    check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    info = {"nccl_unique_id_b64": base64.b64encode(bytes(uid.internal)).decode(),
            "rank_offset": 1, "world_size": 2}
    init = Async(post, engine.url + "/init_weight_transfer_engine", {"init_info": info})
    comm = ctypes.c_void_p()
    check(nccl.ncclCommInitRank(ctypes.byref(comm), ctypes.c_int(2), uid, ctypes.c_int(0)),
          "ncclCommInitRank")
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    zero = torch.zeros(1, dtype=torch.float32, device="cuda:0")
    check(nccl.ncclAllReduce(ctypes.c_void_p(zero.data_ptr()), ctypes.c_void_p(zero.data_ptr()),
                             ctypes.c_size_t(1), ctypes.c_int(NCCL_TYPES["float32"]),
                             ctypes.c_int(0), comm, stream), "ncclAllReduce")
    torch.cuda.synchronize()
    init.join()
    update_info = {"names": [n for n, _ in model], "dtype_names": ["bfloat16"] * len(model),
                   "shapes": [list(t.shape) for _, t in model]}
    times = []
    try:
        for r in range(args.runs + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            post(engine.url + "/start_weight_update", {})
            answer = Async(post, engine.url + "/update_weights", {"update_info": update_info})
            for _, t in model:
                check(nccl.ncclBroadcast(ctypes.c_void_p(t.data_ptr()),
                                         ctypes.c_void_p(t.data_ptr()), ctypes.c_size_t(t.numel()),
                                         ctypes.c_int(NCCL_TYPES["bfloat16"]), ctypes.c_int(0),
                                         comm, stream), "ncclBroadcast")
            torch.cuda.synchronize()
            answer.join()
            post(engine.url + "/finish_weight_update", {"weight_version": f"design-{r}"})
            times.append(time.perf_counter() - t0)
    finally:
        # vLLM has no route that drops the group: the trainer aborts its side alone.
        nccl.ncclCommAbort(comm)
    note(f"vllm design: {[round(t, 3) for t in times]} s")
    return statistics.median(times[1:])


def lmdeploy_design_seconds(args, engine, model, slot):
    """Median seconds of LMDeploy's trainer-side design with buckets of `slot` bytes."""
    from memory import cuda_init_custom_process_group as init_custom_process_group
    port = free_port()
    init = Async(post, engine.url + "/init_weights_update_group",
                 {"master_address": "127.0.0.1", "master_port": port, "rank_offset": 1,
                  "world_size": 2, "group_name": "design", "backend": "nccl"})
    pg = init_custom_process_group("nccl", f"tcp://127.0.0.1:{port}", 2, 0, "design")
    init.join()
    buckets = plan([t.numel() * 2 for _, t in model], slot)
    times = []
    try:
        for _ in range(args.runs + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for k, b in enumerate(buckets):
                flat = torch.cat([model[i][1].view(-1).view(torch.uint8) for i in b])
                body = {"names": [model[i][0] for i in b], "dtypes": ["bfloat16"] * len(b),
                        "shapes": [list(model[i][1].shape) for i in b], "group_name": "design",
                        "load_format": "flattened_bucket", "finished": k == len(buckets) - 1}
                answer = Async(post, engine.url + "/update_weights_from_distributed", body)
                dist.broadcast(flat, src=0, group=pg)
                if not answer.join().get("success"):
                    raise RuntimeError("LMDeploy design: an update failed")
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    finally:
        # torch tears a group down with its peers: both sides at once.
        destroy = Async(post, engine.url + "/destroy_weights_update_group",
                        {"group_name": "design"})
        dist.destroy_process_group(pg)
        destroy.join()
    note(f"lmdeploy design {slot >> 20} MiB buckets: {[round(t, 3) for t in times]} s")
    return statistics.median(times[1:])


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--slots", default="512MiB,1GiB")
    args = ap.parse_args()
    sys.path.insert(0, args.python_client)
    import wsync

    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "designs.log"), "w")
    model = qwen25_7b_model()
    total = sum(t.numel() * 2 for _, t in model)
    units = {"MiB": 2**20, "GiB": 2**30}
    slots = [int(s[:-3]) * units[s[-3:]] for s in args.slots.split(",")]
    print(f"# vLLM and LMDeploy end to end: wsync beside each engine's own trainer-side design, "
          f"Qwen2.5-7B shapes ({total / GIB:.2f} GiB), rank 0 on GPU 0, one engine rank on GPU 1; "
          f"median of {args.runs} after a warm-up; reported, not gated", flush=True)
    print("#  engine    slot  wsync-e2e  design  wsync/design\n"
          "#                      GiB/s   GiB/s", flush=True)
    rows, failures = [], []
    for kind in ("vllm", "lmdeploy"):
        extra = ("--version", "0.30.0") if kind == "vllm" else ("--no-digest-log",)
        design_s = None
        for slot in slots:
            if kind == "lmdeploy":
                design_s = None
            row = {"engine": kind, "slot_bytes": slot}
            try:
                with Engine(kind, log, *extra) as engine:
                    row["wsync_s"] = wsync_seconds(args, wsync, kind, engine, model, slot, log)
                # The design on an engine of its own (the wsync group's is gone with wsyncd).
                # vLLM's sends per tensor, with no bucket size: measured once.
                if kind == "lmdeploy" or design_s is None:
                    with Engine(kind, log, *extra) as engine:
                        if kind == "lmdeploy":
                            design_s = lmdeploy_design_seconds(args, engine, model, slot)
                        else:
                            design_s = vllm_design_seconds(args, engine, model)
                row["design_s"] = design_s
            except Exception as e:  # the other rows still run
                note(f"{kind} {slot >> 20} MiB: FAILED: {e}")
                failures.append(f"{kind} {slot >> 20} MiB: {e}")
                continue
            rows.append(row)
            w, d = total / row["wsync_s"] / GIB, total / row["design_s"] / GIB
            print(f"{kind:>9} {slot >> 20:5d}MiB {w:10.1f} {d:7.1f} {w / d:13.2f}", flush=True)
        with open(os.path.join(args.out, "designs.json"), "w") as f:
            json.dump({"bytes": total, "rows": rows}, f, indent=1)
    if failures:
        print("# FAILED: " + "; ".join(failures), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
