"""One wsyncd serving groups of all three engine kinds side by side (host mode): an SGLang group
with weight-update sessions, a vLLM group (store rendezvous, packed chunks, the warm-up
all-reduce) and an LMDeploy group (one dtype per flattened bucket, `finished` on the last), each
with two TP ranks, each fed from its own device by its own trainer, all pushing at once. Every rank
of every engine must hold every tensor's bytes, each engine must see exactly its own kind's calls,
and wsyncctl must name each engine's kind, version and variant.

Usage: mixed_kinds_test.py WSYNCD SGLANG_SIM VLLM_ENGINE WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR
                          LMDEPLOY_ENGINE
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import child_environment, free_port, state_environment  # noqa: E402
from process_support import sglang_engine, wait_port  # noqa: E402
from process_support import mixed_dtype_model as make_model  # noqa: E402

child_environment()

WSYNCD, SGLANG_SIM, VLLM, CTL, LIB, PKG, LMDEPLOY = sys.argv[1:8]
del sys.argv[1:8]
# The simulators on host memory, 2 TP ranks each; vLLM's on its NCCL backend.
SGLANG_SIM = [*sglang_engine(SGLANG_SIM), "--tp", "2"]
VLLM_SIM = [sys.executable, VLLM, "--memory", "host", "--backend", "nccl", "--gpus", "0,1"]
LMDEPLOY_ENGINE = [sys.executable, LMDEPLOY, "--memory", "host", "--gpus", "0,1"]
os.environ["WSYNC_CLIENT_LIB"] = LIB
sys.path.insert(0, PKG)

import numpy as np  # noqa: E402
import wsync  # noqa: E402

CHUNK = 40000  # vLLM's packed chunk size for the group


def crc(item):
    return format(zlib.crc32(np.ascontiguousarray(item[1]).tobytes()), "08x")


class MixedKindsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-mixed-")
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        self.procs = []
        self.spawn([WSYNCD, "--mode", "host", "--socket", self.sock, "--slot-bytes", "1MiB",
                    "--bind-address", "127.0.0.1", "--bucket-timeout", "10"], "wsyncd.log")
        deadline = time.time() + 10
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)

    def tearDown(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=20)

    def spawn(self, argv, log):
        with open(os.path.join(self.dir, log), "w") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               env=state_environment(self.dir)))

    def engine(self, argv):
        """An engine of 2 TP ranks (each command line says so)."""
        port = free_port()
        self.spawn([*argv, "--port", str(port)], f"engine-{port}.log")
        wait_port(port)
        return port

    def ctl(self, *args):
        out = subprocess.run([CTL, "--socket", self.sock, *args], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def state(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            return json.loads(r.read())

    def assert_holds(self, port, model):
        state = self.state(port)
        self.assertEqual(len(state["ranks"]), 2, port)
        for rank, tensors in state["ranks"].items():
            for item in model:
                self.assertEqual(tensors.get(item[0]), crc(item), f"{port} rank {rank} {item[0]}")
        return state

    def test_three_kinds_update_at_once_and_each_rank_holds_the_bytes(self):
        sglang = self.engine([*SGLANG_SIM, "--sessions"])
        vllm = self.engine([*VLLM_SIM, "--version", "0.30.0"])
        lmdeploy = self.engine(LMDEPLOY_ENGINE)
        groups = {
            "sg": (0, ["--kind", "sglang", "--engine", f"http://127.0.0.1:{sglang}#2"]),
            "vl": (1, ["--kind", "vllm", "--engine", f"http://127.0.0.1:{vllm}#2",
                       "--vllm-packed", "--vllm-packed-chunk-bytes", str(CHUNK)]),
            "lm": (2, ["--kind", "lmdeploy", "--engine", f"http://127.0.0.1:{lmdeploy}#2"]),
        }
        for name, (device, flags) in groups.items():
            self.ctl("create-group", name, "--transport", "broadcast", "--device", str(device),
                     *flags)

        results = {}
        for round_ in (1, 2):
            model = make_model(round_)
            errors = []

            def push(name, device):
                try:
                    with wsync.Client("unix:" + self.sock, device=device) as client:
                        results[name] = client.push(model, version=f"{name}-v{round_}",
                                                    group=name)
                except Exception as e:  # reported below, with the group's name
                    errors.append(f"{name}: {e}")

            threads = [threading.Thread(target=push, args=(name, device))
                       for name, (device, _) in groups.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            self.assertEqual(errors, [])
            for name, result in results.items():
                self.assertTrue(all(e["ok"] for e in result["engines"]), (name, result))

            sg = self.assert_holds(sglang, model)
            self.assertEqual(sg["weight_version"], f"sg-v{round_}")
            buckets = results["sg"]["buckets"]
            self.assertEqual(sg["session_log"][-(buckets + 2):],
                             ["begin all"] + ["update selector=all"] * buckets + ["end"])

            vl = self.assert_holds(vllm, model)
            self.assertEqual(vl["weight_version"], f"vl-v{round_}")
            self.assertTrue(vl["packed"])
            self.assertEqual(vl["inits"], 1, "one init and warm-up for both rounds")

            lm = self.assert_holds(lmdeploy, model)
            self.assertEqual(lm["finished_calls"], round_, "finished once per update")
            # int64, then float32 twice, then bfloat16 twice: one bucket per dtype run, where the
            # other kinds take the whole model in one bucket.
            self.assertEqual(results["lm"]["buckets"], 3, "one dtype per bucket")
            self.assertEqual(results["sg"]["buckets"], 1)
            self.assertFalse(lm["is_sleeping"])

        # Each engine knows its group by its own name, and wsyncctl names every engine's kind,
        # version and variant.
        self.assertRegex(self.state(sglang)["group"], r"^sg\.[0-9a-f]{8}\.[0-9a-f]{32}$")
        self.assertRegex(self.state(lmdeploy)["group"], r"^lm\.[0-9a-f]{8}\.[0-9a-f]{32}$")
        shown = {e["group"]: (e["kind"], e["engine_version"], e["variant"])
                 for e in json.loads(self.ctl("--json", "engines"))["engines"]}
        self.assertEqual(shown, {
            "sg": ("sglang", "0.5.6", "nccl flattened_bucket, sessions"),
            "vl": ("vllm", "0.30.0", "nccl-session-packed-at-init-version-unique-id"),
            "lm": ("lmdeploy", "routes of PR #4638", "nccl flattened_bucket"),
        })
        updates = json.loads(self.ctl("--json", "updates"))["updates"]
        self.assertEqual(len(updates), 6)


class WeightsCheckTest(MixedKindsTest):
    """--check-weights: after each commit the engines' own checkers are compared with each
    other; an engine whose weights differ fails the update, stays paused and waits for a full
    version."""

    test_three_kinds_update_at_once_and_each_rank_holds_the_bytes = None  # the parent's only

    def knobs(self, port, **knobs):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/sim/knobs",
                                     data=json.dumps(knobs).encode(), method="POST")
        urllib.request.urlopen(req).read()

    def push(self, group, version, seed, device=0):
        with wsync.Client("unix:" + self.sock, device=device) as client:
            return client.push(make_model(seed), version=version, group=group)

    def test_sglang_engines_agree_and_one_that_differs_is_held_back_until_a_full_version(self):
        a, b, c = (self.engine([*SGLANG_SIM, "--weights-checker"]) for _ in range(3))
        url = {p: f"http://127.0.0.1:{p}" for p in (a, b, c)}
        self.ctl("create-group", "sg", "--kind", "sglang", "--check-weights",
                 *[x for p in (a, b, c) for x in ("--engine", url[p] + "#2")])
        result = self.push("sg", "v1", 1)
        for e in result["engines"]:
            self.assertTrue(e["ok"], e)
            self.assertEqual(e["engine_version"], "0.5.6")
            self.assertRegex(e["weights_check"],
                             r"^checksum [0-9a-f]{8} over 10 tensor\(s\), equal on all 3 "
                             r"engines of TP 2$")
        # Engine b's rank 0 now keeps a flipped byte of one tensor: the update fails as data
        # loss, names b and the tensor, and b alone is held back.
        self.knobs(b, corrupt_tensor="lm_head.weight")
        with self.assertRaises(wsync.WsyncError) as failed:
            self.push("sg", "v2", 2)
        self.assertEqual(failed.exception.code_name, "DATA_LOSS")
        self.assertIn(f"engine {url[b]} checksum", failed.exception.message)
        self.assertIn(f"differs from {url[a]} in 1 tensor(s): tp0/lm_head.weight",
                      failed.exception.message)
        self.assertNotIn(f"engine {url[a]} checksum", failed.exception.message)
        self.assertIn("push the whole version again", failed.exception.message)
        self.assertEqual([self.state(p)["paused"] for p in (a, b, c)], [False, True, False])
        waiting = {e["url"]: e["needs_full_version"]
                   for e in json.loads(self.ctl("--json", "engines"))["engines"]}
        self.assertEqual(waiting, {url[a]: False, url[b]: True, url[c]: False})
        # Repaired, the next full version lands everywhere and b serves again.
        self.knobs(b, corrupt_tensor="")
        result = self.push("sg", "v3", 3)
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        for p in (a, b, c):
            self.assert_holds(p, make_model(3))
        self.assertFalse(self.state(b)["paused"])

    def test_two_engines_that_disagree_are_both_held_back(self):
        # Nothing says which of two holds the trainer's weights.
        a = self.engine([*VLLM_SIM, "--version", "0.30.0", "--weight-checker"])
        b = self.engine([*VLLM_SIM, "--version", "0.30.0", "--weight-checker", "--corrupt-tensor",
                         "lm_head.weight"])
        self.ctl("create-group", "vl", "--kind", "vllm", "--check-weights",
                 "--engine", f"http://127.0.0.1:{a}#2", "--engine", f"http://127.0.0.1:{b}#2")
        with self.assertRaises(wsync.WsyncError) as failed:
            self.push("vl", "v1", 1)
        self.assertIn(f"engine http://127.0.0.1:{a} checksum", failed.exception.message)
        self.assertIn(f"engine http://127.0.0.1:{b} checksum", failed.exception.message)
        self.assertEqual([self.state(p)["paused"] for p in (a, b)], [True, True])

    def test_vllm_engines_are_compared_and_the_odd_one_named(self):
        ports = [self.engine([*VLLM_SIM, "--version", "0.30.0", "--weight-checker", *extra])
                 for extra in ([], [], ["--corrupt-tensor", "model.norm.weight"])]
        engines = []
        for p in ports:
            engines += ["--engine", f"http://127.0.0.1:{p}#2"]
        self.ctl("create-group", "vl", "--kind", "vllm", "--check-weights", *engines)
        with self.assertRaises(wsync.WsyncError) as failed:
            self.push("vl", "v1", 1)
        self.assertEqual(failed.exception.code_name, "DATA_LOSS")
        self.assertIn(f"engine http://127.0.0.1:{ports[2]} checksum", failed.exception.message)
        self.assertIn(f"differs from http://127.0.0.1:{ports[0]} in 1 tensor(s): "
                      "dp0:pp0:pcp0:tp0:ep0:model.norm.weight", failed.exception.message)
        self.assertNotIn(f"engine http://127.0.0.1:{ports[0]} checksum", failed.exception.message)
        self.assertEqual([self.state(p)["paused"] for p in ports], [False, False, True])
        updates = json.loads(self.ctl("--json", "updates"))["updates"]
        results = updates[0]["engine_results"]
        self.assertIn(f"http://127.0.0.1:{ports[0]} (0.30.0): ok; checksum ", results[0])
        self.assertIn("equal on 2 of 3 engines of TP 2", results[0])

    def test_lmdeploy_has_no_checker_and_is_refused_one(self):
        port = self.engine(LMDEPLOY_ENGINE)
        out = subprocess.run([CTL, "--socket", self.sock, "create-group", "lm", "--kind",
                              "lmdeploy", "--check-weights", "--engine",
                              f"http://127.0.0.1:{port}#2"], capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("LMDeploy has no weight checker", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
