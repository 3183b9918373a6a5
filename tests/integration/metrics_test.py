"""wsyncd's Prometheus endpoint (--metrics-listen) scraped during and after host-mode updates and
parsed by Debian's python3-prometheus-client, a parser that is not ours: every family must parse,
and the values must say what happened (updates by outcome, bytes and buckets, the bucket phase
histograms, group and engine state, slots, sessions, the update running while it runs).

Usage: metrics_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_SIM
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments,  # noqa: E402
                             free_port, mixed_dtype_model, sglang_engine, sim_knobs,
                             wait_port)

_, _, _, _, SGLANG_SIM = client_test_arguments()
SGLANG_SIM = sglang_engine(SGLANG_SIM)

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
import wsync  # noqa: E402


def model_bytes(model):
    return sum(item[1].nbytes for item in model)


class MetricsTest(HostWsyncdCase):
    def setUp(self):
        self.metrics_port = free_port()
        self.WSYNCD_FLAGS = ["--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        super().setUp()
        wait_port(self.metrics_port)
        self.engine_port = free_port()
        self.spawn("engine", [*SGLANG_SIM, "--port", str(self.engine_port), "--tp", "2"])
        wait_port(self.engine_port)
        self.url = f"http://127.0.0.1:{self.engine_port}"
        out = self.ctl("create-group", "g", "--kind", "sglang", "--engine", self.url + "#2")
        self.assertEqual(out.returncode, 0, out.stderr)

    def scrape(self):
        """{(name, sorted labels): value} of every sample, parsed by prometheus_client."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
            self.assertIn("text/plain", r.headers["Content-Type"])
            text = r.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples

    def scrape_until(self, key, timeout=10):
        """Scrapes until `key` is among the samples (engine health comes from a probe in the
        background, which a new group's first scrape only starts); the last scrape."""
        deadline = time.time() + timeout
        samples = self.scrape()
        while key not in samples and time.time() < deadline:
            time.sleep(0.1)
            samples = self.scrape()
        return samples

    def knobs(self, **knobs):
        sim_knobs(self.engine_port, **knobs)

    def push(self, version, model):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            return client.push(model, version=version, group="g")

    def test_a_committed_update_is_counted_with_its_bytes_buckets_and_phases(self):
        before = self.scrape_until(("wsync_engine_healthy",
                                    (("engine", self.url), ("group", "g"), ("kind", "sglang"))))
        self.assertEqual(before[("wsync_up", (("mode", "host"),))], 1)
        self.assertEqual(before[("wsync_group_state", (("group", "g"), ("state", "ready")))], 1)
        self.assertEqual(before[("wsync_group_world_size", (("group", "g"),))], 3)
        self.assertEqual(before[("wsync_engine_healthy",
                                 (("engine", self.url), ("group", "g"), ("kind", "sglang")))], 1)
        self.assertNotIn(("wsync_updates_total", (("group", "g"), ("outcome", "committed"))),
                         before)
        model = mixed_dtype_model(1)
        result = self.push("v1", model)
        after = self.scrape()
        g = (("group", "g"),)
        self.assertEqual(after[("wsync_updates_total", (("group", "g"), ("outcome", "committed")))],
                         1)
        self.assertEqual(after[("wsync_update_bytes_total", g)], model_bytes(model))
        self.assertEqual(after[("wsync_buckets_total", g)], result["buckets"])
        for phase in ("verify", "idle", "wire", "answer", "total"):
            labels = (("group", "g"), ("phase", phase))
            self.assertEqual(after[("wsync_bucket_phase_seconds_count", labels)],
                             result["buckets"], phase)
            inf = tuple(sorted(labels + (("le", "+Inf"),)))
            self.assertEqual(after[("wsync_bucket_phase_seconds_bucket", inf)], result["buckets"],
                             phase)
        count = after[("wsync_update_duration_seconds_count",
                       (("group", "g"), ("outcome", "committed")))]
        self.assertEqual(count, 1)
        total = after[("wsync_update_duration_seconds_sum",
                       (("group", "g"), ("outcome", "committed")))]
        self.assertGreater(total, 0)
        self.assertEqual(after[("wsync_sessions", ())], 0, "the client closed its session")
        self.assertEqual(after[("wsync_updates_running", ())], 0)
        held = {dict(labels)["device"]: v for (name, labels), v in after.items()
                if name == "wsync_device_memory_held_bytes"}
        listed = json.loads(self.ctl("--json", "buffers").stdout)["devices"]
        self.assertEqual(held, {str(d.get("device", 0)): int(d["bytes_held"]) for d in listed})
        self.assertGreaterEqual(held["0"], 2 * (1 << 20), "two 1 MiB slots on device 0")
        self.assertIn(("wsync_store_connections", ()), after)

    def test_a_running_update_shows_while_it_runs_and_a_failed_one_is_counted(self):
        self.knobs(answer_delay_ms=700)
        done = threading.Event()
        first = {}
        threading.Thread(target=lambda: (first.update(self.push("v1", mixed_dtype_model(1))),
                                         done.set()), daemon=True).start()
        running = None
        deadline = time.time() + 10
        while time.time() < deadline and not done.is_set():
            sample = self.scrape()
            if sample.get(("wsync_updates_running", ())) == 1:
                running = sample
                break
            time.sleep(0.05)
        self.assertIsNotNone(running, "no scrape saw the update running")
        self.assertEqual(running[("wsync_group_state", (("group", "g"), ("state", "updating")))], 1)
        self.assertEqual(running[("wsync_sessions", ())], 1)
        self.assertTrue(done.wait(20))
        # The simulator counts its bucket requests from its start: the next one fails.
        self.knobs(answer_delay_ms=0, fail_update_at=first["buckets"])
        with self.assertRaises(wsync.WsyncError):
            self.push("v2", mixed_dtype_model(2))
        after = self.scrape()
        self.assertEqual(after[("wsync_updates_total", (("group", "g"), ("outcome", "failed")))], 1)
        self.assertEqual(after[("wsync_updates_total", (("group", "g"), ("outcome", "committed")))],
                         1)


class MetricsListenTest(unittest.TestCase):
    def test_an_address_in_use_stops_wsyncd_with_a_clear_error(self):
        import socket
        import tempfile
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            sock = os.path.join(tempfile.mkdtemp(prefix="wsync-metrics-"), "wsyncd.sock")
            out = subprocess.run([WSYNCD_BIN(), "--mode", "host", "--socket", sock,
                                  "--metrics-listen", f"127.0.0.1:{port}"],
                                 capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(f"--metrics-listen 127.0.0.1:{port}: cannot serve there", out.stderr)


def WSYNCD_BIN():
    import process_support
    return process_support.WSYNCD


if __name__ == "__main__":
    unittest.main(verbosity=2)
