"""Sparse-delta relay benchmark in host mode, nccl-tests style: a trainer node's wsyncd relays a
synthetic bf16 model (wsync-push's, --model-gib) to one rollout node's wsyncd, which keeps the
last version (--resident host) and delivers every bucket to an SGLang-semantics engine simulator.
Both daemons run in host mode on this machine: the relay's wire is the host collective between
them (TCP over loopback).

Per changed fraction (elements of every tensor, at random positions, changed from the last
version) the same pushes run twice in the same run, one after the other: with the relay group's
default (`delta: auto`) and with `delta: off` (every bucket dense), each against a daemon pair of
its own. Each fraction's pushes start with a whole new model (left out: a warm-up); a row is the
median of the --runs updates after it:

  sent      bytes on the relay against dense (the upstream's count, in the trainer's result)
  update    the trainer's update, from Begin to the downstream's engine committed (wsync-push's
            seconds): the relay's time plus what both modes share (the trainer's copies into
            the upstream's slots, the downstream's delivery to its engine)
  wire      the upstream's relay broadcasts for the update, summed over its buckets (daemon
            timing's wire seconds): the bytes crossing between the daemons
  speedup   dense / delta, of the update and of the wire

Every version is checked on the engine (its CRC-32s against the trainer's). Gates (a missed gate
fails the run, exit 1, unless --no-gate): bytes <= 2 % of dense at 1 % changed; the wire >= 10x
faster than dense at 1 % changed (a wire time under 5 ms counts as 5 ms); the update at 100 %
changed <= 1.05x dense (what encoding costs where nothing is gained). The update's own speedup
is printed, not gated: on the 2-core CI machine the trainer's copies and checksums, shared by
both modes, take most of it.

    python3 tests/bench/delta_host_bench.py --build build --out /tmp/delta-bench
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from process_support import free_port, wait_port  # noqa: E402
SGLANG_SIM = [sys.executable, os.path.join(ROOT, "tests/engines/sglang/sglang_engine.py"),
              "--memory", "host"]


def wait_for(what, check, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not within {seconds} s")


class NodePair:
    """A trainer node's wsyncd relaying group 'policy' to rollout node 'rollout-1' (a wsyncd
    keeping the last version, and its engine simulator)."""

    def __init__(self, build, work, delta, slot_bytes):
        self.build, self.work, self.procs = build, work, []
        os.makedirs(work)
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out",
                        cert], check=True, capture_output=True)
        for name in ("trainer", "relay"):
            with open(os.path.join(work, f"{name}.token"), "w") as f:
                f.write(os.urandom(18).hex())
        up_port = free_port()
        self.up_sock = os.path.join(work, "up.sock")
        group = {"name": "policy", "kind": "wsyncd", "transport": "relay",
                 "engines": [{"url": "wsyncd://rollout-1"}], "wsyncd": {"delta": delta}}
        self.config("up", {
            "mode": "host", "socket": self.up_sock, "listen": f"127.0.0.1:{up_port}",
            "tls_cert": cert, "tls_key": key, "token_file": os.path.join(work, "trainer.token"),
            "relay_tokens": [{"token_file": os.path.join(work, "relay.token"),
                              "groups": ["policy"]}],
            "slots": 2, "slot_bytes": slot_bytes, "bind_address": "127.0.0.1",
            "state_dir": os.path.join(work, "up-state"), "groups": [group]})
        self.engine_port = free_port()
        self.spawn("engine", [*SGLANG_SIM, "--port", str(self.engine_port)])
        wait_port(self.engine_port, 30)
        self.config("down", {
            "mode": "host", "socket": os.path.join(work, "down.sock"), "slots": 2,
            "slot_bytes": slot_bytes, "bind_address": "127.0.0.1",
            "state_dir": os.path.join(work, "down-state"), "resident": "host",
            "groups": [{"name": "policy", "kind": "sglang",
                        "engines": [{"url": f"http://127.0.0.1:{self.engine_port}"}]}],
            "relay_feeds": [{"upstream": f"127.0.0.1:{up_port}", "group": "policy",
                             "node": "rollout-1",
                             "token_file": os.path.join(work, "relay.token"), "ca_file": cert,
                             "server_name": "localhost"}]})
        self.spawn("up", [os.path.join(build, "daemon/wsyncd"), "--config", self.path("up.json")])
        self.spawn("down", [os.path.join(build, "daemon/wsyncd"), "--config",
                            self.path("down.json")])
        wait_for("the rollout node's subscription", lambda: "relay: subscribed" in self.log("down"),
                 30)

    def path(self, name):
        return os.path.join(self.work, name)

    def config(self, name, body):
        with open(self.path(f"{name}.json"), "w") as f:
            json.dump(body, f)

    def spawn(self, name, argv):
        log = open(self.path(f"{name}.log"), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=ROOT, start_new_session=True))

    def log(self, name):
        with open(self.path(f"{name}.log"), errors="replace") as f:
            return f.read()

    def push(self, prefix, versions, model_gib, changed_fraction):
        """`versions` updates of the synthetic model, the first whole (another model than the
        last one pushed: a warm-up, left out), each next one `changed_fraction` of each tensor's
        elements apart from the one before; each checked on the engine. Returns the results of
        all but the first, as wsync-push printed them."""
        out = subprocess.run(
            [os.path.join(self.build, "client/wsync-push"), "--socket", self.up_sock, "--group",
             "policy", "--model-gib", str(model_gib), "--versions", str(versions),
             "--version-prefix", prefix, "--changed-fraction", str(changed_fraction),
             "--verify-sim", "--verify-engine", f"http://127.0.0.1:{self.engine_port}"],
            capture_output=True, text=True, timeout=1200)
        with open(self.path(f"push-{prefix}.txt"), "w") as f:
            f.write(out.stdout)
        if out.returncode != 0:
            raise RuntimeError(f"push of {prefix}*: failed:\n{out.stdout}\n{out.stderr}")
        blocks = re.split(r"(?m)^(?=update \S+ committed)", out.stdout)[1:]
        if len(blocks) != versions:
            raise RuntimeError(f"{versions} updates expected:\n{out.stdout}")
        return [parse_push(b) for b in blocks[1:]]

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def parse_push(text):
    m = re.search(r"committed: (\d+) buckets, ([\d.]+) GiB in ([\d.]+) s", text)
    t = re.search(r"wsyncd: verify ([\d.]+) s, idle ([\d.]+) s, wire ([\d.]+) s, answers "
                  r"([\d.]+) s", text)
    if not m or not t:
        raise RuntimeError(f"unexpected wsync-push output:\n{text}")
    result = {"seconds": float(m.group(3)), "wire": float(t.group(3))}
    w = re.search(r"relay: sent (\d+) of (\d+) dense bytes \(([\d.]+)%\), ([\d.]+)% of elements",
                  text)
    if w:
        result.update(sent=int(w.group(1)), dense=int(w.group(2)),
                      changed=float(w.group(4)) / 100)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--model-gib", type=float, default=1.0)
    ap.add_argument("--slot-bytes", default="128MiB")
    ap.add_argument("--fractions", default="0.001,0.01,0.1,0.5,1.0")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-gate", action="store_true")
    args = ap.parse_args()
    # A SIGTERM stops the daemons and engines too (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="wsync-delta-bench-")
    pairs = {}
    rows, failed = [], []
    try:
        for mode in ("auto", "off"):
            pairs[mode] = NodePair(args.build, os.path.join(work, mode), mode, args.slot_bytes)
        for fraction in (float(f) for f in args.fractions.split(",")):
            results = {mode: pair.push(f"f{fraction}-v", args.runs + 1, args.model_gib, fraction)
                       for mode, pair in pairs.items()}
            delta, dense = results["auto"], results["off"]
            row = {
                "changed": fraction,
                "changed_measured": statistics.median(r.get("changed", 0) for r in delta),
                "sent_share": statistics.median(r["sent"] / r["dense"] for r in delta),
                "update_delta": statistics.median(r["seconds"] for r in delta),
                "update_dense": statistics.median(r["seconds"] for r in dense),
                "wire_delta": statistics.median(r["wire"] for r in delta),
                "wire_dense": statistics.median(r["wire"] for r in dense),
            }
            row["speedup"] = row["update_dense"] / row["update_delta"]
            row["wire_speedup"] = row["wire_dense"] / max(row["wire_delta"], 0.005)
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    finally:
        for p in pairs.values():
            p.stop()
            for name in os.listdir(p.work):
                if name.endswith((".log", ".txt")):
                    shutil.copy(p.path(name),
                                os.path.join(args.out, f"{os.path.basename(p.work)}-{name}"))
        shutil.rmtree(work, ignore_errors=True)

    lines = [f"# delta relay, host mode: {args.model_gib} GiB bf16 synthetic model, slots "
             f"{args.slot_bytes}, median of {args.runs} updates per row",
             f"# {'changed':>8} {'measured':>9} {'sent/dense':>10} {'update':>8} {'update':>8} "
             f"{'speedup':>8} {'wire':>8} {'wire':>8} {'speedup':>8}",
             f"# {'':>8} {'':>9} {'':>10} {'delta s':>8} {'dense s':>8} {'x':>8} "
             f"{'delta s':>8} {'dense s':>8} {'x':>8}"]
    for r in rows:
        lines.append(f"  {100 * r['changed']:>7.1f}% {100 * r['changed_measured']:>8.3f}% "
                     f"{100 * r['sent_share']:>9.2f}% {r['update_delta']:>8.3f} "
                     f"{r['update_dense']:>8.3f} {r['speedup']:>8.2f} {r['wire_delta']:>8.3f} "
                     f"{r['wire_dense']:>8.3f} {r['wire_speedup']:>8.1f}")
    by = {r["changed"]: r for r in rows}
    gates = []
    if 0.01 in by:
        gates.append(("bytes at 1% changed <= 2% of dense", by[0.01]["sent_share"], 0.02, "<="))
        gates.append(("wire at 1% changed >= 10x faster than dense", by[0.01]["wire_speedup"],
                      10.0, ">="))
    if 1.0 in by:
        gates.append(("update at 100% changed <= 1.05x dense",
                      by[1.0]["update_delta"] / by[1.0]["update_dense"], 1.05, "<="))
    for what, value, bound, op in gates:
        ok = value <= bound if op == "<=" else value >= bound
        lines.append(f"# gate {what}: {value:.4f} {'PASS' if ok else 'FAIL'}")
        if not ok:
            failed.append(what)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(args.out, "delta_host.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "delta_host.json"), "w") as f:
        json.dump({"rows": rows, "failed_gates": failed}, f, indent=1)
    return 1 if failed and not args.no_gate else 0


if __name__ == "__main__":
    sys.exit(main())
