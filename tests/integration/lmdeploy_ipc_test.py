"""LMDeploy's colocated path end to end in host mode: real wsyncd, wsyncctl and Python client
processes against tests/sim/lmdeploy_ipc_sim.py, which loads each bucket from wsyncd's slots as
LMDeploy's /update_weights does (flattened buckets in elements of one dtype, or per tensor).

Usage: lmdeploy_ipc_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR LMDEPLOY_SIM
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import child_environment, free_port, wait_port  # noqa: E402

child_environment()

WSYNCD, CTL, LIB, PKG, SIM = sys.argv[1:6]
del sys.argv[1:6]
os.environ["WSYNC_CLIENT_LIB"] = LIB
sys.path.insert(0, PKG)

import numpy as np  # noqa: E402
import wsync  # noqa: E402

# Host mode's stand-in UUIDs (common/host/host_platform.h): device 0.
GPU0 = "686f7374-0000-0000-0000-000000000000"




def crc(array):
    return format(zlib.crc32(np.ascontiguousarray(array).tobytes()), "08x")


def updates_of(events):
    """The lifecycle of each update in the simulator's events, split at each sleep."""
    cycles = []
    for e in events:
        if e.startswith("sleep:"):
            cycles.append([])
        if cycles:
            cycles[-1].append(e)
    return cycles


class LmdeployIpcTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-lmdeploy-")
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        self.procs = {}
        self.spawn("wsyncd", [WSYNCD, "--mode", "host", "--socket", self.sock,
                              "--slot-bytes", "1MiB", "--bind-address", "127.0.0.1",
                              "--bucket-timeout", "3"])
        deadline = time.time() + 10
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)
        rng = np.random.default_rng(11)
        # Mixed dtypes, interleaved: a flattened bucket must not hold two of them.
        self.model = [
            ("model.embed_tokens.weight", rng.integers(0, 2**16, (300, 700), dtype=np.uint16),
             "bfloat16"),
            ("model.norm.weight", rng.standard_normal(1001).astype(np.float32)),
            ("model.layers.0.mlp.weight", rng.integers(0, 2**16, (256, 513), dtype=np.uint16),
             "bfloat16"),
            ("model.layers.0.step", np.arange(5, dtype=np.int64)),
            ("model.layers.0.scale", rng.standard_normal(77).astype(np.float32)),
        ]

    def tearDown(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            p.wait(timeout=20)

    def spawn(self, name, argv):
        with open(os.path.join(self.dir, name + ".log"), "w") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def start_engine(self, name="engine", port=None, extra=()):
        port = port or free_port()
        self.spawn(name, [sys.executable, SIM, "--port", str(port), "--gpus", GPU0, *extra])
        wait_port(port)
        return port

    def ctl(self, *args):
        return subprocess.run([CTL, "--socket", self.sock, *args], capture_output=True, text=True)

    def create_group(self, port, *extra, name="colo"):
        return self.ctl("create-group", name, "--kind", "lmdeploy", "--transport", "ipc",
                        "--engine", f"http://127.0.0.1:{port}@{GPU0}", *extra)

    def engine_state(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            return json.loads(r.read())

    def knobs(self, port, **knobs):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/sim/knobs",
                                     data=json.dumps(knobs).encode(), method="POST")
        urllib.request.urlopen(req).read()

    def push(self, version, model=None):
        with wsync.Client("unix:" + self.sock, device=0, name="lmdeploy test") as client:
            return client.push(model or self.model, version=version, group="colo")

    def assert_engine_holds(self, port, model):
        state = self.engine_state(port)
        for rank, tensors in state["ranks"].items():
            for item in model:
                self.assertEqual(tensors.get(item[0]), crc(item[1]), f"rank {rank} {item[0]}")
        self.assertEqual(state["casts"], 0, "no tensor was cast to another dtype")
        self.assertEqual(state["loads_while_asleep"], 0)
        return state

    def assert_three_versions_exact(self, port, flattened):
        for n, version in enumerate(("v1", "v2", "v3"), start=1):
            result = self.push(version)
            self.assertTrue(all(e["ok"] for e in result["engines"]), result)
            state = self.assert_engine_holds(port, self.model)
            self.assertEqual(state["finished_calls"], n, "one finished request per version")
            self.assertFalse(state["is_sleeping"], "serving again after the update")
            cycle = updates_of(state["events"])[-1]
            buckets = [e for e in cycle if e.startswith("update:")]
            # The clean cut: weights awake before the first bucket, the KV cache after the last,
            # and finished on the last bucket itself (the client marked it).
            self.assertEqual(cycle[:2], ["sleep:1", "wakeup:weights"], cycle)
            self.assertEqual(cycle[-1], "wakeup:kv_cache", cycle)
            self.assertEqual(len(buckets), result["buckets"], cycle)
            self.assertTrue(buckets[-1].endswith(":finished"), cycle)
            self.assertFalse(any(b.endswith(":finished") for b in buckets[:-1]), cycle)
        # Persistent slots, each mapped once; the flattened tensor sent on every request.
        self.assertEqual(state["ipc_opens"], [2])
        self.assertEqual(state["updates_received"], 3 * result["buckets"])
        self.assertEqual(state["flattened_tensor_sent"],
                         state["updates_received"] if flattened else 0)
        return result

    def test_flattened_buckets_are_exact_over_three_versions_one_dtype_each(self):
        port = self.start_engine()
        out = self.create_group(port)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = self.assert_three_versions_exact(port, flattened=True)
        self.assertIn("one dtype per bucket", result["bucket_rules"])
        # Five tensors in four dtype runs (bf16, f32, bf16, i64+f32 split): at least five buckets.
        self.assertGreaterEqual(result["buckets"], 5)
        listed = json.loads(self.ctl("--json", "group", "colo").stdout)
        self.assertEqual(listed["spec"]["lmdeploy"]["load_format"],
                         "LMDEPLOY_LOAD_FORMAT_FLATTENED_BUCKET")

    def test_per_tensor_views_are_exact_over_three_versions(self):
        port = self.start_engine()
        out = self.create_group(port, "--load-format", "null")
        self.assertEqual(out.returncode, 0, out.stderr)
        result = self.assert_three_versions_exact(port, flattened=False)
        self.assertEqual(result["bucket_rules"], "none")

    def test_an_unmarked_last_bucket_is_finished_by_a_request_of_its_own(self):
        # A tensor larger than a slot closes its own bucket as it is added, before the client
        # knows it is the last: no bucket goes out marked, and the commit finishes the update.
        port = self.start_engine()
        self.assertEqual(self.create_group(port).returncode, 0)
        model = [("small", np.arange(64, dtype=np.float32)),
                 ("huge", np.arange(400000, dtype=np.float32))]
        self.push("big", model=model)
        state = self.assert_engine_holds(port, model)
        cycle = updates_of(state["events"])[-1]
        self.assertEqual(cycle[-2:], ["update:0:finished", "wakeup:kv_cache"], cycle)
        self.assertEqual(state["finished_calls"], 1)

    def test_a_server_refusing_pickle_is_a_configuration_error(self):
        port = self.start_engine()
        self.assertEqual(self.create_group(port).returncode, 0)
        self.knobs(port, refuse_pickle=True)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("refused")
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1", e.exception.message)
        self.assertNotIn("safetensors", e.exception.message, "the engine's words stay in the log")
        # The failed update wakes the engine instead of leaving it asleep.
        self.assertFalse(self.engine_state(port)["is_sleeping"])
        self.knobs(port, refuse_pickle=False)
        self.push("allowed")
        self.assert_engine_holds(port, self.model)

    def test_engine_faults_fail_the_update_and_the_next_one_succeeds(self):
        port = self.start_engine()
        self.assertEqual(self.create_group(port).returncode, 0)
        self.push("ok1")
        # HTTP 500 (an exception in the engine) on the next update's second bucket.
        self.knobs(port, fail_update_at=self.engine_state(port)["updates_received"] + 1)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("bad-500")
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.assertIn("500", e.exception.message)
        self.assertFalse(self.engine_state(port)["is_sleeping"])
        self.push("ok2")
        self.assert_engine_holds(port, self.model)
        # A hang: the bucket deadline (3 s) ends it.
        self.knobs(port, hang_update_at=self.engine_state(port)["updates_received"])
        start = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("hang")
        self.assertLess(time.time() - start, 10)
        self.assertEqual(e.exception.code_name, "DEADLINE_EXCEEDED")
        # The hung engine is replaced by a fresh one on the same port.
        self.procs["engine"].kill()
        self.procs["engine"].wait()
        self.start_engine(port=port)
        self.push("ok3")
        self.assert_engine_holds(port, self.model)
        # Death halfway through an update.
        self.knobs(port, die_at_update=self.engine_state(port)["updates_received"] + 1)
        start = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("dies")
        self.assertLess(time.time() - start, 10)
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.procs["engine"].wait()
        self.start_engine(port=port)
        self.push("ok4")
        self.assert_engine_holds(port, self.model)
        self.assertIsNone(self.procs["wsyncd"].poll(), "wsyncd stays up")

    def test_a_server_without_its_openapi_document_is_refused_at_creation(self):
        port = self.start_engine(extra=["--disable-fastapi-docs"])
        out = self.create_group(port)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("openapi.json answered HTTP 404", out.stderr)
        self.assertIn("--disable-fastapi-docs", out.stderr)
        self.assertEqual(self.engine_state(port)["updates_received"], 0)

    def test_a_broadcast_group_of_lmdeploy_engines_is_refused_at_creation(self):
        port = self.start_engine()
        out = self.ctl("create-group", "disagg", "--kind", "lmdeploy", "--engine",
                       f"http://127.0.0.1:{port}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("cannot receive over the broadcast data path", out.stderr)


if __name__ == "__main__":
    unittest.main()
