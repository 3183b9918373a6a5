"""The clients where trainers are, each installed and used from a clean directory outside the
tree: the Python client with `pip install ./client/python` (into a fresh venv, offline, carrying
libwsync_client.so) pushing a model to a host-mode wsyncd, the same from the wheel that
client/python/build_wheel.py makes (carrying every library beyond the system's), and the C/C++
client installed by
`cmake --install` and found by a consumer project with find_package(wsync), whose C++ code
pushes a tensor through <wsync/wsync.hpp>.

Usage: packaging_test.py WSYNCD SGLANG_SIM LIBWSYNC_CLIENT SOURCE_DIR BUILD_DIR
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import urllib.request
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from process_support import child_environment, free_port, state_environment  # noqa: E402
from process_support import wait_port  # noqa: E402

child_environment()
WSYNCD, SGLANG_SIM, LIB, SOURCE, BUILD = sys.argv[1:6]
del sys.argv[1:6]


def run(argv, **kwargs):
    out = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stdout}\n"
                             f"{out.stderr}")
    return out


class PackagingTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="wsync-packaging-")
        self.sock = os.path.join(self.dir, "wsyncd.sock")
        self.procs = []
        self.spawn([WSYNCD, "--mode", "host", "--socket", self.sock, "--slot-bytes", "1MiB"])
        deadline = time.time() + 10
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)
        # Clean: nothing of the source tree or the build on the way.
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "WSYNC_CLIENT_LIB", "LD_LIBRARY_PATH")}

    def tearDown(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)

    def group_with_engine(self):
        """An SGLang simulator and a group "g" of it; returns its port."""
        port = free_port()
        self.spawn([sys.executable, SGLANG_SIM, "--memory", "host", "--port", str(port)])
        wait_port(port)
        run([os.path.join(BUILD, "client", "wsyncctl"), "--socket", self.sock, "create-group",
             "g", "--engine", f"http://127.0.0.1:{port}"])
        return port

    def spawn(self, argv):
        log = open(os.path.join(self.dir, f"proc{len(self.procs)}.log"), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=state_environment(self.dir)))

    def installed_in(self, venv):
        """Where the venv's python imports wsync from (inside the venv)."""
        installed = run([os.path.join(venv, "bin", "python"), "-c",
                         "import wsync, os; print(os.path.dirname(wsync.__file__))"],
                        env=self.env, cwd=self.dir).stdout.strip()
        self.assertTrue(installed.startswith(venv), installed)
        return installed

    def push_from(self, venv):
        """A push of one tensor with the venv's wsync, from a clean directory, to a group over an
        SGLang simulator: committed, in one bucket."""
        self.group_with_engine()
        script = textwrap.dedent(f"""
            import numpy as np, wsync
            model = [("w", np.arange(1000, dtype=np.float32))]
            with wsync.Client("unix:{self.sock}", device=0) as client:
                result = client.push(model, version="v1", group="g")
            print(result["buckets"], all(e["ok"] for e in result["engines"]))
            """)
        out = run([os.path.join(venv, "bin", "python"), "-c", script], env=self.env,
                  cwd=self.dir)
        self.assertEqual(out.stdout.split(), ["1", "True"])

    def test_pip_installs_the_python_client_which_pushes_from_a_clean_directory(self):
        venv = os.path.join(self.dir, "venv")
        # Debian's setuptools and wheel build the package offline (no PyPI here).
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv])
        pip = os.path.join(venv, "bin", "pip")
        # From a copy: setuptools writes its build files next to the package it builds.
        package = os.path.join(self.dir, "python")
        shutil.copytree(os.path.join(SOURCE, "client", "python"), package,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        run([pip, "install", "--no-build-isolation", "--no-index", package],
            env=dict(self.env, WSYNC_CLIENT_LIB=LIB), cwd=self.dir)
        installed = self.installed_in(venv)
        self.assertTrue(os.path.exists(os.path.join(installed, "libwsync_client.so")),
                        "the library travels with the package")

        self.push_from(venv)

    def test_the_wheel_carries_every_library_beyond_the_systems_and_pushes(self):
        # A trainer's image has no gRPC, protobuf or abseil: the wheel carries them, and the
        # installed library loads nothing from outside it but glibc and the C++ runtime.
        dist = os.path.join(self.dir, "dist")
        wheel = run(["/usr/bin/python3", os.path.join(SOURCE, "client", "python", "build_wheel.py"),
                     "--lib", LIB, "--out", dist], env=self.env).stdout.strip()
        self.assertRegex(os.path.basename(wheel),
                         r"^wsync-[0-9.]+-py3-none-manylinux_2_[0-9]+_x86_64\.whl$")
        venv = os.path.join(self.dir, "venv")
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv])
        run([os.path.join(venv, "bin", "pip"), "install", "--no-index", wheel], env=self.env,
            cwd=self.dir)
        installed = self.installed_in(venv)
        resolved = run(["ldd", os.path.join(installed, "libwsync_client.so")],
                       env=self.env).stdout
        system = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6",
                  "libgcc_s.so.1", "libstdc++.so.6", "libpthread.so.0", "libdl.so.2",
                  "librt.so.1"}
        outside = [line.strip() for line in resolved.splitlines()
                   if line.split() and os.path.basename(line.split()[0]) not in system
                   and installed not in line]
        self.assertEqual(outside, [], "loaded from outside the wheel")
        self.assertIn("libgrpc++.so", resolved)

        self.push_from(venv)

    def test_find_package_finds_the_installed_client_which_pushes_a_tensor(self):
        prefix = os.path.join(self.dir, "prefix")
        run(["cmake", "--install", BUILD, "--prefix", prefix])
        for path in ("include/wsync/wsync_c.h", "include/wsync/wsync.hpp",
                     "lib/cmake/wsync/wsyncConfig.cmake", "bin/wsyncd", "bin/wsyncctl"):
            self.assertTrue(os.path.exists(os.path.join(prefix, path)), path)
        consumer = os.path.join(self.dir, "consumer")
        shutil.copytree(os.path.join(SOURCE, "tests", "packaging", "consumer"), consumer)
        build = os.path.join(self.dir, "consumer-build")
        run(["cmake", "-S", consumer, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}"],
            env=self.env)
        run(["cmake", "--build", build], env=self.env)
        port = self.group_with_engine()
        out = run([os.path.join(build, "consumer"), "unix:" + self.sock, "g"], env=self.env)
        first, result = out.stdout.splitlines()
        self.assertRegex(first, r"^client \S+, slot bytes 1048576$")
        result = json.loads(result)
        self.assertEqual(result["buckets"], 1)
        self.assertTrue(all(e["ok"] for e in result["engines"]), result)
        # The engine holds the tensor's exact bytes: float32 0..999.
        want = format(zlib.crc32(struct.pack("<1000f", *range(1000))), "08x")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/checksums") as r:
            ranks = json.loads(r.read())["ranks"]
        self.assertEqual({rank: tensors["w"] for rank, tensors in ranks.items()}, {"1": want})


if __name__ == "__main__":
    unittest.main(verbosity=2)
