"""wsyncd under systemd, without systemd: the unit and sysusers file checked by systemd's own
tools, and the notify protocol against a datagram socket of this test's own standing in for
systemd ($NOTIFY_SOCKET, $WATCHDOG_USEC): READY=1 only once the gRPC socket accepts, WATCHDOG=1
only while a health check over that socket succeeds, STOPPING=1 at SIGTERM and not on an admin
drain.

Usage: systemd_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SOURCE_DIR
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_support  # noqa: E402
from process_support import client_test_arguments  # noqa: E402

_, _, _, _, SOURCE_DIR = client_test_arguments()
UNIT = os.path.join(SOURCE_DIR, "deploy", "systemd", "wsyncd.service")
SYSUSERS = os.path.join(SOURCE_DIR, "deploy", "systemd", "wsync.sysusers")


class UnitFilesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-unit-")

    def verify(self, text):
        """systemd-analyze verify's complaints about a unit (its ExecStart made this build's)."""
        path = os.path.join(self.dir, "wsyncd.service")
        with open(path, "w") as f:
            f.write(text.replace("/usr/bin/wsyncd", process_support.WSYNCD))
        out = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
        return out.returncode, (out.stdout + out.stderr).strip()

    def test_the_unit_verifies_clean_and_a_broken_one_does_not(self):
        with open(UNIT) as f:
            unit = f.read()
        for line in ("Type=notify", "NotifyAccess=main", "WatchdogSec=30s",
                     "--socket-group wsync"):
            self.assertIn(line, unit)
        self.assertEqual(self.verify(unit), (0, ""))
        rc, said = self.verify(unit.replace("WatchdogSec=30s", "WatchdogSec=soon"))
        self.assertIn("Failed to parse sec value, ignoring: soon", said,
                      "the check must be able to fail")

    def test_sysusers_makes_the_socket_and_admin_groups(self):
        os.makedirs(os.path.join(self.dir, "etc"))  # an empty root file system
        with open(SYSUSERS) as f:
            out = subprocess.run(["systemd-sysusers", f"--root={self.dir}", "-"], stdin=f,
                                 capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(os.path.join(self.dir, "etc", "group")) as f:
            groups = {line.split(":")[0] for line in f}
        self.assertLessEqual({"wsync", "wsync-admin"}, groups)


class NotifyTest(unittest.TestCase):
    WATCHDOG_USEC = 400_000

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-notify-")
        self.notify_path = os.path.join(self.dir, "notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        # What the unit's StateDirectory=wsync gives wsyncd.
        self.state = os.path.join(self.dir, "state")
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path,
                   WATCHDOG_USEC=str(self.WATCHDOG_USEC), STATE_DIRECTORY=self.state)
        self.log = open(os.path.join(self.dir, "wsyncd.log"), "w")
        self.wsyncd = subprocess.Popen([process_support.WSYNCD, "--mode", "host", "--socket",
                                        self.sock, "--slot-bytes", "1MiB"], env=env,
                                       stdout=self.log, stderr=subprocess.STDOUT)

    def tearDown(self):
        if self.wsyncd.poll() is None:
            self.wsyncd.kill()
        self.wsyncd.wait()
        self.log.close()
        self.notify.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def next_message(self, timeout):
        self.notify.settimeout(timeout)
        try:
            return self.notify.recv(4096).decode()
        except socket.timeout:
            return None

    def messages_for(self, seconds):
        out = []
        deadline = time.time() + seconds
        while time.time() < deadline:
            m = self.next_message(max(0.01, deadline - time.time()))
            if m is not None:
                out.append(m)
        return out

    def accepts(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.sock)
                return True
            except OSError:
                return False

    def ctl(self, *args):
        return subprocess.run([process_support.WSYNCCTL, "--socket", self.sock, *args],
                              capture_output=True, text=True)

    def test_the_state_directory_is_systemds_locked_with_wsyncds_pid(self):
        first = self.next_message(20)
        self.assertIsNotNone(first, "no notification at all")
        self.assertTrue(first.startswith("READY=1"), first)
        with open(os.path.join(self.state, "lock")) as f:
            self.assertEqual(f.read(), f"{self.wsyncd.pid}\n")
        self.assertEqual(os.stat(self.state).st_mode & 0o777, 0o700)

    def test_ready_after_the_socket_accepts_watchdog_while_it_answers_stopping_at_sigterm(self):
        first = self.next_message(20)
        self.assertIsNotNone(first, "no notification at all")
        self.assertTrue(first.startswith("READY=1"), first)
        # The socket already accepted when READY came (nothing raced it into existence since).
        self.assertTrue(self.accepts())
        self.assertIn("STATUS=serving on unix:" + self.sock, first)

        fed = [m for m in self.messages_for(1.5) if m == "WATCHDOG=1"]
        self.assertGreaterEqual(len(fed), 4, "fed about every 200 ms")

        # An admin drain can be undone: systemd hears nothing of it, and the watchdog goes on.
        self.assertEqual(self.ctl("drain", "--timeout", "2").returncode, 0)
        during = self.messages_for(1.0)
        self.assertNotIn("STOPPING=1", "".join(during))
        self.assertIn("WATCHDOG=1", during)
        self.assertEqual(self.ctl("undrain").returncode, 0)

        # The socket gone (a daemon no longer accepting): no more feeding.
        os.unlink(self.sock)
        self.messages_for(0.5)  # what was already on its way
        starved = self.messages_for(1.5)
        self.assertNotIn("WATCHDOG=1", starved)
        self.assertEqual(self.wsyncd.poll(), None, "alive: only systemd would restart it")

        self.wsyncd.send_signal(signal.SIGTERM)
        rest = self.messages_for(3)
        self.assertTrue(any(m.startswith("STOPPING=1") for m in rest), rest)
        self.assertEqual(self.wsyncd.wait(timeout=30), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
