"""SGLang's map-once colocated route (--sglang-ipc-route ipc, POST /update_weights_from_ipc) end to
end in host mode: real wsyncd, wsyncctl and Python client processes against
tests/engines/sglang/sglang_engine.py on host memory, whose ranks run checkpoint-engine's worker protocol over real ZMQ
sockets (pyzmq) and read each bucket's tensors at their byte offsets in the buffer they mapped.

Usage: sglang_ipc_route_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR IPC_SIM
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ipc_transport_test import GPU0, GPU1, IPC_SIM, IpcFixture  # noqa: E402
import process_support  # noqa: E402
from process_support import free_port, wait_port  # noqa: E402

import numpy as np  # noqa: E402
import wsync  # noqa: E402


STRANGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sim", "zmq_stranger.py")


class RouteFixture(IpcFixture):
    def start_engine(self, name, gpus, port=None, version=None, worker=None, extra=()):
        port = port or free_port()
        self.spawn(name, [sys.executable, IPC_SIM, "--memory", "host", "--port", str(port), "--gpus", ",".join(gpus)]
                   + (["--version", version] if version else [])
                   + (["--ce-worker", worker] if worker else []) + list(extra))
        wait_port(port)
        return port

    def create_route_group(self, port, gpus, name="colo"):
        self.create_group(name, port, gpus, "--sglang-ipc-route", "ipc")

    def post(self, port, path, **body):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def wsyncd_log(self):
        with open(os.path.join(self.dir, "wsyncd.log")) as f:
            return f.read()


class MapOnceRouteTest(RouteFixture):
    def test_each_rank_maps_its_buffer_once_per_update_and_holds_every_byte(self):
        port = self.start_engine("engine", [GPU0])
        self.create_route_group(port, [GPU0])
        self.assertIn("ipc route", self.ctl("group", "colo").stdout)
        buckets = 0
        for n, version in enumerate(("v1", "v2", "v3"), start=1):
            result = self.push(version)
            buckets += result["buckets"]
            self.assertGreater(result["buckets"], 1, "the model spans several slots")
            state = self.assert_engine_holds(port, self.model, version)
            # One mapping and one post-processing step per update, however many buckets.
            self.assertEqual(state["stream_maps"], [n])
            self.assertEqual(state["post_hooks"], [n])
        self.assertEqual(state["updates_received"], buckets, "one metadata frame per bucket")
        # The update's one request carries the label and the cache flush, so the commit sends
        # neither on its own.
        self.assertEqual(state["ipc_route_bodies"],
                         [{"flush_cache": True, "weight_version": v} for v in ("v1", "v2", "v3")])
        self.assertEqual(state["request_flushes"], 3)
        self.assertEqual(state["route_calls"], {})
        self.assertIn("ipc stream (map once)", self.ctl("engines").stdout)
        self.assertFalse(state["paused"])

    def test_a_worker_that_post_processes_at_the_first_none(self):
        # checkpoint-engine before 0.4.0 (the 0.1.x SGLang pins) ends at the first None.
        port = self.start_engine("engine", [GPU0], worker="g1")
        self.create_route_group(port, [GPU0])
        for n, version in enumerate(("g1a", "g1b"), start=1):
            self.push(version)
            state = self.assert_engine_holds(port, self.model, version)
            self.assertEqual(state["post_hooks"], [n])

    def test_a_server_too_old_for_the_route_is_refused_naming_both_versions(self):
        port = self.start_engine("engine", [GPU0], version="0.5.4")
        out = self.ctl("create-group", "colo", "--transport", "ipc", "--sglang-ipc-route", "ipc",
                       "--engine", f"http://127.0.0.1:{port}@{GPU0}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("SGLang 0.5.4 ", out.stderr)
        self.assertIn(">= 0.5.5", out.stderr)
        self.assertIn("tensor route", out.stderr)
        self.assertEqual(self.engine_state(port)["ipc_route_bodies"], [])

    def test_a_tensor_in_another_allocation_is_refused_before_it_is_sent(self):
        # A tensor larger than a slot (1 MiB) travels in a slot of its own: another buffer, which
        # a rank that maps one per update cannot read.
        port = self.start_engine("engine", [GPU0])
        self.create_route_group(port, [GPU0])
        big = self.model + [("model.lm_head.weight", np.ones((600, 600), dtype=np.float32))]
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("big", model=big)
        self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
        self.assertIn("another allocation", e.exception.message)
        self.assertIn("--slot-bytes", e.exception.message)
        state = self.engine_state(port)
        self.assertNotIn("model.lm_head.weight", state["ranks"]["1"])
        self.assertNotEqual(state["weight_version"], "big")
        # The buckets before the refused one reached it: paused until a complete version.
        self.assertTrue(state["paused"], "it holds part of 'big' and must not serve it")
        self.push("after")
        self.assert_engine_holds(port, self.model, "after")

    def test_two_ranks_on_two_gpus_each_map_their_own_gpus_buffer(self):
        port = self.start_engine("engine", [GPU0, GPU1])
        self.create_route_group(port, [GPU0, GPU1], name="tp")
        for r in self.push_ranks(["tp1", "tp1"]):
            self.assertIsInstance(r, dict, r)
        state = self.assert_engine_holds(port, self.model, "tp1")
        self.assertEqual(sorted(state["ranks"]), ["1", "2"])
        self.assertEqual(state["stream_maps"], [1, 1])


class RouteFaultTest(RouteFixture):
    def test_engine_faults_fail_the_update_naming_the_rank_and_the_next_one_succeeds(self):
        for worker in ("g4", "g1"):
            with self.subTest(worker=worker):
                self.check_faults(worker)

    def check_faults(self, worker):
        name = "engine-" + worker
        port = self.start_engine(name, [GPU0], worker=worker)
        group = "colo-" + worker
        self.create_route_group(port, [GPU0], name=group)
        self.push("ok1", group=group)
        # A rank fails to load the second bucket: g4 answers its traceback, g1 raises without
        # answering and the engine's request fails.
        self.knobs(port, fail_update_at=self.engine_state(port)["updates_received"] + 1)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("bad", group=group)
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.assertIn("bucket 1", e.exception.message)
        if worker == "g4":
            # The rank's own answer: its traceback's last line.
            self.assertIn(f"TP rank 0 (GPU {GPU0})", e.exception.message)
            self.assertIn("illegal memory access", e.exception.message)
        else:
            self.assertIn("HTTP 400", e.exception.message)
            self.assertIn("illegal memory access", self.engine_state(port)["last_error"])
        state = self.engine_state(port)
        self.assertNotEqual(state["weight_version"], "bad")
        self.assertTrue(state["paused"], "it holds part of 'bad' and must not serve it")
        self.push("ok2", group=group)
        self.assert_engine_holds(port, self.model, "ok2")
        # A rank that hangs: the bucket deadline (3 s) ends it.
        self.knobs(port, hang_update_at=self.engine_state(port)["updates_received"])
        start = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("hang", group=group)
        self.assertLess(time.time() - start, 10)
        self.assertEqual(e.exception.code_name, "DEADLINE_EXCEEDED")
        self.assertIn("no answer to bucket 0", e.exception.message)
        self.procs[name].kill()
        self.procs[name].wait()
        self.start_engine(name, [GPU0], port=port, worker=worker)
        self.push("ok3", group=group)
        self.assert_engine_holds(port, self.model, "ok3")
        # Death halfway through an update: its request fails at once, not at the deadline.
        self.knobs(port, die_at_update=self.engine_state(port)["updates_received"] + 1)
        start = time.time()
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("dies", group=group)
        self.assertLess(time.time() - start, 3)
        self.assertIn(f"http://127.0.0.1:{port}", e.exception.message)
        self.start_engine(name, [GPU0], port=port, worker=worker)
        self.push("ok4", group=group)
        self.assert_engine_holds(port, self.model, "ok4")
        self.assertIsNone(self.procs["wsyncd"].poll(), "wsyncd stays up")


class HostileAnswerTest(RouteFixture):
    def test_a_rank_answer_of_any_bytes_reaches_the_trainer_and_the_history_as_utf8(self):
        # The traceback ends "RuntimeError: ab" and 200 euro signs (3 bytes each): the 300-byte cut
        # falls inside a character.
        port = self.start_engine("engine", [GPU0])
        self.create_route_group(port, [GPU0])
        self.knobs(port, fail_update_at=0, fail_text="ab" + "\u20ac" * 200)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("bad")
        self.assertIn("TP rank 0", e.exception.message)
        self.assertIn("RuntimeError: ab\u20ac\u20ac", e.exception.message)
        out = self.ctl("updates")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("RuntimeError: a", out.stdout)
        self.push("after")
        self.assert_engine_holds(port, self.model, "after")


class StrangerTest(RouteFixture):
    """A local process that is not the engine's connects a REP socket to each rank's socket, found
    in /proc/net/unix as any user can find it, and answers b"" to every frame it takes. It must
    take no frame (the first carries the buffer's IPC handle), and every update must commit with
    each rank holding every byte (or fail before it commits), then the next one too. The engine's
    ranks run in child processes of the process serving its port, as SGLang's do."""

    ROUNDS = 4

    def model_for(self, n):
        """self.model's names, shapes and dtypes with contents of their own."""
        rng = np.random.default_rng(100 + n)
        return [(item[0], rng.integers(0, 256, item[1].nbytes, dtype=np.uint8).view(item[1].dtype)
                 .reshape(item[1].shape)) + tuple(item[2:]) for item in self.model]

    def bucket_per_tensor_model(self, seed):
        """Eight 600 KB tensors: with 1 MiB slots, a bucket each, so that frames after the
        stranger connects carry buckets."""
        rng = np.random.default_rng(seed)
        return [(f"model.layers.{i}.mlp.weight", rng.standard_normal(150_000).astype(np.float32))
                for i in range(8)]

    def start_stranger(self, uid=None):
        argv = [sys.executable, STRANGER, "--wsyncd-pid", str(self.procs["wsyncd"].pid)]
        if uid is not None:
            argv += ["--uid", str(uid)]
        with open(os.path.join(self.dir, "stranger.log"), "a") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        self.assertEqual(proc.stdout.readline().strip(), "ready")
        return proc

    def stop_stranger(self, proc):
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
        return json.loads(out.strip().splitlines()[-1])

    def check_the_stranger_takes_nothing(self, uid=None, rank_processes=True):
        """Returns the engine's port and what the stranger reported."""
        name = "procs" if rank_processes else "threads"
        port = self.start_engine("engine-" + name, [GPU0, GPU1],
                                 extra=["--rank-processes"] if rank_processes else [])
        group = "tp-" + name
        self.create_route_group(port, [GPU0, GPU1], name=group)
        stranger = self.start_stranger(uid)
        outcomes = []
        for n in range(self.ROUNDS):
            model, version = self.model_for(n), f"s{n}"
            results = self.push_ranks([version] * 2, models=[model] * 2, group=group)
            state = self.engine_state(port)
            if all(isinstance(r, dict) for r in results):
                self.assert_engine_holds(port, model, version)
                outcomes.append("committed, every byte on every rank")
            else:
                self.assertNotEqual(state["weight_version"], version, results)
                outcomes.append(f"failed: {[str(r)[:150] for r in results]}")
        took = self.stop_stranger(stranger)
        self.assertGreater(took["sockets"], 0, f"the stranger found the ranks' sockets: {took}")
        self.assertEqual((took["frames"], took["bytes"], took["admitted"]), (0, 0, 0),
                         f"the stranger took {took}; the updates: {outcomes}")
        # Each rank mapped its own buffer once per update: no frame went astray.
        self.assertEqual(state["stream_maps"], [self.ROUNDS] * 2)
        for r in self.push_ranks(["after"] * 2, group=group):
            self.assertIsInstance(r, dict, r)
        self.assert_engine_holds(port, self.model, "after")
        return port, took

    def test_a_stranger_of_the_same_user_outside_the_engine_takes_no_frame(self):
        # The ranks in the engine's own process (the simulator's threads), then in its children.
        for rank_processes in (False, True):
            with self.subTest(rank_processes=rank_processes):
                port, took = self.check_the_stranger_takes_nothing(
                    rank_processes=rank_processes)
                # Refused during the handshake, by its process (not the socket's file).
                self.assertGreater(took["refused"], 0, took)
                log = self.wsyncd_log()
                self.assertIn(f"engine http://127.0.0.1:{port} TP rank 0 (GPU {GPU0}): refused a "
                              "connection to its stream socket: pid ", log)
                self.assertIn("is not the engine's server process or a descendant of it", log)

    def test_a_stranger_of_another_user_takes_no_frame(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to run the stranger as another user (uid 65534); the "
                          "same-user stranger runs without it")
        _, took = self.check_the_stranger_takes_nothing(uid=65534)
        # The sockets' files let the engine's user alone connect (root, as wsyncd is): 0600 once
        # set; before that, as bind made them under wsyncd's umask.
        self.assertIn("0o600", took["modes"])
        self.assertEqual([m for m in took["modes"] if int(m, 8) & 0o002], [], took)


    def test_another_process_of_the_engine_is_refused_once_the_rank_connected(self):
        # A child of the engine (its user, its descendant) connects to the rank's socket after
        # the rank did: one rank, one process. Both worker generations: the older one ends at the
        # first None, so a frame taken by another process can go unnoticed there.
        for n, worker in enumerate(("g4", "g1")):
            with self.subTest(worker=worker):
                port = self.start_engine("engine-" + worker, [GPU0], worker=worker)
                group = "colo-" + worker
                self.create_route_group(port, [GPU0], name=group)
                self.push("v1", group=group)
                self.post(port, "/sim/start_stranger", wsyncd_pid=self.procs["wsyncd"].pid,
                          at_update=self.engine_state(port)["updates_received"] + 1)
                model = self.bucket_per_tensor_model(n)
                try:
                    self.push("v2", group=group, model=model)
                    self.assert_engine_holds(port, model, "v2")
                finally:
                    took = self.post(port, "/sim/stop_stranger")
                self.assertEqual((took["frames"], took["bytes"], took["admitted"]), (0, 0, 0),
                                 took)
                self.assertGreater(took["refused"], 0, took)
                self.assertIn(f"engine http://127.0.0.1:{port} TP rank 0 (GPU {GPU0}): refused "
                              "a connection to its stream socket: pid ", self.wsyncd_log())
                self.assertIn("already took this rank's socket", self.wsyncd_log())
                self.push("v3", group=group)
                self.assert_engine_holds(port, self.model, "v3")


class SocketDirTest(RouteFixture):
    SOCKET_DIR = tempfile.mkdtemp(prefix="wsync-route-sockets-")
    WSYNCD_FLAGS = ["--ipc-socket-dir", SOCKET_DIR]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.SOCKET_DIR, ignore_errors=True)

    def test_a_socket_dir_gone_fails_the_update_naming_it_and_resumes_the_engine(self):
        port = self.start_engine("engine", [GPU0])
        self.create_route_group(port, [GPU0])
        os.rmdir(self.SOCKET_DIR)
        with self.assertRaises(wsync.WsyncError) as e:
            self.push("v1")
        self.assertIn(self.SOCKET_DIR, e.exception.message)
        self.assertIn("ipc_socket_dir", e.exception.message)
        state = self.engine_state(port)
        self.assertFalse(state["paused"])
        self.assertEqual(state["ipc_route_bodies"], [])
        # Back again: the next update makes its private directory there, and removes its sockets.
        os.mkdir(self.SOCKET_DIR)
        self.push("v2")
        self.assert_engine_holds(port, self.model, "v2")
        (private,) = os.listdir(self.SOCKET_DIR)
        self.assertEqual(os.stat(os.path.join(self.SOCKET_DIR, private)).st_mode & 0o777, 0o711)
        self.assertEqual(os.listdir(os.path.join(self.SOCKET_DIR, private)), [])

    def test_directories_dead_wsyncds_left_are_removed_and_no_other(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        pid_ns = "".join(c for c in os.readlink("/proc/self/ns/pid") if c.isdigit())

        def make(name, entries=("0123456789abcdef.sock",)):
            path = os.path.join(self.SOCKET_DIR, name)
            os.mkdir(path)
            for entry in entries:
                if entry.endswith(".sock"):
                    with socket.socket(socket.AF_UNIX) as s:
                        s.bind(os.path.join(path, entry))  # the file stays after the close
                else:
                    open(os.path.join(path, entry), "w").close()
            return name

        removed = {make(f"wsyncd-{dead.pid}-{pid_ns}-0badcafe"),
                   make(f"wsyncd-{dead.pid}-deadbeef"),  # the earlier form names no namespace
                   make(f"wsyncd-{dead.pid}-{pid_ns}-0e0e0e0e", entries=())}
        kept = {make(f"wsyncd-{os.getpid()}-{pid_ns}-11111111"),  # its process lives
                make(f"wsyncd-{dead.pid}-1234-22222222"),  # another PID namespace's
                make(f"wsyncd-{dead.pid}-{pid_ns}-33333333", entries=("notes.txt",)),
                make(f"wsyncd-{dead.pid}-{pid_ns}-4444444")}  # not a name wsyncd makes
        target = make("elsewhere")
        link = f"wsyncd-{dead.pid}-{pid_ns}-55555555"
        os.symlink(os.path.join(self.SOCKET_DIR, target), os.path.join(self.SOCKET_DIR, link))
        kept |= {target, link}
        port = self.start_engine("engine", [GPU0])
        self.create_route_group(port, [GPU0])
        self.push("v1")
        self.assert_engine_holds(port, self.model, "v1")
        mine = f"wsyncd-{self.procs['wsyncd'].pid}-"
        left = {d for d in os.listdir(self.SOCKET_DIR) if not d.startswith(mine)}
        self.assertEqual(left, kept)
        self.assertEqual(os.listdir(os.path.join(self.SOCKET_DIR, target)),
                         ["0123456789abcdef.sock"])
        log = self.wsyncd_log()
        self.assertIn(f"stream socket directories of wsyncds that are gone from {self.SOCKET_DIR}",
                      log)
        for name in removed:
            self.assertIn(name, log)
        for name in kept:
            path = os.path.join(self.SOCKET_DIR, name)
            if os.path.islink(path):
                os.unlink(path)
            else:
                shutil.rmtree(path)

    def test_a_socket_dir_that_is_not_a_directory_stops_wsyncd_at_start(self):
        with tempfile.NamedTemporaryFile() as f:
            out = subprocess.run([process_support.WSYNCD, "--mode", "host", "--socket",
                                  os.path.join(self.dir, "other.sock"), "--ipc-socket-dir", f.name],
                                 capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(f"--ipc-socket-dir {f.name} is not a directory", out.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
