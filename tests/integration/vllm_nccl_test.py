"""vLLM's NCCL weight transfer against real wsyncd (host mode) and vLLM's simulator
(tests/engines/vllm/vllm_engine.py --backend nccl on host memory) processes: both rendezvous
modes, packed and unpacked, each generation's field placement, the calls around an update in
order, 409s, and the version gates.

Usage: vllm_nccl_test.py WSYNCD VLLM_ENGINE WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR
"""

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import child_environment, free_port, state_environment  # noqa: E402
from process_support import wait_port  # noqa: E402
from process_support import mixed_dtype_model as make_model  # noqa: E402

child_environment()

WSYNCD, SIM, CTL, LIB, PKG = sys.argv[1:6]
del sys.argv[1:6]
os.environ["WSYNC_CLIENT_LIB"] = LIB
sys.path.insert(0, PKG)

import numpy as np  # noqa: E402
import wsync  # noqa: E402


def nbytes(item):
    return np.ascontiguousarray(item[1]).nbytes


def vllm_chunks(model, chunk):
    """packed_tensor.py's producer cut: close after the tensor that takes the total past chunk."""
    out, running, count = [], 0, 0
    for item in model:
        running += nbytes(item)
        count += 1
        if running > chunk:
            out.append(running)
            running, count = 0, 0
    if count:
        out.append(running)
    return out


UPDATE = ["pause?mode=keep", "start", "update", None, "reset_prefix_cache", "resume"]


class VllmNcclFixture(unittest.TestCase):
    """wsyncd in host mode (4 MiB slots: each test model is one bucket) and vLLM engines."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-vllm-nccl-")
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        self.procs = []
        self.spawn([WSYNCD, "--mode", "host", "--socket", self.sock, "--slot-bytes", "4MiB",
                    "--bind-address", "127.0.0.1", "--bucket-timeout", "10"], "wsyncd.log")
        deadline = time.time() + 10
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)

    def spawn(self, argv, log):
        with open(os.path.join(self.dir, log), "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    env=state_environment(self.dir))
        self.procs.append(proc)
        return proc

    def tearDown(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=20)

    def engine(self, version, tp=2, *flags):
        port = free_port()
        workers = ",".join(str(i) for i in range(tp))
        self.spawn([sys.executable, SIM, "--memory", "host", "--backend", "nccl", "--gpus",
                    workers, "--port", str(port), "--version", version, *flags],
                   f"engine-{port}.log")
        wait_port(port)
        return port

    def create(self, ports, *flags, tp=2, name="policy"):
        engines = []
        for p in ports:
            engines += ["--engine", f"http://127.0.0.1:{p}#{tp}"]
        return subprocess.run([CTL, "--socket", self.sock, "create-group", name, "--kind", "vllm",
                               "--transport", "broadcast", *engines, *flags],
                              capture_output=True, text=True)

    def state(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            return json.loads(r.read())

    def push(self, model, version, group="policy"):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            return client.push(model, version=version, group=group)

    def assert_holds(self, port, model, ranks):
        state = self.state(port)
        self.assertEqual(sorted(state["ranks"]), ranks)
        for rank, tensors in state["ranks"].items():
            for item in model:
                expect = format(zlib.crc32(np.ascontiguousarray(item[1]).tobytes()), "08x")
                self.assertEqual(tensors.get(item[0]), expect, f"rank {rank} {item[0]}")
        return state


class VllmNcclTest(VllmNcclFixture):
    def test_store_rendezvous_unpacked_every_rank_holds_every_version(self):
        port = self.engine("0.30.0")
        out = self.create([port])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.state(port)["calls"], ["init"], "the group formed at creation")
        for n in (1, 2, 3):
            model = make_model(n)
            result = self.push(model, f"v{n}")
            self.assertTrue(all(e["ok"] for e in result["engines"]), result)
            state = self.assert_holds(port, model, ["1", "2"])
            self.assertEqual(state["weight_version"], f"v{n}")
            # Unpacked: one broadcast per tensor, in names order.
            self.assertEqual(state["last_chunks"], [nbytes(i) for i in model])
        calls = state["calls"]
        self.assertEqual(calls[0], "init")
        expect = []
        for n in (1, 2, 3):
            expect += [c if c else f"finish v{n}" for c in UPDATE]
        self.assertEqual(calls[1:], expect)
        self.assertEqual(state["inits"], 1, "one init, one warm-up, for every update")
        self.assertFalse(state["paused"])

    def test_unique_id_rendezvous_packed_chunks_cut_as_vllm_cuts_them(self):
        port = self.engine("0.30.0")
        chunk = 50000
        out = self.create([port], "--vllm-rendezvous", "unique-id", "--vllm-packed",
                          "--vllm-packed-chunk-bytes", str(chunk))
        self.assertEqual(out.returncode, 0, out.stderr)
        model = make_model(4)
        result = self.push(model, "u1")
        self.assertEqual(result["buckets"], 1)
        state = self.assert_holds(port, model, ["1", "2"])
        self.assertTrue(state["packed"], "packed travelled in init_info (>= 0.28.0)")
        self.assertEqual(state["last_chunks"], vllm_chunks(model, chunk))
        self.assertGreater(len(state["last_chunks"]), 1)

    def test_the_kinds_own_options_by_key_do_what_the_deprecated_flags_did(self):
        port = self.engine("0.30.0")
        chunk = 50000
        out = self.create([port], "--option", "rendezvous=unique-id", "--option", "packed=true",
                          "--options", json.dumps({"packed_chunk_bytes": chunk}))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("deprecated", out.stderr)
        model = make_model(4)
        self.push(model, "o1")
        state = self.assert_holds(port, model, ["1", "2"])
        self.assertTrue(state["packed"])
        self.assertEqual(state["last_chunks"], vllm_chunks(model, chunk))
        listed = subprocess.run([CTL, "--socket", self.sock, "--json", "groups"],
                                capture_output=True, text=True)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        spec = json.loads(listed.stdout)["groups"][0]["spec"]
        self.assertEqual(spec["kind_name"], "vllm")
        self.assertEqual(json.loads(spec["engine_options_json"])["rendezvous"], "unique-id")
        # A key the kind does not know is refused by wsyncd, naming it; an old flag still works
        # and says what replaces it.
        out = self.create([port], "--option", "pakced=true", name="typo")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn('unknown vllm option "pakced"', out.stderr)
        out = self.create([port], "--option", "packed", name="typo")
        self.assertIn("must be key=value", out.stderr)
        out = self.create([port], "--vllm-pause-mode", "wait", name="old")
        self.assertIn("--vllm-pause-mode is deprecated; use --option pause_mode=wait", out.stderr)

    def test_before_028_packed_rides_in_every_update_info(self):
        port = self.engine("0.27.0")
        out = self.create([port], "--vllm-packed", "--vllm-packed-chunk-bytes", "100000")
        self.assertEqual(out.returncode, 0, out.stderr)
        model = make_model(5)
        self.push(model, "p1")
        state = self.assert_holds(port, model, ["1", "2"])
        self.assertFalse(state["packed"], "init_info carried no packed: 0.27 would refuse it")
        self.assertEqual(state["last_chunks"], vllm_chunks(model, 100000))
        self.assertIsNone(state["weight_version"], "0.27 reads no weight_version at finish")

    def test_before_022_there_is_no_session(self):
        port = self.engine("0.16.0", 1)
        out = self.create([port], tp=1)
        self.assertEqual(out.returncode, 0, out.stderr)
        model = make_model(6)
        self.push(model, "old")
        state = self.assert_holds(port, model, ["1"])
        self.assertEqual(state["calls"], ["init", "pause?mode=keep", "update",
                                          "reset_prefix_cache", "resume"])

    def test_two_engines_are_numbered_in_a_row_and_both_hold_the_bytes(self):
        a = self.engine("0.30.0", 2)
        b = self.engine("0.28.1", 1)
        out = self.create([a, b], "--vllm-rendezvous", "store")
        self.assertNotEqual(out.returncode, 0, "one engine has 1 worker, the group gives it 2")
        self.assertIn("has 1 worker(s)", out.stderr)
        out = subprocess.run([CTL, "--socket", self.sock, "create-group", "policy", "--kind",
                              "vllm", "--transport", "broadcast", "--engine",
                              f"http://127.0.0.1:{a}#2", "--engine", f"http://127.0.0.1:{b}#1"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        model = make_model(8)
        self.push(model, "two")
        self.assert_holds(a, model, ["1", "2"])
        self.assert_holds(b, model, ["3"])
        # Each engine's own version picks its own variant, and the listing names both.
        listed = subprocess.run([CTL, "--socket", self.sock, "--json", "engines"],
                                capture_output=True, text=True)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        shown = [(e["kind"], e["engine_version"], e["variant"])
                 for e in json.loads(listed.stdout)["engines"]]
        self.assertEqual(shown, [
            ("vllm", "0.30.0", "nccl-session-packed-at-init-version-unique-id"),
            ("vllm", "0.28.1", "nccl-session-packed-at-init")])

    def test_versions_too_old_are_refused_naming_the_version_and_the_minimum(self):
        port = self.engine("0.29.0")
        out = self.create([port], "--vllm-rendezvous", "unique-id")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("vLLM 0.29.0 reads no nccl_unique_id_b64", out.stderr)
        self.assertIn("0.30.0", out.stderr)
        old = self.engine("0.15.2")
        out = self.create([old], name="old")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("vLLM 0.15.2 is read as older than 0.16.0", out.stderr)
        self.assertIn(">= 0.16.0", out.stderr)
        self.assertEqual(self.state(port)["calls"], [], "nothing was posted to either")
        self.assertEqual(self.state(old)["calls"], [])


def store_frames_of_a_connecting_client(nonce):
    """What torch's TCPStore client sends when it connects: VALIDATE, PING, ADD "init/" 1."""
    key = b"init/"
    return (b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", nonce) +
            b"\x04" + struct.pack("<Q", len(key)) + key + struct.pack("<q", 1))


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        data += chunk
    return data


class VllmNcclStoreStrangerTest(VllmNcclFixture):
    def test_a_local_stranger_takes_no_rank_and_reads_no_id_from_the_store(self):
        """A process on this host that watches for new ports reaches the group's store while the
        engine's workers start (1.5 s late), and does what their store clients do, once per
        rank: connect, ADD "init/", read the NCCL id vLLM's ranks read. vLLM's keys name no
        group, so the store judges the process: this one is neither the engine's server nor a
        descendant of it, and every connection closes before a byte is read. The group forms
        with the engine's own workers and the update lands."""
        port = self.engine("0.30.0", 2, "--init-delay-ms", "1500")
        create = subprocess.Popen(
            [CTL, "--socket", self.sock, "create-group", "policy", "--kind", "vllm", "--transport",
             "broadcast", "--engine", f"http://127.0.0.1:{port}#2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        store = 0
        deadline = time.time() + 10
        while not store and time.time() < deadline:
            store = self.state(port)["store_port"]
            time.sleep(0.005)
        self.assertNotEqual(store, 0, "the engine was never sent a store")
        announced, ids_read, strangers = 0, 0, []
        for nonce in (4000, 4001):
            try:
                sock = socket.create_connection(("127.0.0.1", store), timeout=5)
                strangers.append(sock)
                sock.sendall(store_frames_of_a_connecting_client(nonce))
                recv_exact(sock, 12)
                announced += 1
                key = b"/broadcast_from/0/0"
                sock.sendall(b"\x03" + struct.pack("<Q", len(key)) + key)
                (size,) = struct.unpack("<Q", recv_exact(sock, 8))
                if size > 0 and recv_exact(sock, size):
                    ids_read += 1
            except (OSError, ConnectionError):
                pass
        _, err = create.communicate(timeout=60)
        for sock in strangers:
            sock.close()
        self.assertEqual(ids_read, 0, "a stranger read the group's NCCL id")
        self.assertEqual(announced, 0, "a stranger registered in the store")
        self.assertEqual(create.returncode, 0, err)
        model = make_model(9)
        result = self.push(model, "s1")
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        self.assert_holds(port, model, ["1", "2"])
        with open(os.path.join(self.dir, "wsyncd.log")) as log:
            text = log.read()
        self.assertIn("is no engine rank: engine http://127.0.0.1:", text)
        self.assertIn("neither its server nor a descendant holds the socket", text)


class VllmNcclConflictTest(VllmNcclFixture):
    def test_a_409_aborts_the_update_the_session_is_closed_and_a_re_push_lands(self):
        port = self.engine("0.30.0", 2, "--conflict-update-at", "1")
        self.assertEqual(self.create([port]).returncode, 0)
        self.push(make_model(1), "ok1")
        with self.assertRaises(wsync.WsyncError) as e:
            self.push(make_model(2), "conflict")
        self.assertEqual(e.exception.code_name, "ABORTED")
        self.assertIn(f"http://127.0.0.1:{port}/update_weights answered HTTP 409",
                      e.exception.message)
        self.assertIn("push the whole version again", e.exception.message)
        state = self.state(port)
        self.assertFalse(state["session_open"], "the session was finished best-effort")
        self.assertEqual(state["weight_version"], "ok1")
        model = make_model(3)
        self.push(model, "ok2")
        state = self.assert_holds(port, model, ["1", "2"])
        self.assertEqual(state["weight_version"], "ok2")


if __name__ == "__main__":
    unittest.main(verbosity=2)
