"""The colocated (IPC) transport end to end in host mode: real wsyncd, wsyncctl and Python client
processes against tests/engines/sglang/sglang_engine.py on host memory, which loads each bucket through an exact-name
unpickler from wsyncd's slots, as SGLang's update_weights_from_tensor does.

Usage: ipc_transport_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR IPC_SIM
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

_, _, _, _, IPC_SIM = client_test_arguments()

import numpy as np  # noqa: E402
import wsync  # noqa: E402

GPU0 = host_gpu(0)
GPU1 = host_gpu(1)


class IpcFixture(HostWsyncdCase):
    """A host-mode wsyncd, engine simulators and wsyncctl; the tests are in the classes below."""

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(7)
        self.model = [
            ("model.embed_tokens.weight", rng.integers(0, 2**16, (300, 700), dtype=np.uint16),
             "bfloat16"),
            ("model.norm.weight", rng.standard_normal(1001).astype(np.float32)),
            ("model.layers.0.mlp.weight", rng.standard_normal((256, 513)).astype(np.float32)),
            ("model.layers.0.step", np.arange(5, dtype=np.int64)),
        ]

    def start_engine(self, name, gpus, port=None, version=None, extra=()):
        port = port or free_port()
        self.spawn(name, [sys.executable, IPC_SIM, "--memory", "host", "--port", str(port), "--gpus", ",".join(gpus)]
                   + (["--version", version] if version else []) + list(extra))
        wait_port(port)
        return port

    def create_group(self, name, port, gpus, *extra):
        out = self.ctl("create-group", name, "--transport", "ipc", "--engine",
                       f"http://127.0.0.1:{port}@{','.join(gpus)}", *extra)
        self.assertEqual(out.returncode, 0, out.stderr)

    def engine_state(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            return json.loads(r.read())

    def knobs(self, port, **knobs):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/sim/knobs",
                                     data=json.dumps(knobs).encode(), method="POST")
        urllib.request.urlopen(req).read()

    def push(self, version, group="colo", model=None):
        with wsync.Client("unix:" + self.sock, device=0, name="ipc test") as client:
            return client.push(model or self.model, version=version, group=group)

    def push_ranks(self, versions, models=None, devices=(0, 1), group="tp"):
        """Pushes from one client per device at once; returns each rank's result or error."""
        results = [None] * len(devices)

        def rank(i):
            try:
                with wsync.Client("unix:" + self.sock, device=devices[i],
                                  name=f"trainer rank {i}") as client:
                    results[i] = client.push((models or [self.model] * len(devices))[i],
                                             version=versions[i], group=group)
            except wsync.WsyncError as e:
                results[i] = e

        threads = [threading.Thread(target=rank, args=(i,)) for i in range(len(devices))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        return results

    def assert_engine_holds(self, port, model, version):
        state = self.engine_state(port)
        self.assertEqual(state["weight_version"], version)
        for rank, tensors in state["ranks"].items():
            for item in model:
                self.assertEqual(tensors.get(item[0]), crc(item[1]), f"rank {rank} {item[0]}")
        return state


class SglangVersionGateTest(IpcFixture):
    """The payload each SGLang version gets (sglang_version.h): the simulator reads a flattened
    bucket as the version it reports did, so a wrong choice fails here."""

    def test_a_current_server_gets_the_uint8_bucket_and_engines_names_it(self):
        port = self.start_engine("engine", [GPU0], version="0.5.6.post1")
        self.create_group("colo", port, [GPU0])
        self.push("new1")
        self.assert_engine_holds(port, self.model, "new1")
        self.assert_engine_shown("sglang", "0.5.6.post1", "ipc uint8-flattened")

    def test_an_old_server_is_refused_the_flattened_bucket_naming_both_versions(self):
        port = self.start_engine("engine", [GPU0], version="0.5.5.post1")
        out = self.ctl("create-group", "colo", "--transport", "ipc", "--engine",
                       f"http://127.0.0.1:{port}@{GPU0}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("SGLang 0.5.5.post1, a post release of 0.5.5", out.stderr)
        self.assertIn(">= 0.5.6", out.stderr)
        self.assertIn("--load-format per_tensor", out.stderr)
        self.assertEqual(self.engine_state(port)["updates_received"], 0)

    def test_an_old_server_is_served_per_tensor_bytes_checked(self):
        port = self.start_engine("engine", [GPU0], version="0.5.5.post1")
        self.create_group("colo", port, [GPU0], "--load-format", "per_tensor")
        self.push("old1")
        self.assert_engine_holds(port, self.model, "old1")
        self.assert_engine_shown("sglang", "0.5.5.post1", "ipc per-tensor")

    def test_a_server_before_the_ipc_floor_is_refused_in_every_format(self):
        port = self.start_engine("engine", [GPU0], version="0.4.10.post2")
        for name, extra in (("flat", []), ("typed", ["--load-format", "per_tensor"])):
            out = self.ctl("create-group", name, "--transport", "ipc", "--engine",
                           f"http://127.0.0.1:{port}@{GPU0}", *extra)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("SGLang 0.4.10.post2, a post release of 0.4.10 is older", out.stderr)
            self.assertIn(">= 0.5.1", out.stderr)


class IpcSessionTest(IpcFixture):
    """A session build (sglang_engine --sessions, which dies on an update outside a session or a
    second begin, as SGLang's scheduler asserts): each colocated update inside begin/end, the tensor
    route's requests with the selector; the map-once route's request has no selector field."""

    def test_tensor_route_updates_sit_inside_sessions(self):
        port = self.start_engine("engine", [GPU0], extra=["--sessions"])
        self.create_group("colo", port, [GPU0])
        for version in ("s1", "s2"):
            result = self.push(version)
            state = self.assert_engine_holds(port, self.model, version)
        one = ["begin all"] + ["update selector=all"] * result["buckets"] + ["end"]
        self.assertEqual(state["session_log"], one * 2)
        self.assertFalse(state["session_open"])

    def test_map_once_route_updates_sit_inside_sessions(self):
        port = self.start_engine("engine", [GPU0], extra=["--sessions"])
        self.create_group("colo", port, [GPU0], "--sglang-ipc-route", "ipc")
        self.push("r1")
        state = self.assert_engine_holds(port, self.model, "r1")
        self.assertEqual(state["session_log"], ["begin all", "update selector=(none)", "end"])


class IpcTransportTest(IpcFixture):
    def test_every_bucket_is_loaded_from_the_slots_mapped_once(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0])
        for version in ("v1", "v2", "v3"):
            result = self.push(version)
            self.assertTrue(all(e["ok"] for e in result["engines"]), result)
            self.assertGreaterEqual(result["buckets"], 2)
            state = self.assert_engine_holds(port, self.model, version)
        # Persistent slots, regions of one allocation: mapped the first time a bucket names it,
        # never again (no tensor needs the oversize slot).
        self.assertEqual(state["ipc_opens"], [1])
        self.assertEqual(state["updates_received"], 3 * result["buckets"])

    def test_per_tensor_views_in_their_own_dtypes(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0], "--load-format", "per_tensor")
        self.push("p1")
        self.assert_engine_holds(port, self.model, "p1")

    def test_tensor_larger_than_a_slot_travels_through_the_oversize_slot(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0])
        huge = [("huge", np.arange(400000, dtype=np.float32))]
        self.push("big", model=huge)
        self.assert_engine_holds(port, huge, "big")

    def test_a_gpu_wsyncd_has_no_device_for_is_refused_naming_it(self):
        port = self.start_engine("engine", [GPU0])
        uuid = "GPU-12345678-1234-1234-1234-123456789abc"
        out = self.ctl("create-group", "colo", "--transport", "ipc", "--engine",
                       f"http://127.0.0.1:{port}@{uuid}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("12345678-1234-1234-1234-123456789abc", out.stderr)
        self.assertIn("no device", out.stderr)
        out = self.ctl("create-group", "colo", "--transport", "ipc", "--engine",
                       f"http://127.0.0.1:{port}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("GPU UUID", out.stderr)

    def test_payload_names_the_ranks_own_gpu(self):
        # The engine's rank runs on device 1 but the group says device 0: the engine refuses the
        # payload as SGLang's rebuild would, and the update fails naming it.
        port = self.start_engine("engine", [GPU1])
        self.create_group("colo", port, [GPU0])
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("wrong-gpu")
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.assertIn("HTTP 400", e.exception.message)
        self.assertIn("is not this rank's GPU", self.engine_state(port)["last_error"])

    def test_engine_faults_fail_the_update_and_the_next_one_succeeds(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0])
        self.push("ok1")
        # HTTP 500 on the next update's second bucket.
        state = self.engine_state(port)
        self.knobs(port, fail_update_at=state["updates_received"] + 1)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("bad-500")
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.assertIn("500", e.exception.message)
        self.push("ok2")
        self.assert_engine_holds(port, self.model, "ok2")
        # A hang: the bucket deadline (3 s) ends it.
        state = self.engine_state(port)
        self.knobs(port, hang_update_at=state["updates_received"])
        start = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("hang")
        self.assertLess(time.time() - start, 10)
        self.assertEqual(e.exception.code_name, "DEADLINE_EXCEEDED")
        # The hung engine is replaced by a fresh one on the same port.
        self.procs["engine"].kill()
        self.procs["engine"].wait()
        self.start_engine("engine", [GPU0], port=port)
        self.push("ok3")
        self.assert_engine_holds(port, self.model, "ok3")
        # Death halfway through an update.
        self.knobs(port, die_at_update=self.engine_state(port)["updates_received"] + 1)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("dies")
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.start_engine("engine", [GPU0], port=port)
        self.push("ok4")
        self.assert_engine_holds(port, self.model, "ok4")
        self.assertIsNone(self.procs["wsyncd"].poll(), "wsyncd stays up")


class TpAcrossGpusTest(IpcFixture):
    """An engine whose 2 TP ranks are on 2 GPUs: one trainer rank per GPU, each pushing into its
    own GPU's slots; wsyncd joins their sessions by group and version into one update, and each
    engine rank maps only its own GPU's slots (the simulator refuses a slot of another device)."""

    def start_tp_engine(self):
        port = self.start_engine("engine", [GPU0, GPU1])
        self.create_group("tp", port, [GPU0, GPU1])
        return port

    def test_two_trainer_ranks_feed_one_update_and_every_rank_holds_the_bytes(self):
        port = self.start_tp_engine()
        for version in ("t1", "t2", "t3"):
            results = self.push_ranks([version, version])
            for r in results:
                self.assertIsInstance(r, dict, r)
                self.assertTrue(all(e["ok"] for e in r["engines"]), r)
            self.assertEqual(results[0]["update_id"], results[1]["update_id"], "one update")
            self.assertEqual(results[0]["buckets"], results[1]["buckets"])
            state = self.assert_engine_holds(port, self.model, version)
            self.assertEqual(sorted(state["ranks"]), ["1", "2"])
        # One request per bucket, carrying both ranks' payloads; each rank mapped its own GPU's
        # one slot allocation once.
        self.assertEqual(state["updates_received"], 3 * results[0]["buckets"])
        self.assertEqual(state["ipc_opens"], [1, 1])

    def test_a_rank_that_never_pushes_fails_the_bucket_at_its_deadline_naming_its_gpu(self):
        port = self.start_tp_engine()
        start = time.time()
        results = self.push_ranks(["lonely"], devices=(0,))
        self.assertIsInstance(results[0], wsync.WsyncError)
        self.assertEqual(results[0].code_name, "DEADLINE_EXCEEDED")
        self.assertIn(f"GPU {GPU1} (device 1)", results[0].message)
        self.assertIn("never joined", results[0].message)
        self.assertLess(time.time() - start, 15)
        state = self.engine_state(port)
        self.assertEqual(state["updates_received"], 0, "nothing of the bucket was sent")
        self.assertNotEqual(state["weight_version"], "lonely")
        # Both ranks again: the group recovers and the next update succeeds.
        self.push_ranks(["both", "both"])
        self.assert_engine_holds(port, self.model, "both")
        self.assertIsNone(self.procs["wsyncd"].poll(), "wsyncd stays up")

    def test_ranks_with_different_bucket_plans_are_refused_before_any_byte_moves(self):
        port = self.start_tp_engine()
        other = [(n, a[::-1].copy(), *rest) if n == "model.norm.weight" else (n, a, *rest)
                 for n, a, *rest in self.model]
        other.append(("model.extra", np.arange(7, dtype=np.float32)))
        results = self.push_ranks(["split", "split"], models=[self.model, other])
        errors = [r for r in results if isinstance(r, wsync.WsyncError)]
        self.assertEqual(len(errors), 2, results)
        self.assertTrue(any("same bucket plan" in e.message for e in errors), errors)
        self.assertNotEqual(self.engine_state(port)["weight_version"], "split")
        self.push_ranks(["after", "after"])
        self.assert_engine_holds(port, self.model, "after")

    def test_a_rank_that_aborts_ends_the_update_for_the_rank_waiting_on_it(self):
        port = self.start_tp_engine()
        big = [(f"w.{i}", np.full(200000, i, np.float32)) for i in range(10)]  # 10 slot fills

        def failing():
            yield big[0]
            yield big[1]
            time.sleep(0.5)
            raise RuntimeError("trainer rank 0 fails")

        results = [None, None]
        waited = [None]

        def rank(i, model):
            start = time.time()
            try:
                with wsync.Client("unix:" + self.sock, device=i, name=f"rank {i}") as client:
                    results[i] = client.push(model, version="broken", group="tp")
            except (wsync.WsyncError, RuntimeError) as e:
                results[i] = e
            if i == 1:
                waited[0] = time.time() - start

        threads = [threading.Thread(target=rank, args=(0, failing())),
                   threading.Thread(target=rank, args=(1, big))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        self.assertFalse(any(t.is_alive() for t in threads), "a rank hangs")
        self.assertIsInstance(results[1], wsync.WsyncError, results[1])
        self.assertLess(waited[0], 5, "rank 1 hears of rank 0's abort at once, not at a deadline")
        # Both ranks' slots are free again: the next update of both succeeds.
        self.push_ranks(["after-abort", "after-abort"])
        self.assert_engine_holds(port, self.model, "after-abort")

    def test_a_rank_with_another_version_is_refused_and_a_session_off_the_gpus_too(self):
        port = self.start_tp_engine()
        results = self.push_ranks(["va", "vb"])
        messages = " ".join(r.message for r in results if isinstance(r, wsync.WsyncError))
        self.assertIn("same version", messages)
        results = self.push_ranks(["v2"], devices=(2,))
        self.assertIsInstance(results[0], wsync.WsyncError)
        self.assertIn("holds slots of device 2", results[0].message)
        self.push_ranks(["ok", "ok"])
        self.assert_engine_holds(port, self.model, "ok")


def wsyncd_slot_segments(pid):
    """The shared-memory slots a host-mode wsyncd holds (named /wsync-<pid>-d<device>-...)."""
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(f"wsync-{pid}-d"))


class MemoryOnDemandTest(IpcFixture):
    """Colocated training takes its GPU memory back between updates: with --release-idle-slots
    the slots of a device are freed when its last session closes and made anew by the next."""

    WSYNCD_FLAGS = ["--release-idle-slots"]

    def buffers(self):
        out = self.ctl("--json", "buffers")
        self.assertEqual(out.returncode, 0, out.stderr)
        return {d.get("device", 0): d for d in json.loads(out.stdout).get("devices", [])}

    def test_slots_are_freed_between_updates_and_made_anew(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0])
        pid = self.procs["wsyncd"].pid
        for i, version in enumerate(("m1", "m2", "m3")):
            with wsync.Client("unix:" + self.sock, device=0, name="trainer") as client:
                held = self.buffers()[0]
                self.assertGreaterEqual(int(held["bytes_held"]), 2 << 20, held)
                self.assertEqual(len(wsyncd_slot_segments(pid)), 1, "one allocation per device")
                client.push(self.model, version=version, group="colo")
            # The session closed: the device's memory is back, and wsyncctl shows it.
            released = self.buffers()[0]
            self.assertEqual(int(released["bytes_held"]), 0, "nothing held once released")
            self.assertEqual(int(released["releases"]), i + 1)
            self.assertEqual(int(released["allocations"]), i + 1)
            self.assertEqual(wsyncd_slot_segments(pid), [])
            self.assert_engine_holds(port, self.model, version)
        # New slots each time: the engine mapped a fresh allocation per update.
        self.assertEqual(self.engine_state(port)["ipc_opens"], [3])

    def test_an_operator_release_keeps_held_slots_and_frees_idle_ones(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0])
        with wsync.Client("unix:" + self.sock, device=0, name="trainer"):
            out = self.ctl("release-buffers")
            self.assertEqual(out.returncode, 1, "a held device is kept and said so")
            self.assertIn("kept: device 0 (session", out.stdout)
            self.assertGreaterEqual(int(self.buffers()[0]["bytes_held"]), 2 << 20)
        out = self.ctl("release-buffers", "--device", "0")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.push("after-release")
        self.assert_engine_holds(port, self.model, "after-release")


class EngineMemoryTest(IpcFixture):
    """SGLang memory "resume": training releases the engine's memory before each update; wsyncd
    resumes the weights before the buckets and the KV cache after the commit."""

    def release(self, port):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/release_memory_occupation",
                                     data=json.dumps({"tags": None}).encode(), method="POST")
        urllib.request.urlopen(req).read()

    def test_weights_resumed_before_the_buckets_and_kv_cache_after_the_commit(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0], "--sglang-memory", "resume")
        for version in ("r1", "r2"):
            self.release(port)
            self.push(version)
            state = self.assert_engine_holds(port, self.model, version)
            self.assertEqual(state["offload_tags"], ["cuda_graph"],
                             "weights and KV cache resumed; the graphs stay with their releaser")
        self.assertEqual(state["memory_calls"][-3:], [
            ["release_memory_occupation", None],
            ["resume_memory_occupation", ["weights"]],
            ["resume_memory_occupation", ["kv_cache"]]])
        # Not released before the update: SGLang refuses to resume what it holds, and the error
        # says what the mode needs; wsyncd stays up and the next released cycle succeeds.
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("not-released")
        self.assertIn("must be released", e.exception.message)
        self.release(port)
        self.push("r3")
        self.assert_engine_holds(port, self.model, "r3")

    def test_a_failed_weights_resume_keeps_the_engine_paused_and_commit_failures_resume_it(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0], "--sglang-memory", "resume")
        # Not released: SGLang refuses to resume the weights, and wsyncd cannot tell that from a
        # resume that failed with the memory gone, so the engine stays paused.
        with self.assertRaises(wsync.WsyncError):
            self.push("unknown")
        self.assertTrue(self.engine_state(port)["paused"], "no generation on memory maybe gone")
        # The operator's resume goes through; the next released cycle succeeds.
        out = self.ctl("resume-engine", "colo", "--engine", f"http://127.0.0.1:{port}")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertFalse(self.engine_state(port)["paused"])
        self.release(port)
        self.push("r1")
        state = self.assert_engine_holds(port, self.model, "r1")
        self.assertFalse(state["paused"])

    def test_keep_leaves_the_engines_memory_alone(self):
        port = self.start_engine("engine", [GPU0])
        self.create_group("colo", port, [GPU0])
        self.push("k1")
        self.assertEqual(self.engine_state(port)["memory_calls"], [])
        # Released by someone else while wsyncd keeps it: the load fails naming the engine.
        self.release(port)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("k2")
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)


if __name__ == "__main__":
    unittest.main()
