"""How long a small kernel from one process waits while another process keeps the same GPU busy.

Without MPS the GPU runs one process's context at a time and switches between them by time
slice, so a trainer's copy kernel queued behind wsyncd's back-to-back broadcasts on GPU 0 may wait
for the slice to end. This probe measures that wait: a busy process queues back-to-back kernels of
about --busy-ms each; the probe process times a tiny kernel plus synchronize, alone and beside it.

    python3 tests/bench/gpu_share_probe.py [--device 0] [--busy-ms 0.5] [--seconds 3]
        [--beside "build/dev-bundle/bin/kernel_bench --sizes 128"]

--beside runs a command alone and then beside the busy process (kernel_bench shows which copy
paths keep their speed next to another process's kernels).
"""

import argparse
import multiprocessing as mp
import shlex
import statistics
import subprocess
import time


def busy(device, busy_ms, seconds, ready, done):
    import torch
    torch.cuda.set_device(device)
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 10 * 1e3
    reps = max(1, round(busy_ms / per))
    ready.set()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and not done.is_set():
        for _ in range(reps * 8):
            a @ a
        torch.cuda.synchronize()


def probe(device, count):
    import torch
    torch.cuda.set_device(device)
    x = torch.zeros(1024, device="cuda")
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--busy-ms", type=float, default=0.5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--beside", default="")
    args = ap.parse_args()
    alone = probe(args.device, 300)
    if args.beside:
        print("--- alone:", args.beside, flush=True)
        subprocess.run(shlex.split(args.beside), check=False)
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=busy, args=(args.device, args.busy_ms, args.seconds, ready, done))
    p.start()
    ready.wait()
    time.sleep(0.2)
    shared = probe(args.device, 300)
    if args.beside:
        print("--- beside a busy process:", args.beside, flush=True)
        subprocess.run(shlex.split(args.beside), check=False)
    done.set()
    p.join()
    for name, t in (("alone", alone[10:]), ("beside a busy process", shared[10:])):
        t = sorted(t)
        print(f"tiny kernel + sync, {name}: median {statistics.median(t):.3f} ms, "
              f"p90 {t[int(len(t) * 0.9)]:.3f} ms, max {t[-1]:.3f} ms")


if __name__ == "__main__":
    main()
