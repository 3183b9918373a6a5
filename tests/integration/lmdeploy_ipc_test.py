"""LMDeploy's colocated path end to end in host mode: real wsyncd, wsyncctl and Python client
processes against tests/engines/lmdeploy/lmdeploy_engine.py on host memory, which loads each
bucket from wsyncd's slots as LMDeploy's /update_weights does (flattened buckets in elements of
one dtype, or per tensor).

Usage: lmdeploy_ipc_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR LMDEPLOY_ENGINE
"""

import json
import os
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments, crc, free_port,  # noqa: E402
                             host_gpu, wait_port)

_, _, _, _, SIM = client_test_arguments()

import numpy as np  # noqa: E402
import wsync  # noqa: E402

GPU0 = host_gpu(0)
GPU1 = host_gpu(1)


def dtype_of(item):
    return item[2] if len(item) > 2 else str(item[1].dtype)


def dtype_runs(model):
    """How many times a flattened tensor must reach each rank per version: once per run of
    tensors of one dtype (the worker caches one tensor, typed as its bucket's dtype)."""
    runs = {}
    for i, item in enumerate(model):
        if i == 0 or dtype_of(model[i - 1]) != dtype_of(item):
            runs[dtype_of(item)] = runs.get(dtype_of(item), 0) + 1
    return runs


def updates_of(events):
    """The lifecycle of each update in the simulator's events, split at each sleep."""
    cycles = []
    for e in events:
        if e.startswith("sleep:"):
            cycles.append([])
        if cycles:
            cycles[-1].append(e)
    return cycles


class LmdeployIpcTest(HostWsyncdCase):
    def setUp(self):
        super().setUp()
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

    def start_engine(self, name="engine", port=None, extra=()):
        port = port or free_port()
        self.spawn(name, [sys.executable, SIM, "--memory", "host", "--port", str(port), "--gpus",
                           GPU0, *extra])
        wait_port(port)
        return port

    def start_tp_engine(self, name="engine"):
        port = free_port()
        self.spawn(name, [sys.executable, SIM, "--memory", "host", "--port", str(port), "--gpus",
                           f"{GPU0},{GPU1}"])
        wait_port(port)
        return port

    def create_group(self, port, *extra, name="colo", gpus=(GPU0,)):
        return self.ctl("create-group", name, "--kind", "lmdeploy", "--transport", "ipc",
                        "--engine", f"http://127.0.0.1:{port}@{','.join(gpus)}", *extra)

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
        # The slots are regions of one allocation, mapped once. The flattened tensor views all of
        # it, so it reaches the rank once per version and dtype run (this model interleaves its
        # dtypes, so the worker's one cached tensor is replaced at each change of dtype).
        self.assertEqual(state["ipc_opens"], [1])
        self.assertEqual(state["updates_received"], 3 * result["buckets"])
        if flattened:
            expected = {f"0:{d}": n for d, n in dtype_runs(self.model).items()}
            self.assertEqual(state["flattened_arrivals"][-3:], [expected] * 3)
            self.assertEqual(state["flattened_tensor_sent"], 3 * sum(expected.values()))
        else:
            self.assertEqual(state["flattened_tensor_sent"], 0)
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

    def test_two_dtypes_over_many_buckets_send_the_tensor_once_per_version_dtype_and_rank(self):
        # Two TP ranks on two GPUs, one trainer rank per GPU; each dtype fills several buckets,
        # so both slots take turns under one cached tensor.
        port = self.start_tp_engine()
        out = self.create_group(port, gpus=(GPU0, GPU1))
        self.assertEqual(out.returncode, 0, out.stderr)
        rng = np.random.default_rng(5)
        model = [(f"model.layers.{i}.mlp.weight",
                  rng.integers(0, 2**16, (300, 700), dtype=np.uint16), "bfloat16")
                 for i in range(6)]
        model += [(f"model.layers.{i}.norm.weight", rng.standard_normal(150000).astype(np.float32))
                  for i in range(4)]
        for n, version in enumerate(("d1", "d2", "d3"), start=1):
            results = [None, None]

            def rank(i, version=version):
                with wsync.Client("unix:" + self.sock, device=i, name=f"rank {i}") as client:
                    results[i] = client.push(model, version=version, group="colo")

            threads = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            for r in results:
                self.assertIsNotNone(r)
                self.assertTrue(all(e["ok"] for e in r["engines"]), r)
            self.assertGreaterEqual(results[0]["buckets"], 6, "several buckets per dtype")
            state = self.assert_engine_holds(port, model)
            self.assertEqual(sorted(state["ranks"]), ["1", "2"])
            self.assertEqual(state["ranks"]["1"], state["ranks"]["2"], "identical on every rank")
            self.assertEqual(state["finished_calls"], n)
        once = {f"{r}:{d}": 1 for r in (0, 1) for d in ("bfloat16", "float32")}
        self.assertEqual(state["flattened_arrivals"][-3:], [once] * 3)
        self.assertEqual(state["updates_received"], 3 * results[0]["buckets"])
        # Each rank mapped its own GPU's one slot allocation, once.
        self.assertEqual(state["ipc_opens"], [1, 1])

    def test_after_a_failed_update_the_next_sends_the_tensor_with_its_first_request(self):
        port = self.start_engine()
        self.assertEqual(self.create_group(port).returncode, 0)
        model = [(f"w{i}", np.full(200000, i, dtype=np.float32)) for i in range(4)]
        # The second request of the update fails at the engine. What the worker keeps is then
        # unknown to the adapter; the next update (which sleeps the engine first, dropping it
        # anyway) sends the tensor with its first request and never again.
        self.knobs(port, fail_update_at=1)
        with self.assertRaises(wsync.WsyncError):
            self.push("f1", model=model)
        result = self.push("f2", model=model)
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        state = self.assert_engine_holds(port, model)
        self.assertEqual(state["flattened_arrivals"][-1], {"0:float32": 1})
        self.assertEqual(state["last_error"], "")

    def test_per_tensor_views_are_exact_over_three_versions(self):
        port = self.start_engine()
        out = self.create_group(port, "--load-format", "null")
        self.assertEqual(out.returncode, 0, out.stderr)
        result = self.assert_three_versions_exact(port, flattened=False)
        self.assertEqual(result["bucket_rules"], "none")

    def test_a_bucket_closed_by_the_last_tensor_added_is_marked_finished(self):
        # A tensor larger than a slot closes its own bucket as it is added, before the client
        # knows whether another follows: the client holds that bucket back until Commit tells
        # it, then sends it marked, so no finishing request of its own is needed.
        port = self.start_engine()
        self.assertEqual(self.create_group(port).returncode, 0)
        model = [("small", np.arange(64, dtype=np.float32)),
                 ("huge", np.arange(400000, dtype=np.float32))]
        self.push("big", model=model)
        state = self.assert_engine_holds(port, model)
        cycle = updates_of(state["events"])[-1]
        self.assertEqual(cycle[-2:], ["update:1:finished", "wakeup:kv_cache"], cycle)
        self.assertNotIn("update:0:finished", cycle, "no finishing request without tensors")
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
        # The refused bucket reached the engine: it stays asleep until a complete version.
        self.assertTrue(self.engine_state(port)["is_sleeping"])
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
        # It holds the first bucket of bad-500: asleep until a complete version.
        self.assertTrue(self.engine_state(port)["is_sleeping"])
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

    def test_a_broadcast_group_needs_a_server_with_the_nccl_routes(self):
        # Before LMDeploy PR #4638 there is no /init_weights_update_group: refused at Probe,
        # before any engine call (the NCCL path itself runs in python_client_test).
        port = self.start_engine(extra=["--no-nccl-routes"])
        out = self.ctl("create-group", "disagg", "--kind", "lmdeploy", "--engine",
                       f"http://127.0.0.1:{port}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("without POST /init_weights_update_group (PR #4638", out.stderr)
        self.assertEqual(self.engine_state(port)["updates_received"], 0)


if __name__ == "__main__":
    unittest.main()
