"""What an engine can make wsyncd read and wait for is bounded, end to end in host mode: real
wsyncd, wsyncctl and engine simulator processes, the simulators' delivery knobs making the faults.

- An answer longer than its route's limit (endless, chunked) to group creation (SGLang's
  /get_server_info, LMDeploy's /openapi.json, vLLM's /version), to `wsyncctl engines` and to the
  metrics' engine probe: refused naming the route and the limit, wsyncd stays up.
- An engine that answers one byte every 3 s: each request ends at its deadline (the whole request's,
  not one per read), so a group of quorum 2 of 3 forms without it, and `wsyncctl groups`, `engines`,
  `doctor` and a scrape all answer.
- Slow clients holding connections to the metrics listener: a scrape is still served.

Usage: engine_bounds_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_SIM
                            VLLM_ENGINE LMDEPLOY_ENGINE
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments, free_port,  # noqa: E402
                             sglang_engine, sim_knobs, wait_port)

_, _, _, _, SGLANG_SIM = client_test_arguments()
SGLANG_SIM = sglang_engine(SGLANG_SIM)
VLLM_ENGINE = [sys.executable, sys.argv.pop(1), "--memory", "host", "--backend", "nccl",
               "--gpus", "0,1"]
LMDEPLOY_ENGINE = [sys.executable, sys.argv.pop(1), "--memory", "host", "--gpus", "0,1"]

import unittest  # noqa: E402

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

# Every call below ends within its own deadline; this only keeps a wedged wsyncd from hanging the
# test (the failure it reports then is the timeout).
CALL_TIMEOUT = 30


class EngineBoundsCase(HostWsyncdCase):
    def setUp(self):
        self.metrics_port = free_port()
        # Control calls and health probes get 2 s each, the whole request.
        self.WSYNCD_FLAGS = ["--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                             "--control-timeout", "2"]
        super().setUp()
        wait_port(self.metrics_port)

    def engine(self, argv):
        port = free_port()
        self.spawn(f"engine{port}", [*argv, "--port", str(port)])
        wait_port(port)
        return port, f"http://127.0.0.1:{port}"

    def ctl_bounded(self, *args):
        return subprocess.run([*self.ctl_argv(), *args], capture_output=True, text=True,
                              timeout=CALL_TIMEOUT)

    def ctl_argv(self):
        import process_support
        return [process_support.WSYNCCTL, "--socket", self.sock]

    def scrape(self, timeout=CALL_TIMEOUT):
        """{(name, sorted labels): value} of every sample."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples

    def engine_errors(self, samples):
        return {dict(labels)["engine"]: dict(labels)["error"]
                for (name, labels) in samples if name == "wsync_engine_error_info"}

    def assert_wsyncd_up(self):
        self.assertIsNone(self.procs["wsyncd"].poll(), "wsyncd died")
        status = self.ctl_bounded("status")
        self.assertEqual(status.returncode, 0, status.stderr)


class OversizedAnswerTest(EngineBoundsCase):
    def test_group_creation_refuses_an_oversized_answer_naming_the_route_and_limit(self):
        cases = [
            ("sglang", [*SGLANG_SIM, "--tp", "2"], "GET", "/get_server_info", "1 MiB"),
            ("lmdeploy", LMDEPLOY_ENGINE, "GET", "/openapi.json", "4 MiB"),
            ("vllm", VLLM_ENGINE, "GET", "/version", "1 MiB"),
        ]
        for kind, argv, method, route, limit in cases:
            with self.subTest(kind=kind):
                # Endless: the engine sends for as long as wsyncd reads.
                _, url = self.engine([*argv, "--oversize-route", route, "--oversize-mib", "0"])
                out = self.ctl_bounded("create-group", kind, "--kind", kind, "--engine",
                                       url + "#2")
                self.assertNotEqual(out.returncode, 0)
                self.assertIn(f"{method} {url}{route}: the answer's body is longer than {limit}, "
                              "the most wsyncd reads from this route", out.stderr)
                self.assert_wsyncd_up()

    def test_engines_and_metrics_survive_an_engine_whose_answers_turn_oversized(self):
        port, url = self.engine([*SGLANG_SIM, "--tp", "2"])
        out = self.ctl_bounded("create-group", "g", "--engine", url + "#2")
        self.assertEqual(out.returncode, 0, out.stderr)
        sim_knobs(port, oversize_routes=["*"], oversize_mib=0)
        listed = self.ctl_bounded("--json", "engines")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        engine = json.loads(listed.stdout)["engines"][0]
        self.assertIn(f"GET {url}/get_server_info: the answer's body is longer than 1 MiB",
                      engine.get("last_error", ""))
        # The metrics' probe meets the same answer in the background; scrapes go on meanwhile.
        error = None
        deadline = time.time() + 20
        while error is None and time.time() < deadline:
            samples = self.scrape()
            self.assertEqual(samples[("wsync_up", (("mode", "host"),))], 1)
            error = self.engine_errors(samples).get(url)
            if error is None or "longer than" not in error:
                error = None
                time.sleep(0.2)
        self.assertIsNotNone(error, "no scrape reported the engine's oversized answer")
        self.assertIn("/get_server_info: the answer's body is longer than 1 MiB", error)
        self.assert_wsyncd_up()


class TricklingEngineTest(EngineBoundsCase):
    def test_a_quorum_group_forms_without_an_engine_that_trickles_and_nothing_waits_on_it(self):
        urls = []
        for i in range(3):
            extra = ["--trickle-route", "*", "--trickle-ms", "3000"] if i == 2 else []
            urls.append(self.engine([*SGLANG_SIM, "--tp", "2", *extra])[1])
        creating = subprocess.Popen(
            [*self.ctl_argv(), "create-group", "q", "--quorum", "2",
             *[x for u in urls for x in ("--engine", u + "#2")]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # While the group forms (it holds its lock meanwhile), a scrape still answers.
        self.assertEqual(self.scrape(timeout=10)[("wsync_up", (("mode", "host"),))], 1)
        _, err = creating.communicate(timeout=CALL_TIMEOUT)
        self.assertEqual(creating.returncode, 0, err)
        group = self.ctl_bounded("--json", "group", "q")
        self.assertEqual(group.returncode, 0, group.stderr)
        info = json.loads(group.stdout)
        self.assertEqual(info.get("world_size"), 5, "wsyncd and the two engines' 4 ranks")
        for args in (["groups"], ["--json", "engines"], ["doctor"]):
            out = self.ctl_bounded(*args)
            self.assertIn(out.returncode, (0, 1), f"{args}: {out.stderr}")
            if args[-1] == "engines":
                rows = {e["url"]: e for e in json.loads(out.stdout)["engines"]}
                self.assertEqual(rows[urls[2]].get("last_error"),
                                 f"GET {urls[2]}/get_server_info: engine unreachable")
                self.assertTrue(rows[urls[0]].get("healthy"), rows[urls[0]])
        # A scrape never waits on the engine: it answers, and the background probe's verdict on
        # the trickling engine shows once that probe has reached its deadline.
        seen = None
        deadline = time.time() + 20
        while seen is None and time.time() < deadline:
            seen = self.engine_errors(self.scrape(timeout=5)).get(urls[2])
            if seen is None:
                time.sleep(0.2)
        self.assertEqual(seen, f"GET {urls[2]}/get_server_info: engine unreachable")
        self.assert_wsyncd_up()


class SlowMetricsClientTest(EngineBoundsCase):
    def test_a_scrape_is_served_while_slow_clients_hold_connections(self):
        held = []
        try:
            # Three that connect and say nothing, three that send half a request and stop.
            for i in range(6):
                s = socket.create_connection(("127.0.0.1", self.metrics_port), timeout=5)
                if i % 2:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                held.append(s)
            time.sleep(0.2)  # every one of them has a serving thread by now
            samples = self.scrape(timeout=10)
            self.assertEqual(samples[("wsync_up", (("mode", "host"),))], 1)
        finally:
            for s in held:
                s.close()
        self.assert_wsyncd_up()


if __name__ == "__main__":
    unittest.main(verbosity=2)
