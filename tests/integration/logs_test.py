"""wsyncd's logs for collectors (--log-format json): every line wsyncd writes is one JSON object,
and each update ends in one line with its outcome and timings as fields.

Usage: logs_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_SIM
"""

import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import (HostWsyncdCase, client_test_arguments, free_port,  # noqa: E402
                             mixed_dtype_model, sglang_engine, wait_port)

_, _, _, _, SGLANG_SIM = client_test_arguments()
SGLANG_SIM = sglang_engine(SGLANG_SIM)

import wsync  # noqa: E402


class JsonLogsTest(HostWsyncdCase):
    WSYNCD_FLAGS = ["--log-format", "json"]

    def log_lines(self):
        with open(os.path.join(self.dir, "wsyncd.log")) as f:
            return [line for line in f.read().splitlines() if line]

    def test_every_line_is_json_and_each_update_has_one_line_with_its_timings(self):
        port = free_port()
        self.spawn("engine", [*SGLANG_SIM, "--port", str(port), "--tp", "2"])
        wait_port(port)
        out = self.ctl("create-group", "g", "--engine", f"http://127.0.0.1:{port}#2")
        self.assertEqual(out.returncode, 0, out.stderr)
        model = mixed_dtype_model(1)
        with wsync.Client("unix:" + self.sock, device=0) as client:
            result = client.push(model, version="v1", group="g")
        deadline = time.time() + 5
        updates = []
        while time.time() < deadline and not updates:
            records = [json.loads(line) for line in self.log_lines()]
            updates = [r for r in records if r.get("event") == "update"]
            time.sleep(0.05)
        for record in records:
            self.assertLessEqual({"ts", "level", "msg"}, set(record), record)
        self.assertEqual(len(updates), 1, updates)
        u = updates[0]
        self.assertEqual((u["group"], u["version"], u["outcome"], u["status"], u["level"]),
                         ("g", "v1", "committed", "OK", "info"))
        self.assertEqual(u["buckets"], result["buckets"])
        self.assertEqual(u["bytes"], sum(item[1].nbytes for item in model))
        for key in ("seconds", "gib_per_second", "first_launch_seconds", "verify_seconds",
                    "idle_seconds", "wire_seconds", "answer_seconds", "finish_seconds"):
            self.assertIsInstance(u[key], (int, float), key)
            self.assertGreaterEqual(u[key], 0, key)
        self.assertIn("update u", u["msg"])
        self.assertIn("GiB/s", u["msg"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
