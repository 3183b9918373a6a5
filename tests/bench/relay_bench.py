"""Node relay benchmark, nccl-tests style: Qwen2.5-7B's tensors (bf16, random, 14.19 GiB) on GPU 0,
pushed by the trainer (Python client) into the upstream wsyncd on GPU 0, relayed over NCCL to a
downstream wsyncd whose slots are on GPU 1, which delivers every bucket over CUDA IPC to an
SGLang-semantics torch engine on GPU 1 (engine "relay"). In the same run, on the same GPUs and the
same NCCL settings (the link: whatever NCCL_* the caller set, e.g. NVLink, or sockets to stand for
a node boundary):

  ceiling   the trainer process broadcasts the relay's buckets back to back to a second engine on
            GPU 1 (engine "direct") whose receives are all posted: the link's limit for those
            bytes and sizes, NCCL between two processes on GPUs 0 and 1.
  direct    the same push into a broadcast group on the upstream whose engine is "direct" (the
            trainer node's wsyncd as rank 0 of the engine's own weight-update group: the path the
            relay replaces).
  relay     the push into the relay group: trainer to every downstream engine committed.
  wire      the relay's data plane: the model's bytes over the upstream's broadcast time (its
            daemon timing's wire seconds, the pairs' NCCL broadcasts), measured while the
            downstream's engine loads.

Runs alternate direct and relay, one of each per run after a warm-up; each row is the median, and
the relay/direct ratio is the median of each run's pair. Every tensor changes each run (its first
element), and after the last run both engines must hold the trainer's bytes, bit-identical, at
the pushed versions. Then, at the default slot size, the downstream restarts with `--resident
gpu`, takes two more versions (a row of their own), and its engine is restarted with no trainer:
it must hold the kept version, bit-identical, within 2 s + 4 x (model bytes / GPU 1's
device-to-device copy rate, measured here) of answering its health check.

Gates (a missed gate fails the run, exit 1), per slot size and the caller's --link:
  relay wire >= 0.90 x ceiling; relay end to end >= 0.85 x ceiling at slots >= 512 MiB;
  relay end to end >= 1.0 x direct at slots >= 256 MiB; the restart bound.

    python3 tests/bench/relay_bench.py --wsyncd build/dev-bundle/bin/wsyncd --nccl-lib ... \
        --python-client client/python --out $OUT/relay --link nvlink
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_update import (GIB, add_common_args, ceiling, direct_group, free_port,  # noqa: E402
                          note, own_state_environment, plan, qwen25_7b_model)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
UNITS = {"MiB": 2**20, "GiB": 2**30}


def get_json(url, timeout=600):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_until(what, check, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} within {seconds} s")


class Processes:
    """Every process this benchmark starts, stopped by pid when it ends however it ends."""

    def __init__(self, out):
        self.out = out
        self.procs = {}

    def start(self, name, argv, env=None):
        log = open(os.path.join(self.out, name + ".log"), "a")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=env or dict(os.environ))
        return self.procs[name]

    def stop(self, name):
        p = self.procs.pop(name, None)
        if p is None:
            return None
        died = p.poll()
        if died is None:
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return died

    def stop_all(self):
        for name in list(self.procs):
            self.stop(name)


class Relay:
    """The two daemons of one configuration: the upstream (the trainer's node; groups 'broadcast',
    the direct path, and 'policy', the relay) and the downstream ('policy' over CUDA IPC to the
    relay engine on GPU 1)."""

    def __init__(self, args, procs, slot_bytes, gpu1_uuid, resident=()):
        self.args, self.procs = args, procs
        out = args.out
        self.up_sock = os.path.join(out, "up.sock")
        self.down_sock = os.path.join(out, "down.sock")
        self.ctl = os.path.join(os.path.dirname(args.wsyncd), "wsyncctl")
        port = free_port()
        up = {"groups": [
            {"name": "broadcast", "kind": "sglang", "transport": "broadcast",
             "engines": [{"url": args.direct_url}]},
            {"name": "policy", "kind": "wsyncd", "transport": "relay",
             "engines": [{"url": "wsyncd://node-b"}]}]}
        down = {"groups": [
            {"name": "policy", "kind": "sglang", "transport": "ipc",
             "engines": [{"url": args.relay_url, "gpus": [f"GPU-{gpu1_uuid}"]}]}]}
        for name, config in (("up.json", up), ("down.json", down)):
            with open(os.path.join(out, name), "w") as f:
                json.dump(config, f)
        common = ["--mode", "cuda", "--nccl-lib", args.nccl_lib, "--slot-bytes", str(slot_bytes),
                  "--bucket-timeout", "120", "--bind-address", "127.0.0.1",
                  "--advertise-address", "127.0.0.1"]
        for sock in (self.up_sock, self.down_sock):
            if os.path.exists(sock):
                os.unlink(sock)
        p = lambda name: os.path.join(out, name)  # noqa: E731
        self.procs.start("upstream", [
            args.wsyncd, *common, "--socket", self.up_sock, "--config", p("up.json"),
            "--listen", f"127.0.0.1:{port}", "--tls-cert", p("cert.pem"), "--tls-key",
            p("key.pem"), "--token-file", p("trainer.token"), "--relay-token-file",
            p("relay.token") + "=policy@node-b"], env=own_state_environment())
        wait_until("the upstream's socket", lambda: os.path.exists(self.up_sock), 30)
        feed = ",".join([f"upstream=127.0.0.1:{port}", "group=policy", "node=node-b",
                         f"token_file={p('relay.token')}", f"ca_file={p('cert.pem')}",
                         "server_name=localhost"])
        self.procs.start("downstream", [
            args.wsyncd, *common, "--socket", self.down_sock, "--config", p("down.json"),
            "--relay-feed", feed, *resident], env=own_state_environment())
        wait_until("the downstream's socket", lambda: os.path.exists(self.down_sock), 30)
        wait_until("node-b subscribed", self.subscribed, 60)

    def wsyncctl(self, sock, *argv):
        return subprocess.run([self.ctl, "--socket", sock, *argv], capture_output=True,
                              text=True, timeout=60)

    def subscribed(self):
        listed = self.wsyncctl(self.up_sock, "--json", "relay")
        return listed.returncode == 0 and any(
            s.get("node") == "node-b" for s in json.loads(listed.stdout).get("subscribers", []))

    def stop(self):
        for name in ("downstream", "upstream"):
            died = self.procs.stop(name)
            if died is not None:
                raise RuntimeError(f"the {name} wsyncd had exited ({died}) before it was stopped")


def crc(t):
    return format(zlib.crc32(t.contiguous().view(-1).view(torch.uint8).cpu().numpy()), "08x")


def holds(url, expected, version):
    """Whether the engine at `url` holds `expected` (name -> CRC-32) at `version`; says what
    differs."""
    got = get_json(url + "/sim/checksums")
    ok = bool(got["ranks"])
    for rank, tensors in got["ranks"].items():
        bad = [k for k in expected if tensors.get(k) != expected[k]]
        note(f"{url} rank {rank}: {len(expected) - len(bad)}/{len(expected)} tensors "
             f"bit-identical, weight_version {got['weight_version']} (pushed {version})")
        ok = ok and not bad and got["weight_version"] == version
    return ok


def start_engine(procs, name, port):
    procs.start(name, [sys.executable, os.path.join(ROOT, "tests/engines/sglang/sglang_engine.py"),
                       "--memory", "cuda", "--port", str(port), "--gpus", "1"])
    wait_until(f"engine {name} answered /health",
               lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                              timeout=2).status == 200, 120)


def d2d_rate(device):
    """GPU `device`'s device-to-device copy rate (GiB/s of bytes copied), median of 5 copies of
    1 GiB."""
    a = torch.empty(GIB, dtype=torch.uint8, device=f"cuda:{device}")
    b = torch.empty_like(a)
    times = []
    for _ in range(6):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return 1 / statistics.median(times[1:])


def perturb(model):
    with torch.no_grad():
        for _, t in model:
            t.view(-1)[:1].add_(1)


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--link", required=True, help="the link's name in the table (nvlink, sockets)")
    ap.add_argument("--slots", default="256MiB,512MiB,1GiB")
    ap.add_argument("--default-slot", default="512MiB", help="wsyncd's default --slot-bytes")
    ap.add_argument("--relay-port", type=int, default=30081)
    ap.add_argument("--direct-port", type=int, default=30082)
    args = ap.parse_args()
    sys.path.insert(0, args.python_client)
    import wsync

    os.makedirs(args.out, exist_ok=True)
    args.relay_url = f"http://127.0.0.1:{args.relay_port}"
    args.direct_url = f"http://127.0.0.1:{args.direct_port}"
    args.engines = [args.direct_url]  # bench_update's ceiling and direct_group read this
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", os.path.join(args.out, "key.pem"),
                    "-out", os.path.join(args.out, "cert.pem")], check=True, capture_output=True)
    for name, secret in (("trainer", "trainer-secret"), ("relay", "relay-secret")):
        with open(os.path.join(args.out, name + ".token"), "w") as f:
            f.write(secret + "\n")
    gpu1_uuid = str(torch.cuda.get_device_properties(1).uuid)
    procs = Processes(args.out)
    rows, gates, failures = [], [], []
    try:
        start_engine(procs, "engine-relay", args.relay_port)
        start_engine(procs, "engine-direct", args.direct_port)
        model = qwen25_7b_model()
        sizes = [t.numel() * 2 for _, t in model]
        total = sum(sizes)
        pg = direct_group(args)
        buf = torch.empty(max(UNITS[s[-3:]] * int(s[:-3]) for s in args.slots.split(",")),
                          dtype=torch.uint8, device="cuda:0")
        print(f"# wsync relay benchmark, link {args.link}: Qwen2.5-7B shapes, {len(model)} bf16 "
              f"tensors, {total / GIB:.2f} GiB; trainer and upstream wsyncd on GPU 0, downstream "
              f"wsyncd and its IPC engine on GPU 1; median of {args.runs} runs after a warm-up",
              flush=True)
        print("#    slot  config          buckets  ceiling   wire    e2e  direct  wire/ceil  "
              "e2e/ceil  e2e/direct\n#                                  GiB/s  GiB/s  GiB/s   "
              "GiB/s", flush=True)
        version = 0
        expected_versions = {}
        for slot_text in args.slots.split(","):
            slot = int(slot_text[:-3]) * UNITS[slot_text[-3:]]
            bucket_sizes = [sum(sizes[i] for i in b) for b in plan(sizes, slot)]
            ceil_s = statistics.median(ceiling(args, pg, bucket_sizes, buf)
                                       for _ in range(args.runs + 1))
            ceil = total / ceil_s / GIB
            configs = [("relay", ())]
            if slot_text == args.default_slot:
                configs.append(("relay+resident", ("--resident", "gpu")))
            for config, resident in configs:
                relay = Relay(args, procs, slot, gpu1_uuid, resident)
                runs = []
                try:
                    with wsync.Client("unix:" + relay.up_sock, device=0,
                                      name="relay bench trainer") as client:
                        for r in range(args.runs + 1):
                            perturb(model)
                            pair = {}
                            for group in ("broadcast", "policy"):
                                version += 1
                                v = f"{args.link}-{config}-{slot_text}-{version}"
                                torch.cuda.synchronize()
                                t0 = time.perf_counter()
                                result = client.push(model, version=v, group=group)
                                pair["direct" if group == "broadcast" else group] = (
                                    time.perf_counter() - t0, result)
                                expected_versions[group] = v
                            if r:
                                runs.append(pair)
                    note(f"{slot_text} {config}: direct "
                         f"{[round(p['direct'][0], 3) for p in runs]} s, relay "
                         f"{[round(p['policy'][0], 3) for p in runs]} s")
                    timing = runs[len(runs) // 2]["policy"][1]["daemon_timing"]
                    note(f"{slot_text} {config}: relay daemon timing {json.dumps(timing)}")
                    if config == "relay" and slot_text == args.default_slot or (
                            config == "relay+resident"):
                        expected = {name: crc(t) for name, t in model}
                        for group, url in (("broadcast", args.direct_url),
                                           ("policy", args.relay_url)):
                            if not holds(url, expected, expected_versions[group]):
                                failures.append(f"{slot_text} {config}: {url} ({group}) does not "
                                                "hold the last push bit-identical")
                    if config == "relay+resident":
                        listing = relay.wsyncctl(relay.down_sock, "buffers")
                        note(f"downstream's buffers with a resident version:\n{listing.stdout}")
                        restart(args, procs, relay, total, expected, expected_versions["policy"],
                                gates, failures)
                    for sock in (relay.up_sock, relay.down_sock):
                        note(relay.wsyncctl(sock, "relay").stdout.strip())
                finally:
                    relay.stop()
                e2e = statistics.median(p["policy"][0] for p in runs)
                direct = statistics.median(p["direct"][0] for p in runs)
                ratio = statistics.median(p["direct"][0] / p["policy"][0] for p in runs)
                wires = [p["policy"][1]["daemon_timing"]["wire_seconds"] for p in runs]
                wire = statistics.median(wires)
                row = {"link": args.link, "slot": slot_text, "config": config,
                       "buckets": len(bucket_sizes), "bytes": total,
                       "ceiling_gibs": ceil, "wire_gibs": total / wire / GIB if wire else 0,
                       "e2e_gibs": total / e2e / GIB, "direct_gibs": total / direct / GIB,
                       "relay_over_direct": ratio, "runs": [
                           {"direct_s": p["direct"][0], "relay_s": p["policy"][0],
                            "relay_timing": p["policy"][1]["daemon_timing"]} for p in runs]}
                rows.append(row)
                print(f"{slot_text:>8}  {config:<15} {len(bucket_sizes):>7} {ceil:>8.1f} "
                      f"{row['wire_gibs']:>6.1f} {row['e2e_gibs']:>6.1f} {row['direct_gibs']:>7.1f}"
                      f"  {row['wire_gibs'] / ceil:>9.2f}  {row['e2e_gibs'] / ceil:>8.2f}  "
                      f"{ratio:>10.2f}", flush=True)
                if config != "relay":
                    continue
                gates.append((f"{slot_text:>6} {args.link} relay wire >= 0.90 x ceiling",
                              row["wire_gibs"] / ceil, 0.90))
                if slot >= 512 * 2**20:
                    gates.append((f"{slot_text:>6} {args.link} relay end to end >= 0.85 x ceiling",
                                  row["e2e_gibs"] / ceil, 0.85))
                if slot >= 256 * 2**20:
                    gates.append((f"{slot_text:>6} {args.link} relay end to end >= 1.0 x direct",
                                  ratio, 1.0))
    finally:
        procs.stop_all()
    with open(os.path.join(args.out, "relay.json"), "w") as f:
        json.dump({"rows": rows, "gates": gates, "failures": failures}, f, indent=1)
    missed = 0
    for text, value, need in gates:
        ok = value >= need
        missed += not ok
        print(f"GATE  {text}: {'PASS' if ok else 'MISSED'} ({value:.2f})", flush=True)
    for f in failures:
        print(f"FAILED: {f}", flush=True)
    print(f"# gates: {'all PASS' if not missed else f'{missed} MISSED'}", flush=True)
    sys.exit(1 if missed or failures else 0)


def restart(args, procs, relay, total, expected, version, gates, failures):
    """The relay engine restarted with no trainer: the downstream brings it to its resident
    version on its own; timed from the engine's first health answer."""
    rate = d2d_rate(1)
    bound = 2 + 4 * (total / GIB) / rate
    procs.stop("engine-relay")
    procs.start("engine-relay", [
        sys.executable, os.path.join(ROOT, "tests/engines/sglang/sglang_engine.py"), "--memory",
        "cuda", "--port", str(args.relay_port), "--gpus", "1"])
    wait_until("the restarted engine answered /health",
               lambda: urllib.request.urlopen(args.relay_url + "/health", timeout=2).status == 200,
               120)
    t0 = time.perf_counter()
    try:
        wait_until(f"the restarted engine held {version}",
                   lambda: get_json(args.relay_url + "/sim/checksums", 60)["weight_version"]
                   == version, 60)
    except RuntimeError as e:
        failures.append(f"restart: {e}")
        return
    seconds = time.perf_counter() - t0
    note(f"restart: the engine held {version} {seconds:.2f} s after its health check answered "
         f"(bound {bound:.2f} s: 2 s + 4 x {total / GIB:.2f} GiB at GPU 1's D2D {rate:.0f} GiB/s)")
    if not holds(args.relay_url, expected, version):
        failures.append("restart: the restarted engine's bytes differ from the kept version's")
    gates.append((f"{args.link} restarted engine holds the resident version within "
                  f"{bound:.2f} s (seconds, lower is better; shown as bound / measured)",
                  bound / seconds if seconds else float("inf"), 1.0))


if __name__ == "__main__":
    main()
