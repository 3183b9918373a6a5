"""vLLM's colocated path end to end in host mode: real wsyncd, wsyncctl and Python client
processes against tests/engines/vllm/vllm_engine.py on host memory, which loads each bucket from
wsyncd's slots as vLLM's IPC weight-transfer engine does, in the generation its GET /version
names.

Usage: vllm_ipc_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR VLLM_ENGINE
"""

import json
import os
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments, crc, free_port,  # noqa: E402
                             host_gpu, wait_port)

_, _, _, _, SIM = client_test_arguments()

import numpy as np  # noqa: E402
import wsync  # noqa: E402

# Both TP ranks of a test engine sit on device 0 (two ranks sharing a GPU).
GPU0 = host_gpu(0)


def lifecycle(requests):
    """The weight-transfer calls in order, as 'POST /path?query' (reads and /sim left out)."""
    return [f"{r['method']} {r['path']}" for r in requests if r["method"] == "POST"]


class VllmIpcTest(HostWsyncdCase):
    def setUp(self):
        super().setUp()
        self.model = self.make_model(11)

    @staticmethod
    def make_model(seed):
        rng = np.random.default_rng(seed)
        # Mixed dtypes, interleaved; large enough for several 1 MiB buckets.
        return [
            ("model.embed_tokens.weight", rng.integers(0, 2**16, (300, 700), dtype=np.uint16),
             "bfloat16"),
            ("model.norm.weight", rng.standard_normal(1001).astype(np.float32)),
            ("model.layers.0.mlp.weight", rng.integers(0, 2**16, (512, 513), dtype=np.uint16),
             "bfloat16"),
            ("model.layers.0.step", np.arange(5, dtype=np.int64)),
            ("model.layers.0.scale", rng.standard_normal(77).astype(np.float32)),
        ]

    def start_engine(self, version, ranks=2, port=None, extra=()):
        port = port or free_port()
        self.spawn("engine", [sys.executable, SIM, "--memory", "host", "--port", str(port),
                              "--gpus", ",".join([GPU0] * ranks), "--version", version, *extra])
        wait_port(port)
        return port

    def create_group(self, port, *extra, ranks=2, transport="ipc"):
        return self.ctl("create-group", "colo", "--kind", "vllm", "--transport", transport,
                        "--engine", f"http://127.0.0.1:{port}#{ranks}@{','.join([GPU0] * ranks)}",
                        *extra)

    def state(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/state") as r:
            return json.loads(r.read())

    def knobs(self, port, **knobs):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/sim/knobs",
                                     data=json.dumps(knobs).encode(), method="POST")
        urllib.request.urlopen(req).read()

    def post(self, port, path):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"", method="POST")
        urllib.request.urlopen(req).read()

    def push(self, version, model=None):
        with wsync.Client("unix:" + self.sock, device=0, name="vllm test") as client:
            return client.push(model or self.model, version=version, group="colo")

    def assert_engine_holds(self, port, model, ranks=2):
        state = self.state(port)
        self.assertFalse(state["dead"], state["last_error"])
        self.assertEqual(len(state["ranks"]), ranks)
        for rank, tensors in state["ranks"].items():
            for item in model:
                self.assertEqual(tensors.get(item[0]), crc(item[1]), f"rank {rank} {item[0]}")
        return state

    def three_versions(self, port, *, sessions, weight_version, packed):
        """Pushes v1..v3 (new bytes each time) and checks every rank's bytes and every call."""
        seen = len(self.state(port)["requests"])  # the group's formation: version, init
        for n in range(1, 4):
            model = self.make_model(100 + n)
            result = self.push(f"v{n}", model)
            self.assertTrue(all(e["ok"] for e in result["engines"]), result)
            self.assertGreaterEqual(result["buckets"], 2, "the model spans several buckets")
            state = self.assert_engine_holds(port, model)
            calls = lifecycle(state["requests"][seen:])
            seen = len(state["requests"])
            updates = ["POST /update_weights"] * result["buckets"]
            expect = ["POST /pause?mode=keep"]
            expect += ["POST /start_weight_update"] if sessions else []
            expect += updates
            expect += ["POST /finish_weight_update"] if sessions else []
            expect += ["POST /reset_prefix_cache", "POST /resume"]
            self.assertEqual(calls, expect, f"version {n}")
            posted = [r for r in state["requests"] if r["method"] == "POST"]
            bodies = [r["body"] for r in posted if r["path"] == "/update_weights"][-result["buckets"]:]
            for i, body in enumerate(bodies):
                info = body["update_info"]
                self.assertEqual(info.get("packed", False), packed)
                if packed:
                    self.assertEqual(info["first_chunk"], i == 0)
                    self.assertEqual(sum(info["tensor_sizes"]) > 0, True)
            if sessions:
                finish = [r for r in posted if r["path"] == "/finish_weight_update"][-1]
                self.assertEqual(finish["body"],
                                 {"weight_version": f"v{n}"} if weight_version else None)
            self.assertEqual(state["weight_version"], f"v{n}" if weight_version else None)
            self.assertFalse(state["paused"])
            self.assertFalse(state["session_open"])
        # Persistent slots: each rank maps each slot once, across all three versions.
        self.assertTrue(all(1 <= o <= 2 for o in state["ipc_opens"]), state["ipc_opens"])

    def test_newest_build_unpacked_args_only_with_weight_version(self):
        port = self.start_engine("0.29.0")
        out = self.create_group(port)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.three_versions(port, sessions=True, weight_version=True, packed=False)
        init = [r for r in self.state(port)["requests"]
                if r["path"] == "/init_weight_transfer_engine"]
        self.assertEqual(init[0]["body"], {"init_info": {}})
        self.assert_engine_shown("vllm", "0.29.0", "ipc-args-session-version")
        listed = json.loads(self.ctl("--json", "group", "colo").stdout)
        self.assertEqual(listed["spec"]["kind"], "ENGINE_KIND_VLLM")
        self.assertIn("vllm", listed["spec"])

    def test_packed_chunks_on_a_0_22_build_without_weight_version(self):
        port = self.start_engine("0.22.1")
        out = self.create_group(port, "--vllm-packed")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.three_versions(port, sessions=True, weight_version=False, packed=True)

    def test_an_older_build_gets_func_args_pairs_and_no_session(self):
        # The simulator of 0.18 unpacks (func, args) and has no session routes (404): a wrong
        # entry form or a start call would fail the update.
        port = self.start_engine("0.18.0")
        out = self.create_group(port)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.three_versions(port, sessions=False, weight_version=False, packed=False)
        self.assert_engine_shown("vllm", "0.18.0", "ipc-func-args")

    def test_packed_on_a_build_without_packed_ipc_is_refused_at_creation(self):
        port = self.start_engine("0.20.0")
        out = self.create_group(port, "--vllm-packed")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("vLLM 0.20.0 reads no packed IPC updates", out.stderr)

    def test_a_server_too_old_for_ipc_is_refused_naming_both_versions(self):
        port = self.start_engine("0.16.0")
        out = self.create_group(port)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("vLLM 0.16.0 is read as older than 0.17.0", out.stderr)
        self.assertIn(">= 0.17.0", out.stderr)
        self.assertEqual(lifecycle(self.state(port)["requests"]), [], "nothing was posted")

    def test_a_409_fails_the_update_as_aborted_and_the_next_one_succeeds(self):
        port = self.start_engine("0.29.0")
        self.assertEqual(self.create_group(port).returncode, 0)
        self.push("ok1")
        self.knobs(port, conflict_update_at=self.state(port)["updates_received"] + 1)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("conflict")
        self.assertEqual(e.exception.code_name, "ABORTED")
        self.assertIn(f"http://127.0.0.1:{port}/update_weights answered HTTP 409",
                      e.exception.message)
        self.assertIn("push the whole version again", e.exception.message)
        state = self.state(port)
        self.assertFalse(state["session_open"], "the session was finished best-effort")
        self.assertTrue(state["paused"], "it took a bucket of the failed version")
        self.assertEqual(state["weight_version"], "ok1", "the failed version is not recorded")
        self.push("ok2")
        self.assert_engine_holds(port, self.model)
        self.assertEqual(self.state(port)["weight_version"], "ok2")

    def test_engine_faults_fail_the_update_naming_the_engine_and_wsyncd_stays_up(self):
        port = self.start_engine("0.29.0")
        self.assertEqual(self.create_group(port).returncode, 0)
        self.push("ok1")
        self.knobs(port, fail_update_at=self.state(port)["updates_received"] + 1)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("bad-500")
        self.assertEqual(e.exception.code_name, "ABORTED")
        self.assertIn(f"http://127.0.0.1:{port}/update_weights answered HTTP 500",
                      e.exception.message)
        self.assertIn("push the whole version again", e.exception.message)
        self.push("ok2")
        self.assert_engine_holds(port, self.model)
        # Death halfway through an update; a fresh engine on the same port takes the next one.
        self.knobs(port, die_at_update=self.state(port)["updates_received"] + 1)
        start = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("dies")
        self.assertLess(time.time() - start, 10)
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.procs["engine"].wait()
        self.assertIsNone(self.procs["wsyncd"].poll(), "wsyncd stays up")
        self.start_engine("0.29.0", port=port)
        model = self.make_model(7)
        self.push("ok3", model)
        state = self.assert_engine_holds(port, model)
        self.assertEqual(state["weight_version"], "ok3")
        self.assertEqual(lifecycle(state["requests"])[0], "POST /init_weight_transfer_engine",
                         "the group formed again on the new engine")

    def test_a_sleeping_engine_is_refused_or_woken_as_the_group_says(self):
        port = self.start_engine("0.29.0")
        self.assertEqual(self.create_group(port).returncode, 0)
        self.post(port, "/sleep?level=1")
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("asleep")
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("is asleep", e.exception.message)
        state = self.state(port)
        self.assertFalse(state["dead"], "nothing reached the sleeping engine")
        self.assertEqual(state["updates_received"], 0)
        self.assertEqual(self.ctl("destroy-group", "colo").returncode, 0)
        out = self.create_group(port, "--vllm-wake-weights")
        self.assertEqual(out.returncode, 0, out.stderr)
        before = len(self.state(port)["requests"])
        self.push("woken")
        state = self.assert_engine_holds(port, self.model)
        calls = lifecycle(state["requests"][before:])
        self.assertEqual(calls[:3], ["POST /pause?mode=keep", "POST /wake_up?tags=weights",
                                     "POST /start_weight_update"])
        self.assertEqual(calls[-3:], ["POST /reset_prefix_cache", "POST /wake_up?tags=kv_cache",
                                      "POST /resume"])
        self.assertEqual(state["sleeping_tags"], [])

    def test_a_broadcast_group_on_a_server_without_the_nccl_routes_names_the_flags(self):
        # A server that serves no /get_world_size (vLLM's dev-mode route).
        port = self.start_engine("0.29.0", extra=["--no-world-size"])
        out = self.ctl("create-group", "disagg", "--kind", "vllm", "--engine",
                       f"http://127.0.0.1:{port}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("/get_world_size?include_dp=true answered HTTP 404", out.stderr)
        self.assertIn("\"backend\": \"nccl\"", out.stderr)


if __name__ == "__main__":
    unittest.main()
