"""A group's quorum (--quorum) end to end in host mode: real wsyncd, wsyncctl and Python client
processes against engine simulators.

- Broadcast (tests/engines/sglang/sglang_engine.py, TP=2, over the TCPStore and host
  collective): an engine that is down is left out and the others form a smaller group, their ranks renumbered, so the collective
  and every rank's bytes must still be right; the engine left out waits for a full version, and
  once back it is formed in again and gets one.
- IPC per-bucket requests (tests/engines/sglang/sglang_engine.py): an engine whose bucket fails mid-update
  gets no bucket launched after that, the others take the whole version, and the one left out is
  held back, paused.
- Too few engines: the update fails UNAVAILABLE naming each engine left out.

Usage: quorum_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR IPC_SIM SGLANG_SIM
"""

import json
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments, crc, free_port,  # noqa: E402
                             host_gpu, mixed_dtype_model, sglang_engine, sim_knobs, sim_state,
                             wait_port)

_, _, _, _, IPC_SIM = client_test_arguments()
SGLANG_SIM = sglang_engine(sys.argv.pop(1))

import numpy as np  # noqa: E402
import wsync  # noqa: E402


class QuorumCase(HostWsyncdCase):
    state = staticmethod(sim_state)
    knobs = staticmethod(sim_knobs)

    def engines(self, argv, count):
        """Starts `count` simulators (argv + --port); returns their ports and URLs."""
        ports = []
        for i in range(count):
            port = free_port()
            self.spawn(f"engine{i}", [*argv, "--port", str(port)])
            wait_port(port)
            ports.append(port)
        return ports, [f"http://127.0.0.1:{p}" for p in ports]

    def create(self, group, suffix, urls, *flags):
        out = self.ctl("create-group", group, "--quorum", "2", *flags,
                       *[x for u in urls for x in ("--engine", u + suffix)])
        self.assertEqual(out.returncode, 0, out.stderr)

    def push(self, group, version, model):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            return client.push(model, version=version, group=group)

    def assert_holds(self, port, model, ranks):
        state = self.state(port)
        self.assertEqual(len(state["ranks"]), ranks, port)
        for rank, tensors in state["ranks"].items():
            for item in model:
                self.assertEqual(tensors.get(item[0]), crc(item[1]), f"{port} rank {rank} {item[0]}")
        return state

    def waiting(self):
        listed = self.ctl("--json", "engines")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        return {e["url"]: e["needs_full_version"] for e in json.loads(listed.stdout)["engines"]}


class BroadcastQuorumTest(QuorumCase):
    def test_a_dead_engine_is_left_out_the_rest_renumbered_and_it_rejoins_when_back(self):
        ports, urls = self.engines([*SGLANG_SIM, "--tp", "2"], 3)
        self.create("q", "#2", urls)
        self.assertIn("quorum 2 of 3 engines", self.ctl("group", "q").stdout)
        self.push("q", "v1", mixed_dtype_model(1))
        # The middle engine dies (SIGKILL: no goodbye to anyone).
        self.procs["engine1"].send_signal(signal.SIGKILL)
        self.procs["engine1"].wait()
        model = mixed_dtype_model(2)
        result = self.push("q", "v2", model)
        ok = {e["engine"]: e["ok"] for e in result["engines"]}
        self.assertEqual(ok, {urls[0]: True, urls[1]: False, urls[2]: True}, result)
        missed = next(e for e in result["engines"] if e["engine"] == urls[1])
        self.assertIn("left out of this update", missed["message"])
        # Formed again as 1 + 2 + 2 ranks: the last engine's ranks are now 3 and 4, not 5 and 6,
        # and the collective only delivers the right bytes if every rank agrees on that.
        self.assertEqual(sorted(self.assert_holds(ports[2], model, 2)["ranks"]), ["3", "4"])
        self.assert_holds(ports[0], model, 2)
        group = json.loads(self.ctl("--json", "group", "q").stdout)
        self.assertEqual(group["world_size"], 5)
        self.assertEqual(group["last_version"], "v2")
        self.assertIn("committed on 2 of 3 engines (quorum 2)", group["error"])
        self.assertEqual(self.waiting(), {urls[0]: False, urls[1]: True, urls[2]: False})
        # Back on its port (a fresh process holding nothing): formed in again, it gets the whole
        # next version and is no longer held back.
        self.spawn("engine1b", [*SGLANG_SIM, "--tp", "2", "--port", str(ports[1])])
        wait_port(ports[1])
        # wsyncd asks the engine left out in the background (never on an update's path), every
        # 5 s: the next update after it heard the engine takes it back.
        self.wait_log(f"engine {urls[1]} answers again")
        model = mixed_dtype_model(3)
        result = self.push("q", "v3", model)
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        for p in ports:
            self.assert_holds(p, model, 2)
        self.assertEqual(sorted(self.state(ports[2])["ranks"]), ["5", "6"])
        self.assertEqual(set(self.waiting().values()), {False})

    def test_too_few_engines_fail_the_update_naming_each_one(self):
        ports, urls = self.engines([*SGLANG_SIM, "--tp", "2"], 3)
        self.create("q", "#2", urls)
        for name in ("engine1", "engine2"):
            self.procs[name].send_signal(signal.SIGKILL)
            self.procs[name].wait()
        with self.assertRaises(wsync.WsyncError) as failed:
            self.push("q", "v1", mixed_dtype_model(1))
        self.assertEqual(failed.exception.code_name, "UNAVAILABLE")
        self.assertIn("needs 2 of its 3 engines and 1 are left", failed.exception.message)
        for u in urls[1:]:
            self.assertIn(u, failed.exception.message)
        self.assertFalse(self.state(ports[0])["paused"], "the engine left serving is resumed")

    def test_a_quorum_above_the_engine_count_is_refused(self):
        [port], _ = self.engines(SGLANG_SIM, 1)
        out = self.ctl("create-group", "q", "--kind", "sglang", "--quorum", "2", "--engine",
                       f"http://127.0.0.1:{port}")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("a quorum of 2 engines is more than its 1", out.stderr)


class IpcQuorumTest(QuorumCase):
    GPU = host_gpu(0)

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(11)
        # Eight buckets at 1 MiB slots: more than are ever in flight at once.
        self.model = [(f"model.layers.{i}.weight", rng.standard_normal(200_000).astype(np.float32))
                      for i in range(8)]

    def test_an_engine_whose_bucket_fails_gets_no_more_and_the_others_take_the_version(self):
        ports, urls = self.engines([sys.executable, IPC_SIM, "--memory", "host", "--gpus", self.GPU], 3)
        self.create("colo", "@" + self.GPU, urls, "--transport", "ipc")
        self.knobs(ports[1], fail_update_at=1)
        result = self.push("colo", "v1", self.model)
        self.assertEqual(result["buckets"], 8, result)
        ok = {e["engine"]: e["ok"] for e in result["engines"]}
        self.assertEqual(ok, {urls[0]: True, urls[1]: False, urls[2]: True}, result)
        for p in (ports[0], ports[2]):
            self.assertEqual(self.assert_holds(p, self.model, 1)["weight_version"], "v1")
        dropped = self.state(ports[1])
        # Bucket 0 loaded, bucket 1 failed; the requests already written behind it (the channel
        # is pipelined) are all it got: none of the buckets launched after the failure reached
        # it. Held back, paused, on its old version.
        self.assertGreaterEqual(dropped["updates_received"], 2)
        self.assertLess(dropped["updates_received"], 8)
        self.assertEqual(dropped["weight_version"], "default")
        self.assertTrue(dropped["paused"])
        self.assertEqual(self.waiting(), {urls[0]: False, urls[1]: True, urls[2]: False})
        # The next full version reaches it again.
        self.knobs(ports[1], fail_update_at=-1)
        result = self.push("colo", "v2", self.model)
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        self.assertEqual(self.assert_holds(ports[1], self.model, 1)["weight_version"], "v2")
        self.assertFalse(self.state(ports[1])["paused"])

    def test_without_a_quorum_the_same_failure_fails_the_update(self):
        ports, urls = self.engines([sys.executable, IPC_SIM, "--memory", "host", "--gpus", self.GPU], 2)
        out = self.ctl("create-group", "colo", "--transport", "ipc",
                       *[x for u in urls for x in ("--engine", f"{u}@{self.GPU}")])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.knobs(ports[1], fail_update_at=1)
        with self.assertRaises(wsync.WsyncError) as failed:
            self.push("colo", "v1", self.model)
        self.assertIn(f"engine {urls[1]}", failed.exception.message)
        self.assertEqual(self.state(ports[0])["weight_version"], "default")


if __name__ == "__main__":
    unittest.main(verbosity=2)
