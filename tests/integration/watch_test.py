"""What an operator sees of an update while it runs, captured in a real terminal (tmux): `wsyncctl
watch` during an update slowed down on purpose (the simulator's answer delay), showing bucket k
of n, GiB/s, each engine's answers and the slowest engine; the progress bars of wsync-push and the
Python client on a terminal; and `wsyncctl doctor`'s checks, healthy and with an engine down.

Usage: watch_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_SIM WSYNC_PUSH
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_support  # noqa: E402
from process_support import (HostWsyncdCase, client_test_arguments, free_port,  # noqa: E402
                             sglang_engine, wait_port)

_, _, LIB, PKG, SGLANG_SIM = client_test_arguments()
SGLANG_SIM = sglang_engine(SGLANG_SIM)
WSYNC_PUSH = sys.argv.pop(1)

import numpy as np  # noqa: E402
import wsync  # noqa: E402


class TerminalCase(HostWsyncdCase):
    def setUp(self):
        super().setUp()
        self.sessions = []
        self.ports = []
        for i in range(2):
            port = free_port()
            self.spawn(f"engine{i}", [*SGLANG_SIM, "--port", str(port)])
            wait_port(port)
            self.ports.append(port)
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        out = self.ctl("create-group", "g", *[x for u in self.urls for x in ("--engine", u)])
        self.assertEqual(out.returncode, 0, out.stderr)
        rng = np.random.default_rng(3)
        # Eight buckets at 1 MiB slots.
        self.model = [(f"layer{i}", rng.standard_normal(200_000).astype(np.float32))
                      for i in range(8)]

    def tearDown(self):
        for s in self.sessions:
            subprocess.run(["tmux", "kill-session", "-t", s], capture_output=True)
        super().tearDown()

    knobs = staticmethod(process_support.sim_knobs)

    def terminal(self, command, env=None):
        """Runs `command` (argv) in a fresh 160x50 tmux session; returns its name."""
        name = f"wsync-{os.getpid()}-{len(self.sessions)}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        line = (f"env {exports} " if exports else "") + " ".join(shlex.quote(c) for c in command)
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "50",
                        line + "; sleep 30"], check=True)
        self.sessions.append(name)
        return name

    def screen(self, name):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True,
                              text=True).stdout

    def wait_screen(self, name, pattern, timeout=20):
        deadline = time.time() + timeout
        text = ""
        while time.time() < deadline:
            text = self.screen(name)
            if re.search(pattern, text):
                return text
            time.sleep(0.1)
        self.fail(f"never saw {pattern!r} on the terminal:\n{text}")


class WatchTest(TerminalCase):
    def test_watch_shows_the_running_update_bucket_by_bucket_and_the_slowest_engine(self):
        # Slots recycle at the pace of the wire, so all eight requests may wait at an engine at
        # once: 8 x 250 ms stays inside the test's 3 s bucket deadline.
        self.knobs(self.ports[0], answer_delay_ms=80)
        self.knobs(self.ports[1], answer_delay_ms=250)  # the slow one
        done = {}
        pusher = threading.Thread(target=lambda: done.update(self.push()), daemon=True)
        pusher.start()
        watch = self.terminal([process_support.WSYNCCTL, "--socket", self.sock, "watch",
                               "--interval", "0.2"])
        text = self.wait_screen(watch, r"bucket [1-7]/8 ")
        self.assertRegex(text, r"update u\d+\s+group g\s+version 'v1'")
        self.assertRegex(text, r"\[#+\.+\] bucket [1-7]/8 +\d+\.\d\d/0\.01 GiB +\d+\.\d\d GiB/s")
        for url in self.urls:
            self.assertRegex(text, re.escape(url) + r" +receiving +[1-7] ")
        self.assertIn(f"slowest engine: {self.urls[1]}", text)
        pusher.join(timeout=30)
        self.assertEqual(done.get("buckets"), 8)
        self.wait_screen(watch, r"0 update\(s\) running")

    def push(self):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            return client.push(self.model, version="v1", group="g", progress=False)

    def test_wsync_push_draws_one_bar_on_a_terminal(self):
        term = self.terminal([WSYNC_PUSH, "--socket", self.sock, "--group", "g", "--model-gib",
                              "0.01"])
        text = self.wait_screen(term, r"committed")
        self.assertRegex(text, r"\[#{24}\] bucket (\d+)/\1 ")
        self.assertNotIn("  bucket   1/", text, "no per-bucket log lines on a terminal")

    @unittest.skipIf(process_support.SANITIZED,
                     "a sanitized client library loads only where the test preloads ASan")
    def test_the_python_client_draws_a_bar_on_a_terminal_and_none_in_a_pipe(self):
        script = (f"import numpy as np, wsync\n"
                  f"model = [('w%d' % i, np.ones(200000, np.float32)) for i in range(4)]\n"
                  f"with wsync.Client('unix:{self.sock}', device=0) as c:\n"
                  f"    r = c.push(model, version='v9', group='g')\n"
                  f"print('done', r['buckets'])\n")
        env = {"PYTHONPATH": PKG, "WSYNC_CLIENT_LIB": LIB}
        term = self.terminal(["/usr/bin/python3", "-c", script], env=env)
        text = self.wait_screen(term, r"done 4")
        self.assertRegex(text, r"\[#{24}\] bucket 4/4 +0\.00/0\.00 GiB")
        piped = subprocess.run(["/usr/bin/python3", "-c", script.replace("v9", "v10")],
                               capture_output=True, text=True, env=dict(os.environ, **env))
        self.assertEqual(piped.returncode, 0, piped.stderr)
        self.assertNotIn("[#", piped.stderr + piped.stdout)


class DoctorTest(TerminalCase):
    def test_doctor_passes_a_healthy_node_and_fails_naming_a_dead_engine(self):
        with wsync.Client("unix:" + self.sock, device=0) as client:
            client.push(self.model, version="v1", group="g", progress=False)
        ok = self.ctl("doctor")
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        for check in ("daemon", "GPUs", "GPU sharing", "NCCL", "group g store", "last update"):
            self.assertRegex(ok.stdout, rf"(?m)^{re.escape(check)} +OK ", check)
        for url in self.urls:
            self.assertRegex(ok.stdout, rf"engine {re.escape(url)} +OK +sglang")
        self.assertRegex(ok.stdout, r"committed \d+ s ago")
        self.procs["engine1"].send_signal(signal.SIGKILL)
        self.procs["engine1"].wait()
        bad = self.ctl("--json", "doctor")
        self.assertEqual(bad.returncode, 1, bad.stdout)
        results = {c["check"]: c for c in json.loads(bad.stdout)}
        self.assertEqual(results[f"engine {self.urls[1]}"]["result"], "FAIL")
        self.assertEqual(results[f"engine {self.urls[0]}"]["result"], "OK")


if __name__ == "__main__":
    unittest.main(verbosity=2)
