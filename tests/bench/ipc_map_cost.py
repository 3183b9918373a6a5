"""What a colocated engine pays per request to open a CUDA-IPC allocation, by the allocation's size.

An engine that follows SGLang's or vLLM's per-request receive (torch's rebuild_cuda_tensor) maps
the whole allocation a handle names (cudaIpcOpenMemHandle), reads its bucket, and unmaps it when
the request's tensors die. So what a request costs grows with the size of the allocation behind
its handle, not of its bucket. For each allocation size this prints the median of the map, the
copy of a fixed 64 MiB bucket out of it, and the release, measured in a second process on GPU 0.

    python3 tests/bench/ipc_map_cost.py [--sizes 256MiB,1GiB,4GiB,16GiB] [--repeats 9]
"""

import argparse
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

UNITS = {"MiB": 2**20, "GiB": 2**30}
BUCKET = 64 * 2**20


def importer(jobs, answers, repeats):
    torch.cuda.set_device(0)
    dst = torch.empty(BUCKET, dtype=torch.uint8, device="cuda:0")
    while True:
        job = jobs.get()
        if job is None:
            return
        fn, args = job
        maps, copies, releases = [], [], []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            view = fn(*args)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            dst.copy_(view[:BUCKET])
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            del view  # the last reference: torch unmaps here
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            maps.append(t1 - t0)
            copies.append(t2 - t1)
            releases.append(t3 - t2)
        answers.put([statistics.median(x) * 1e3 for x in (maps, copies, releases)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64MiB,256MiB,1GiB,2GiB,4GiB,8GiB,16GiB")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    from torch.multiprocessing.reductions import reduce_tensor
    ctx = mp.get_context("spawn")
    jobs, answers = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=importer, args=(jobs, answers, args.repeats))
    proc.start()
    torch.cuda.set_device(0)
    print(f"# CUDA-IPC map, 64 MiB copy, release per request on {torch.cuda.get_device_name(0)}, "
          f"torch {torch.__version__}; median of {args.repeats}")
    print("#  allocation   map(ms)  copy(ms)  release(ms)  per request(ms)")
    for text in args.sizes.split(","):
        size = int(text[:-3]) * UNITS[text[-3:]]
        buf = torch.empty(size, dtype=torch.uint8, device="cuda:0")
        buf[:BUCKET].fill_(7)
        torch.cuda.synchronize()
        # The bucket is the allocation's first 64 MiB, as a slot is a region of wsyncd's arena.
        jobs.put(reduce_tensor(buf[:BUCKET]))
        m, c, r = answers.get(timeout=300)
        print(f"  {text:>10}  {m:8.3f}  {c:8.3f}  {r:11.3f}  {m + c + r:15.3f}", flush=True)
        del buf
        torch.cuda.empty_cache()
    jobs.put(None)
    proc.join(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
