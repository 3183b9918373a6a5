"""The Python client (ctypes over libwsync_client.so) against real wsyncd and simulator processes.

Usage: python_client_test.py WSYNCD SGLANG_SIM WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR
                             LMDEPLOY_ENGINE
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import weakref
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import child_environment, free_port, state_environment  # noqa: E402
from process_support import sglang_engine, wait_port  # noqa: E402

child_environment()

WSYNCD, SIM, CTL, LIB, PKG, LMDEPLOY = sys.argv[1:7]
del sys.argv[1:7]
SIM = sglang_engine(SIM)
os.environ["WSYNC_CLIENT_LIB"] = LIB
sys.path.insert(0, PKG)

import numpy as np  # noqa: E402
import wsync  # noqa: E402




class SimFixture(unittest.TestCase):
    """wsyncd (host mode, 1 MiB slots), a 2-rank engine (ENGINE: SGLang's simulator) with
    SIM_FLAGS and a group on it."""

    ENGINE = None  # argv before --port; None: [*SIM, "--tp", "2"]
    SIM_FLAGS = []
    BUCKET_TIMEOUT = "10"
    GROUP_FLAGS = []

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-py-")
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        self.procs = []
        self.port = free_port()
        engine = self.ENGINE or [*SIM, "--tp", "2"]
        self.spawn([*engine, "--port", str(self.port), *self.SIM_FLAGS], "sim.log")
        wait_port(self.port)
        self.spawn([WSYNCD, "--mode", "host", "--socket", self.sock, "--slot-bytes", "1MiB",
                    "--bind-address", "127.0.0.1", "--bucket-timeout", self.BUCKET_TIMEOUT],
                   "wsyncd.log")
        deadline = time.time() + 10
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)
        subprocess.run([CTL, "--socket", self.sock, "create-group", "policy", "--engine",
                        f"http://127.0.0.1:{self.port}#2", *self.GROUP_FLAGS], check=True,
                       capture_output=True)

    def spawn(self, argv, log):
        with open(os.path.join(self.dir, log), "w") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               env=state_environment(self.dir)))

    def tearDown(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=20)

    def engine_checksums(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/sim/checksums") as r:
            return json.loads(r.read())


class PythonClientTest(SimFixture):
    def test_push_numpy_model_and_every_rank_holds_its_bytes(self):
        rng = np.random.default_rng(3)
        bf16_bits = rng.integers(0, 2**16, size=(300, 700), dtype=np.uint16)
        model = [
            ("model.embed_tokens.weight", bf16_bits, "bfloat16"),
            ("model.norm.weight", rng.standard_normal(1001).astype(np.float32)),
            ("model.layers.0.step", np.arange(5, dtype=np.int64)),
            ("lm_head.weight", rng.standard_normal((256, 513)).astype(np.float32)),
        ]
        seen = []
        with wsync.Client("unix:" + self.sock, device=0, name="python test") as client:
            self.assertEqual(client.slot_bytes, 1 << 20)
            result = client.push(model, version="py-1", group="policy", progress=seen.append)
        self.assertGreaterEqual(result["buckets"], 2)
        self.assertEqual(len(seen), result["buckets"])
        self.assertEqual(seen[-1]["bytes_done"], seen[-1]["bytes_total"])
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        state = self.engine_checksums()
        self.assertEqual(state["weight_version"], "py-1")
        self.assertEqual(sorted(state["ranks"]), ["1", "2"])
        for rank, tensors in state["ranks"].items():
            for item in model:
                # zlib.crc32 is computed independently of the C++ side here.
                expect = format(zlib.crc32(np.ascontiguousarray(item[1]).tobytes()), "08x")
                self.assertEqual(tensors[item[0]], expect, f"rank {rank} {item[0]}")

    def test_state_dict_and_errors(self):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            result = client.push({"w": np.ones((4, 4), np.float16)}, version=2, group="policy")
            self.assertEqual(result["buckets"], 1)
            self.assertEqual((result["buckets_pulled"], result["buckets_read_in_place"]), (0, 0))
            # Pull mode asked for memory wsyncd cannot map (a numpy array): copied as usual.
            result = client.push({"w": np.ones((4, 4), np.float16)}, version=2, group="policy",
                                 pull=True)
            self.assertEqual((result["buckets"], result["buckets_pulled"]), (1, 0))
            self.assertEqual(client.release_sources(), 0, "nothing of this process was mapped")
            with self.assertRaises(wsync.WsyncError) as e:
                client.push({"w": np.ones(4, np.float32)}, version=3, group="nope")
            self.assertEqual(e.exception.code_name, "NOT_FOUND")
            self.assertIn("unknown group 'nope'", e.exception.message)
            # Larger than a 1 MiB slot: it travels alone through the oversize slot.
            huge = np.arange(300000, dtype=np.float32)
            result = client.push({"huge": huge}, version=4, group="policy")
            self.assertEqual(result["bytes"], huge.nbytes)
            for held in self.engine_checksums()["ranks"].values():
                self.assertEqual(held["huge"], format(zlib.crc32(huge.tobytes()), "08x"))
            with self.assertRaises(wsync.WsyncError) as e:
                client.push({"c": np.zeros(4, np.complex64)}, version=5, group="policy")
            self.assertIn("no torch equivalent", e.exception.message)
        self.assertEqual(self.engine_checksums()["weight_version"], "4")

    def test_generator_is_streamed_and_tensors_are_let_go_bucket_by_bucket(self):
        # 40 tensors of 256 KiB (10 MiB) through 1 MiB slots: each array must be dropped once
        # its bucket is in a slot, not kept until the end.
        alive, most_alive, crcs = set(), [0], {}

        def tensors():
            for i in range(40):
                a = np.full(65536, i, dtype=np.float32)
                crcs[f"layer.{i}"] = format(zlib.crc32(a.tobytes()), "08x")
                alive.add(i)
                weakref.finalize(a, alive.discard, i)
                most_alive[0] = max(most_alive[0], len(alive))
                yield f"layer.{i}", a

        with wsync.Client("unix:" + self.sock, device=0) as client:
            result = client.push(tensors(), version="stream", group="policy")
        self.assertEqual(result["bytes"], 40 * 65536 * 4)
        self.assertLessEqual(most_alive[0], 8, "the client held tensors it had already copied")
        state = self.engine_checksums()
        for rank, held in state["ranks"].items():
            for name, crc in crcs.items():
                self.assertEqual(held[name], crc, f"rank {rank} {name}")

    def test_caller_exception_mid_stream_aborts_the_update(self):
        def tensors():
            for i in range(12):
                yield f"t{i}", np.full(65536, i, dtype=np.float32)
            raise RuntimeError("trainer bug")

        with wsync.Client("unix:" + self.sock, device=0) as client:
            client.push({"w": np.ones(4, np.float32)}, version="before", group="policy")
            with self.assertRaisesRegex(RuntimeError, "trainer bug"):
                client.push(tensors(), version="broken", group="policy")
        self.assertEqual(self.engine_checksums()["weight_version"], "before")
        listing = subprocess.run([CTL, "--socket", self.sock, "--json", "updates"], check=True,
                                 capture_output=True, text=True).stdout
        self.assertIn("the Python caller raised", listing)

    def test_a_trainer_killed_with_its_session_open_gives_its_slots_back_at_once(self):
        trainer = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time; sys.path.insert(0, sys.argv[1]); import wsync;"
             "c = wsync.Client('unix:' + sys.argv[2], name='doomed'); print('open', flush=True);"
             "time.sleep(60)", PKG, self.sock],
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, WSYNC_CLIENT_LIB=LIB))
        self.assertEqual(trainer.stdout.readline().strip(), "open")

        def owners():
            out = subprocess.run([CTL, "--socket", self.sock, "--json", "buffers"], check=True,
                                 capture_output=True, text=True).stdout
            return [b.get("owner_session", "") for b in json.loads(out).get("buffers", [])]

        self.assertTrue(any(owners()), "the session holds the device's slots")
        trainer.kill()  # no CloseSession: as a crash or an OOM kill ends a trainer
        trainer.wait()
        killed = time.time()
        while any(owners()) and time.time() - killed < 10:
            time.sleep(0.1)
        freed_after = time.time() - killed
        self.assertFalse(any(owners()), "slots still held 10 s after the trainer died")
        self.assertLess(freed_after, 5, "freed by the lease (60 s), not by the disconnect")
        # And another trainer can take them.
        with wsync.Client("unix:" + self.sock) as c:
            self.assertEqual(c.slot_bytes, 1 << 20)

    def test_the_bar_fills_by_the_plan_or_the_known_bytes_never_by_bytes_added_so_far(self):
        model = {f"w{i}": np.full(200_000, i, np.float32) for i in range(6)}  # 0.8 MB each
        total = sum(a.nbytes for a in model.values())
        seen = []
        with wsync.Client("unix:" + self.sock, device=0) as client:
            result = client.push(model, version="bar", group="policy", progress=seen.append)
        self.assertGreater(result["buckets"], 2)
        for p in seen[:-1]:
            self.assertEqual(p["bytes_expected"], total)
            bar = wsync.progress_bar(p, width=10)
            self.assertNotIn("[##########]", bar, "full before the last bucket")
        self.assertIn(f"bucket {result['buckets']}/{result['buckets']}",
                      wsync.progress_bar(seen[-1]))
        # A stream still being fed: its bytes so far are no total, so none is made up.
        self.assertEqual(
            wsync.progress_bar({"buckets_done": 3, "buckets_total": 0, "bytes_done": 3 << 30,
                                "bytes_total": 3 << 30, "bytes_expected": 0,
                                "gib_per_second": 1.0}, width=8),
            "[........] bucket 3/?  3.00/? GiB  1.00 GiB/s")
        self.assertEqual(
            wsync.progress_bar({"buckets_done": 1, "buckets_total": 0, "bytes_done": 1 << 30,
                                "bytes_total": 1 << 30, "bytes_expected": 4 << 30,
                                "gib_per_second": 1.0}, width=8),
            "[##......] bucket 1/?  1.00/4.00 GiB  1.00 GiB/s")

    def test_a_missing_version_and_a_target_without_a_scheme_are_refused_at_once(self):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            for version in (None, "", True, 1.5):
                with self.assertRaises(wsync.WsyncError) as e:
                    client.push({"w": np.ones(4, np.float32)}, version=version, group="policy")
                self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
                self.assertIn("version must be a non-empty string", e.exception.message)
        self.assertNotIn(self.engine_checksums()["weight_version"], ("None", "", "True", "1.5"))
        started = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            wsync.Client(self.sock, timeout=5)
        self.assertLess(time.time() - started, 1.0, "refused, not timed out")
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn(f"target '{self.sock}' names no scheme: a unix socket is 'unix:{self.sock}'",
                      e.exception.message)

    def test_no_daemon_is_a_clear_error(self):
        with self.assertRaises(wsync.WsyncError) as e:
            wsync.Client("unix:" + os.path.join(self.dir, "none.sock"), timeout=0.5)
        self.assertEqual(e.exception.code_name, "UNAVAILABLE")
        self.assertIn("wsyncd is not answering", e.exception.message)



class DeclaredGroupTest(SimFixture):
    """Groups a trainer declares for engines it started, under its session."""

    def start_engine(self, tp=1):
        port = free_port()
        self.spawn([*SIM, "--tp", str(tp), "--port", str(port)], f"sim-{port}.log")
        wait_port(port)
        return port

    def state_of(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            return json.loads(r.read())

    def groups(self):
        out = subprocess.run([CTL, "--socket", self.sock, "--json", "groups"], check=True,
                             capture_output=True, text=True).stdout
        return {g["spec"]["name"]: g for g in json.loads(out).get("groups", [])}

    def test_a_trainers_group_is_declared_once_reformed_when_changed_and_ends_with_it(self):
        a, b = self.start_engine(), self.start_engine()
        model = [("w", np.arange(1000, dtype=np.float32))]
        spec = {"name": "mine", "kind": "sglang",
                "engines": [{"url": f"http://127.0.0.1:{a}", "ranks": 1}]}
        with wsync.Client("unix:" + self.sock, device=0, name="declaring") as client:
            self.assertTrue(client.declare_group(spec))
            self.assertFalse(client.declare_group(spec), "the same declaration is a no-op")
            client.push(model, version="d1", group="mine")
            self.assertEqual(self.state_of(a)["weight_version"], "d1")
            # Another engine: the group forms anew with both, between updates.
            spec["engines"].append({"url": f"http://127.0.0.1:{b}", "ranks": 1})
            self.assertTrue(client.declare_group(spec))
            client.push(model, version="d2", group="mine")
            for port in (a, b):
                self.assertEqual(self.state_of(port)["weight_version"], "d2")
            # Another session may not take it, nor may this one take the operator's group.
            with wsync.Client("unix:" + self.sock, device=1, name="other") as other:
                with self.assertRaises(wsync.WsyncError) as e:
                    other.declare_group(spec)
                self.assertEqual(e.exception.code_name, "ALREADY_EXISTS")
                self.assertIn("was declared by another session", e.exception.message)
            with self.assertRaises(wsync.WsyncError) as e:
                client.declare_group(dict(spec, name="policy"))
            self.assertEqual(e.exception.code_name, "ALREADY_EXISTS")
            self.assertIn("is wsyncd's own (from its config or an operator)", e.exception.message)
            self.assertIn("mine", self.groups())
            self.assertNotEqual(self.state_of(b)["group"], "")
        # The session ended: so did its group, and its engines dropped theirs.
        self.assertNotIn("mine", self.groups())
        self.assertIn("policy", self.groups(), "the operator's group stays")
        for port in (a, b):
            self.assertEqual(self.state_of(port)["group"], "")

    def test_a_group_declaration_is_checked_as_the_config_file_is(self):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            with self.assertRaises(wsync.WsyncError) as e:
                client.declare_group({"name": "typo", "engines": [
                    {"url": "http://127.0.0.1:1", "rank": 4}]})
            self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
            self.assertIn('group_json.engines[0].rank: unknown key; did you mean "ranks"?',
                          e.exception.message)
            # Outside engine_networks (loopback by default): refused before any request.
            with self.assertRaises(wsync.WsyncError) as e:
                client.declare_group({"name": "far", "engines": [{"url": "http://10.9.9.9:1"}]})
            self.assertEqual(e.exception.code_name, "PERMISSION_DENIED")
            with self.assertRaises(wsync.WsyncError) as e:
                client.forget_group("policy")
            self.assertEqual(e.exception.code_name, "NOT_FOUND")


class SessionBuildTest(SimFixture):
    """The broadcast path against a session build of SGLang (--sessions): every update
    inside /begin_weight_update {"selector": "all"} ... /end_weight_update, every bucket request
    with the selector; an update outside a session, or a second begin, would kill the simulator as
    the scheduler's assert kills SGLang."""

    SIM_FLAGS = ["--sessions"]
    BUCKET_TIMEOUT = "3"

    def knobs(self, **knobs):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/sim/knobs",
                                     data=json.dumps(knobs).encode(), method="POST")
        urllib.request.urlopen(req).read()

    def test_every_update_sits_inside_a_session_and_a_failed_one_ends_its_own(self):
        rng = np.random.default_rng(5)
        model = [(f"w{i}", rng.standard_normal(100000).astype(np.float32)) for i in range(6)]
        with wsync.Client("unix:" + self.sock, device=0) as client:
            for version in ("s1", "s2"):
                result = client.push(model, version=version, group="policy")
                state = self.engine_checksums()
                self.assertEqual(state["weight_version"], version)
                for tensors in state["ranks"].values():
                    for name, array in model:
                        self.assertEqual(tensors[name], format(zlib.crc32(array.tobytes()), "08x"))
            buckets = result["buckets"]
            self.assertGreater(buckets, 1)
            one = ["begin all"] + ["update selector=all"] * buckets + ["end"]
            self.assertEqual(state["session_log"], one * 2)
            self.assertFalse(state["session_open"])
            # The second bucket fails: the session is ended all the same, and the next update
            # begins a fresh one (a second begin would have killed the engine).
            self.knobs(fail_update_at=state["updates_received"] + 1)
            with self.assertRaises(wsync.WsyncError):
                client.push(model, version="s3", group="policy")
            state = self.engine_checksums()
            self.assertFalse(state["session_open"])
            self.assertEqual(state["session_log"][-1], "end")
            # It holds the first bucket of s3: it stays paused until a complete version.
            self.assertTrue(state["paused"])
            client.push(model, version="s4", group="policy")
        state = self.engine_checksums()
        self.assertEqual(state["weight_version"], "s4")
        self.assertEqual(state["session_log"][-(buckets + 2):], one)


class SessionBuildWithoutDocsTest(SessionBuildTest):
    """The same server started without its OpenAPI document: the sessions are found by the route's
    405 to a GET."""

    SIM_FLAGS = ["--sessions", "--no-docs"]


class NoSessionsTest(SimFixture):
    """A build without sessions: no begin or end, no selector (nothing is logged)."""

    def test_updates_are_sent_without_a_session(self):
        model = [("w", np.ones(300000, np.float32))]
        with wsync.Client("unix:" + self.sock, device=0) as client:
            client.push(model, version="n1", group="policy")
        state = self.engine_checksums()
        self.assertEqual(state["weight_version"], "n1")
        self.assertEqual(state["session_log"], [])


class LmdeployNcclTest(SimFixture):
    """LMDeploy over NCCL (PR #4638) against lmdeploy_engine.py on host memory, 2 TP ranks:
    group_name on every route, flattened buckets of one dtype each (the planner cuts them so; the
    simulator refuses mixed dtypes as FlattenedTensorBucket does), `finished` once per update on
    the trainer's last bucket, and the sleep/wake cut around it."""

    ENGINE = [sys.executable, LMDEPLOY, "--memory", "host", "--gpus", "0,1"]
    GROUP_FLAGS = ["--kind", "lmdeploy"]

    def model(self, seed):
        rng = np.random.default_rng(seed)
        return [
            ("model.embed_tokens.weight",
             rng.integers(0, 2**16, size=(300, 700), dtype=np.uint16), "bfloat16"),
            ("model.norm.weight", rng.standard_normal(1001).astype(np.float32)),
            ("model.layers.0.step", np.arange(5, dtype=np.int64)),
            ("lm_head.weight", rng.standard_normal((256, 513)).astype(np.float32)),
            ("model.layers.0.bias", rng.integers(0, 2**16, size=(4099,), dtype=np.uint16),
             "bfloat16"),
        ]

    def check(self, model):
        state = self.engine_checksums()
        self.assertEqual(sorted(state["ranks"]), ["1", "2"])
        for rank, tensors in state["ranks"].items():
            for item in model:
                expect = format(zlib.crc32(np.ascontiguousarray(item[1]).tobytes()), "08x")
                self.assertEqual(tensors[item[0]], expect, f"rank {rank} {item[0]}")
        return state

    def test_every_rank_holds_the_bytes_and_each_update_finishes_once(self):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            for n in (1, 2, 3):
                model = self.model(n)
                result = client.push(model, version=f"l{n}", group="policy")
                self.assertTrue(all(e["ok"] for e in result["engines"]), result)
                self.assertGreaterEqual(result["buckets"], 4, "one dtype per bucket")
                state = self.check(model)
                self.assertEqual(state["finished_calls"], n)
        self.assertEqual([e for e in state["events"] if e.startswith(("sleep", "wakeup"))],
                         ["sleep:1", "wakeup:weights", "wakeup:kv_cache"] * 3)
        self.assertFalse(state["is_sleeping"])
        # group_name on every route: the group's name, wsyncd's incarnation and a secret token.
        self.assertRegex(state["group"], r"^policy\.[0-9a-f]{8}\.[0-9a-f]{32}$")
        # No version route: the routes the probe read stand in for one.
        listed = subprocess.run([CTL, "--socket", self.sock, "--json", "engines"],
                                capture_output=True, text=True)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        engine = json.loads(listed.stdout)["engines"][0]
        self.assertEqual((engine["kind"], engine["engine_version"], engine["variant"]),
                         ("lmdeploy", "routes of PR #4638", "nccl flattened_bucket"))


class LmdeployNcclPerTensorTest(LmdeployNcclTest):
    """load_format null: one broadcast per tensor, so a bucket may mix dtypes."""

    GROUP_FLAGS = ["--kind", "lmdeploy", "--load-format", "per_tensor"]

    def test_every_rank_holds_the_bytes_and_each_update_finishes_once(self):
        model = self.model(9)
        with wsync.Client("unix:" + self.sock, device=0) as client:
            result = client.push(model, version="p1", group="policy")
        self.assertLess(result["buckets"], 4, "dtypes share buckets")
        self.assertEqual(self.check(model)["finished_calls"], 1)


class LmdeployOtherBackendTest(unittest.TestCase):
    def test_a_backend_answering_501_is_refused_at_creation_naming_it(self):
        tmp = tempfile.mkdtemp(prefix="wsync-py-")
        sock = os.path.join(tmp, "wsyncd.sock")
        port = free_port()
        procs = []
        try:
            for argv, log in (([sys.executable, LMDEPLOY, "--memory", "host", "--gpus", "0",
                                "--port", str(port), "--backend-501"], "sim.log"),
                              ([WSYNCD, "--mode", "host", "--socket", sock, "--bind-address",
                                "127.0.0.1"], "wsyncd.log")):
                with open(os.path.join(tmp, log), "w") as out:
                    procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                  env=state_environment(tmp)))
            wait_port(port)
            deadline = time.time() + 10
            while not os.path.exists(sock) and time.time() < deadline:
                time.sleep(0.02)
            out = subprocess.run([CTL, "--socket", sock, "create-group", "policy", "--kind",
                                  "lmdeploy", "--engine", f"http://127.0.0.1:{port}"],
                                 capture_output=True, text=True)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("answered HTTP 501", out.stderr)
            self.assertIn("pytorch backend", out.stderr)
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=20)


if __name__ == "__main__":
    unittest.main(verbosity=2)
