"""What the Python integration tests share: the sanitized build's environment for the processes
they start, their command line, host mode's GPU stand-ins, tensors' CRCs, and free / awaited TCP
ports on loopback."""

import json
import os
import subprocess
import socket
import sys
import tempfile
import time
import unittest
import zlib

# Set by client_test_arguments: the binaries HostWsyncdCase runs.
WSYNCD = None
WSYNCCTL = None
# A sanitized build's test: its libwsync_client.so loads only into an interpreter that preloads
# the sanitizer's runtime, which only this test's own interpreter does.
SANITIZED = "WSYNC_CHILD_ASAN_OPTIONS" in os.environ


def host_gpu(device):
    """Host mode's stand-in UUID of a device (common/host/host_platform.h)."""
    return f"686f7374-0000-0000-0000-{device:012d}"


def crc(array):
    """A tensor's bytes as the engine simulators report them: CRC-32, 8 hex digits."""
    import numpy as np
    return format(zlib.crc32(np.ascontiguousarray(array).tobytes()), "08x")


def mixed_dtype_model(seed):
    """Five (name, array[, dtype]) tensors of int64, float32 and bfloat16, ordered so every
    tensor's offset is a multiple of its item size: the whole model is one bucket wherever dtypes
    may share one, and three (one per dtype run) where they may not."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return [
        ("model.layers.0.step", np.arange(5, dtype=np.int64)),
        ("model.norm.weight", rng.standard_normal(1001).astype(np.float32)),
        ("lm_head.weight", rng.standard_normal((64, 513)).astype(np.float32)),
        ("model.embed_tokens.weight", rng.integers(0, 2**16, size=(300, 70), dtype=np.uint16),
         "bfloat16"),
        ("model.layers.0.bias", rng.integers(0, 2**16, size=(4099,), dtype=np.uint16),
         "bfloat16"),
    ]


def sglang_engine(path):
    """The command line that starts SGLang's simulator at `path` on host memory (flags after)."""
    return [sys.executable, path, "--memory", "host"]


def client_test_arguments():
    """Takes WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SIMULATOR off the command line
    (unittest reads the rest), points the Python client at its library and returns the five."""
    global WSYNCD, WSYNCCTL
    child_environment()
    taken = sys.argv[1:6]
    del sys.argv[1:6]
    WSYNCD, WSYNCCTL = taken[0], taken[1]
    os.environ["WSYNC_CLIENT_LIB"] = taken[2]
    sys.path.insert(0, taken[3])
    return taken


class HostWsyncdCase(unittest.TestCase):
    """A host-mode wsyncd per test (1 MiB slots, 3 s bucket deadline, WSYNCD_FLAGS added), the
    processes a test spawns (logs in its own folder, ended after it) and wsyncctl against it."""

    WSYNCD_FLAGS = []

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-test-")
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        self.procs = {}
        self.spawn("wsyncd", [WSYNCD, "--mode", "host", "--socket", self.sock,
                              "--slot-bytes", "1MiB", "--bind-address", "127.0.0.1",
                              "--bucket-timeout", "3", *self.WSYNCD_FLAGS])
        deadline = time.time() + 10
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)

    def tearDown(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            p.wait(timeout=20)

    def spawn(self, name, argv):
        with open(os.path.join(self.dir, name + ".log"), "a") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                env=state_environment(self.dir))

    def wait_log(self, text, timeout=15):
        """Waits until wsyncd's log holds `text`; fails the test at the timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(os.path.join(self.dir, "wsyncd.log"), errors="replace") as log:
                if text in log.read():
                    return
            time.sleep(0.05)
        self.fail(f"wsyncd's log never said {text!r} within {timeout} s")

    def ctl(self, *args):
        return subprocess.run([WSYNCCTL, "--socket", self.sock, *args], capture_output=True,
                              text=True)

    def assert_engine_shown(self, kind, version, variant, index=0):
        """`wsyncctl --json engines` names engine `index`'s kind, version and variant, and the
        table shows the variant."""
        listed = self.ctl("--json", "engines")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        engine = json.loads(listed.stdout)["engines"][index]
        self.assertEqual((engine.get("kind"), engine.get("engine_version"), engine.get("variant")),
                         (kind, version, variant), engine)
        self.assertIn(variant, self.ctl("engines").stdout)


def sim_state(port):
    """An engine simulator's /sim/checksums: what each rank holds, and its state."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
        return json.loads(r.read())


def sim_knobs(port, **knobs):
    """Sets an engine simulator's fault knobs (POST /sim/knobs)."""
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}/sim/knobs",
                                 data=json.dumps(knobs).encode(), method="POST")
    urllib.request.urlopen(req).read()


def child_environment():
    """The sanitized build preloads ASan's runtime into the test's interpreter only: the processes
    it starts (sanitized executables with a runtime of their own) take the options as given.
    A wsyncd started without --state-dir keeps its records under $XDG_STATE_HOME (or root's
    /var/lib/wsync): this test's own folder, never the user's nor another test's."""
    if "WSYNC_CHILD_ASAN_OPTIONS" in os.environ:
        os.environ.pop("LD_PRELOAD", None)
        os.environ["ASAN_OPTIONS"] = os.environ.pop("WSYNC_CHILD_ASAN_OPTIONS")
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="wsync-state-home-")


def state_environment(folder):
    """The environment for a wsyncd of its own: its default state directory in `folder`, so that
    a wsyncd after it finds none of its groups (one wsyncd per state directory)."""
    return dict(os.environ, XDG_STATE_HOME=os.path.join(folder, "state-home"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")
