"""What the Python integration tests share: the sanitized build's environment for the processes
they start, and free / awaited TCP ports on loopback."""

import os
import socket
import time


def child_environment():
    """The sanitized build preloads ASan's runtime into the test's interpreter only: the processes
    it starts (sanitized executables with a runtime of their own) take the options as given."""
    if "WSYNC_CHILD_ASAN_OPTIONS" in os.environ:
        os.environ.pop("LD_PRELOAD", None)
        os.environ["ASAN_OPTIONS"] = os.environ.pop("WSYNC_CHILD_ASAN_OPTIONS")


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
