"""Engine servers as real ones are (host mode).

HttpHabitsTest: HTTP/1.0, `Connection: close` after every answer or after a few, and a proxy in
front that closes idle connections. Each of SGLang, vLLM and LMDeploy takes updates of several
buckets over the broadcast, and every update must commit with every rank holding every tensor's
bytes: wsyncd learns how each server treats a connection and re-sends only what a closing server
never read.

SglangRoutesTest: the label and the cache flush ride on the last bucket; a server without
/update_weight_version takes the version there too; one that ignores it there and whose label route
fails commits with a warning (result, log, metric); one without a route every update calls is
refused at formation, before any byte.

Usage: server_quirks_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_ENGINE
                           VLLM_ENGINE LMDEPLOY_ENGINE IDLE_CLOSING_PROXY
"""

import json
import os
import sys
import time
import unittest
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_support  # noqa: E402
from process_support import HostWsyncdCase, free_port, wait_port  # noqa: E402

_, _, _, _, SGLANG = process_support.client_test_arguments()
VLLM, LMDEPLOY, PROXY = sys.argv[1:4]
del sys.argv[1:4]

import numpy as np  # noqa: E402
import wsync  # noqa: E402

KINDS = {
    "sglang": [sys.executable, SGLANG, "--memory", "host", "--tp", "2"],
    "vllm": [sys.executable, VLLM, "--memory", "host", "--backend", "nccl", "--gpus", "0,1",
             "--version", "0.30.0"],
    "lmdeploy": [sys.executable, LMDEPLOY, "--memory", "host", "--gpus", "0,1"],
}


def model(seed):
    """16 tensors of 512 KiB: two a bucket in the harness's 1 MiB slots, 8 buckets an update."""
    rng = np.random.default_rng(seed)
    return [(f"layers.{i}.weight", rng.standard_normal(128 << 10, dtype=np.float32))
            for i in range(16)]


def crc(item):
    return format(zlib.crc32(np.ascontiguousarray(item[1]).tobytes()), "08x")


class HttpHabitsTest(HostWsyncdCase):
    def setUp(self):
        self.metrics_port = free_port()
        self.WSYNCD_FLAGS = ["--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        super().setUp()

    def engine(self, kind, *habit):
        port = free_port()
        self.spawn(f"{kind}-{port}", [*KINDS[kind], "--port", str(port), *habit])
        wait_port(port)
        return port

    def ctl_ok(self, *args):
        out = self.ctl(*args)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def checksums(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            return json.loads(r.read())

    def wsyncd_log(self):
        with open(os.path.join(self.dir, "wsyncd.log")) as f:
            return f.read()

    def updates_commit(self, kind, port, url, rounds=3, pause_s=0.0, extra=()):
        """Makes a group over the engine at `url` (its simulator on `port`) and pushes `rounds`
        versions; each must commit with both ranks holding every tensor."""
        self.ctl_ok("create-group", kind, "--kind", kind, "--transport", "broadcast",
                 "--engine", f"{url}#2", *extra)
        with wsync.Client("unix:" + self.sock) as client:
            for round_ in range(1, rounds + 1):
                weights = model(round_)
                result = client.push(weights, version=f"{kind}-v{round_}", group=kind)
                self.assertTrue(all(e["ok"] for e in result["engines"]), result)
                self.assertGreaterEqual(result["buckets"], 8, result)
                ranks = self.checksums(port)["ranks"]
                self.assertEqual(len(ranks), 2, kind)
                for rank, tensors in ranks.items():
                    for item in weights:
                        self.assertEqual(tensors.get(item[0]), crc(item),
                                         f"{kind} round {round_} rank {rank} {item[0]}")
                time.sleep(pause_s)

    def refusal_at_formation(self, kind, port):
        """Creates a group of `kind` over the engine on `port` and returns why it was refused:
        by create-group, or (a group that forms at its first update) by that first push."""
        out = self.ctl("create-group", kind, "--kind", kind, "--transport", "broadcast",
                       "--engine", f"http://127.0.0.1:{port}#2")
        if out.returncode != 0:
            return out.stderr
        with self.assertRaises(wsync.WsyncError) as e:
            with wsync.Client("unix:" + self.sock) as client:
                client.push(model(1), version="v1", group=kind)
        return e.exception.message

    def each_kind(self, *habit):
        for kind in KINDS:
            with self.subTest(kind=kind):
                port = self.engine(kind, *habit)
                self.updates_commit(kind, port, f"http://127.0.0.1:{port}")

    def test_a_document_that_lists_only_some_routes(self):
        # A gateway in front publishes an OpenAPI document of its own, without routes it passes
        # on: each route an update calls is asked of the server (OPTIONS there: 405) before it counts
        # as missing, and the updates commit.
        unlisted = {"sglang": "/flush_cache", "vllm": "/pause", "lmdeploy": "/wakeup"}
        for kind in KINDS:
            with self.subTest(kind=kind):
                port = self.engine(kind, "--unlisted-route", unlisted[kind])
                self.updates_commit(kind, port, f"http://127.0.0.1:{port}", rounds=2)

    def test_http_1_0_servers(self):
        self.each_kind("--http-1.0")
        self.assertIn("closes its connection after answers", self.wsyncd_log())

    def test_servers_that_close_after_every_answer(self):
        self.each_kind("--close-after", "1")

    def test_servers_that_close_after_a_few_answers(self):
        # Learned pipelining at the probe; the 5th answer of a connection closes it with buckets
        # pipelined behind: those go again, and none twice (the bytes prove it).
        self.each_kind("--close-after", "5")

    def test_engines_behind_a_proxy_that_closes_idle_connections(self):
        # wsyncd keeps no connection between updates (each update opens its own), so a proxy's
        # idle close between them meets nothing; the updates go through it and commit.
        for kind in KINDS:
            with self.subTest(kind=kind):
                port = self.engine(kind)
                proxy = free_port()
                self.spawn(f"proxy-{proxy}", [sys.executable, PROXY, "--port", str(proxy),
                                              "--upstream-port", str(port), "--idle-ms", "300"])
                wait_port(proxy)
                # The store admits only the ranks of the process that serves the engine's URL,
                # here the proxy: vLLM's ranks join by unique id instead, as the refusal says.
                extra = ["--vllm-rendezvous", "unique-id"] if kind == "vllm" else []
                self.updates_commit(kind, port, f"http://127.0.0.1:{proxy}", pause_s=0.6,
                                    extra=extra)
                with open(os.path.join(self.dir, f"proxy-{proxy}.log")) as f:
                    self.assertGreaterEqual(f.read().count("accepted a connection"), 3)


class SglangRoutesTest(HttpHabitsTest):
    test_http_1_0_servers = None  # the parent's tests run once, there
    test_a_document_that_lists_only_some_routes = None
    test_servers_that_close_after_every_answer = None
    test_servers_that_close_after_a_few_answers = None
    test_engines_behind_a_proxy_that_closes_idle_connections = None

    def push(self, port, version, seed):
        with wsync.Client("unix:" + self.sock) as client:
            result = client.push(model(seed), version=version, group="sglang")
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        ranks = self.checksums(port)["ranks"]
        for tensors in ranks.values():
            for item in model(seed):
                self.assertEqual(tensors.get(item[0]), crc(item), item[0])
        return result

    def test_a_server_without_the_version_route_takes_the_version_on_the_last_bucket(self):
        port = self.engine("sglang", "--missing-route", "/update_weight_version")
        self.ctl_ok("create-group", "sglang", "--kind", "sglang", "--transport", "broadcast",
                 "--engine", f"http://127.0.0.1:{port}#2")
        for round_ in (1, 2):
            result = self.push(port, f"v{round_}", round_)
            self.assertEqual(result["engines"][0]["warnings"], [])
            self.assertEqual(self.checksums(port)["weight_version"], f"v{round_}")
        self.assertIn("serves no /update_weight_version", self.wsyncd_log())

    def test_the_label_and_the_flush_ride_on_the_last_bucket(self):
        # As SGLang's own trainers send them: the commit then only resumes generation.
        port = self.engine("sglang")
        self.ctl_ok("create-group", "sglang", "--kind", "sglang", "--transport", "broadcast",
                 "--engine", f"http://127.0.0.1:{port}#2")
        for round_ in (1, 2):
            result = self.push(port, f"v{round_}", round_)
            self.assertEqual(result["engines"][0]["warnings"], [])
            state = self.checksums(port)
            self.assertEqual(state["weight_version"], f"v{round_}")
            self.assertEqual(state["request_flushes"], round_, "the last bucket's, only")
            self.assertEqual(state["route_calls"], {})

    def test_a_label_route_that_fails_leaves_the_update_committed_with_a_warning(self):
        # A build that ignores the label in update requests: the commit sets it.
        port = self.engine("sglang", "--fail-route", "/update_weight_version",
                           "--label-in-request-ignored")
        self.ctl_ok("create-group", "sglang", "--kind", "sglang", "--transport", "broadcast",
                 "--engine", f"http://127.0.0.1:{port}#2")
        result = self.push(port, "v1", 1)
        warnings = result["engines"][0]["warnings"]
        self.assertEqual(len(warnings), 1, result)
        self.assertIn("version 'v1' committed (every byte landed), but its label was not set",
                      warnings[0])
        self.assertIn("/update_weight_version answered success=false (HTTP 500)", warnings[0])
        self.assertIn("committed version 'v1' with a warning", self.wsyncd_log())
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
            metrics = r.read().decode()
        self.assertRegex(metrics, r'wsync_engine_warnings_total\{[^}]*engine="http://127\.0\.0\.1:'
                         + str(port) + r'"[^}]*\} 1')
        self.assertRegex(metrics, r'wsync_updates_total\{[^}]*outcome="committed"[^}]*\} 1')

    def test_a_server_without_a_route_every_update_calls_is_refused_before_any_byte(self):
        port = self.engine("sglang", "--missing-route", "/flush_cache")
        refusal = self.refusal_at_formation("sglang", port)
        self.assertIn("(SGLang 0.5.6): it serves no POST /flush_cache (its OpenAPI document does "
                      "not list them, and asked with OPTIONS the server does not serve them",
                      refusal)
        ranks = self.checksums(port)["ranks"]
        self.assertTrue(all(tensors == {} for tensors in ranks.values()), ranks)


class VllmRoutesTest(SglangRoutesTest):
    test_the_label_and_the_flush_ride_on_the_last_bucket = None
    test_a_server_without_the_version_route_takes_the_version_on_the_last_bucket = None
    test_a_label_route_that_fails_leaves_the_update_committed_with_a_warning = None
    test_a_server_without_a_route_every_update_calls_is_refused_before_any_byte = None

    def test_a_server_without_its_finishing_route_is_refused_before_any_byte(self):
        # /finish_weight_update is called only after the last bucket: without the document's
        # word, every byte would land and then the commit fail.
        port = self.engine("vllm", "--missing-route", "/finish_weight_update")
        refusal = self.refusal_at_formation("vllm", port)
        self.assertIn("it serves no POST /finish_weight_update (its OpenAPI document does not "
                      "list them, and asked with OPTIONS the server does not serve them either), "
                      "which every update of this group calls: refused before any byte is sent",
                      refusal)
        state = self.checksums(port)
        self.assertNotIn("update", state["calls"], state["calls"])


if __name__ == "__main__":
    unittest.main()
