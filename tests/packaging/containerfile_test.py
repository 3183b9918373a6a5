"""deploy/Containerfile checked without building it (no image can be pulled where CI runs): every
library the shipped binaries name (DT_NEEDED), read from this build's binaries and mapped to its
Debian package with dpkg -S, is installed by the runtime stage or is part of Debian's slim base;
each binary the runtime stage copies is one the builder builds; and the builder builds the CUDA
mode that the DaemonSet's config asks for.

Usage: containerfile_test.py SOURCE_DIR BINARY...
"""

import json
import os
import re
import subprocess
import sys
import unittest

SOURCE = sys.argv[1]
BINARIES = sys.argv[2:]
del sys.argv[1:]
CONTAINERFILE = os.path.join(SOURCE, "deploy", "Containerfile")
DAEMONSET = os.path.join(SOURCE, "deploy", "kubernetes", "wsyncd-daemonset.yaml")
# In debian:12-slim already (Priority: required, or what apt itself needs).
SLIM_BASE = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def stages(text):
    """The Containerfile's stages: [(name, text)], in order."""
    parts = re.split(r"^FROM\s+", text, flags=re.MULTILINE)[1:]
    return [(p.split("\n", 1)[0], p) for p in parts]


def installed_packages(stage_text):
    """Every package an `apt-get install` of the stage names."""
    joined = stage_text.replace("\\\n", " ")
    names = set()
    for command in re.findall(r"apt-get install ([^&;\n]*)", joined):
        # A pinned package is name=version.
        names.update(t.split("=")[0] for t in command.split()
                     if not t.startswith("-") and "$" not in t.split("=")[0])
    return names


def needed(binary):
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def package_of(soname):
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in cache.splitlines():
        fields = line.split()
        if fields and fields[0] == soname and "x86-64" in line:
            path = fields[-1]
            for candidate in (os.path.realpath(path), path):
                out = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                if out.returncode == 0:
                    return out.stdout.split(":")[0].strip()
    return None


def missing_libraries(containerfile_text, binaries):
    """[(binary, soname, package)] for each library a binary names that the runtime stage does not
    install."""
    runtime = stages(containerfile_text)[-1][1]
    have = installed_packages(runtime) | SLIM_BASE
    missing = []
    for binary in binaries:
        for soname in needed(binary):
            package = package_of(soname)
            if package not in have:
                missing.append((os.path.basename(binary), soname, package))
    return missing


class ContainerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(CONTAINERFILE) as f:
            cls.text = f.read()

    def test_every_library_the_binaries_name_is_installed_by_the_runtime_stage(self):
        self.assertEqual(missing_libraries(self.text, BINARIES), [])
        # The check can fail: without libzmq5 wsyncd's libzmq.so.5 is named.
        without = self.text.replace(" libzmq5 ", " ")
        self.assertIn(("wsyncd", "libzmq.so.5", "libzmq5"),
                      missing_libraries(without, [b for b in BINARIES
                                                  if os.path.basename(b) == "wsyncd"]))

    def test_what_the_runtime_stage_copies_is_what_the_builder_builds(self):
        build, runtime = stages(self.text)[0][1], stages(self.text)[-1][1]
        targets = set(re.search(r"--target ([^\n&]+)", build).group(1).split())
        copied = set(re.findall(r"/src/build/(?:daemon|client)/([\w.+-]+)",
                                runtime.replace("\\\n", " ")))
        self.assertTrue(copied, "the runtime stage copies binaries from the builder")
        for name in copied:
            self.assertIn(name, targets, f"{name} is copied but not built")
        self.assertEqual({os.path.basename(b) for b in BINARIES}, copied,
                         "the test reads the binaries the image ships")

    def test_the_builder_builds_the_mode_the_daemonset_runs(self):
        with open(DAEMONSET) as f:
            daemonset = f.read()
        config = re.search(r"wsyncd\.json: \|\n((?:    .*\n)+)", daemonset).group(1)
        config = re.sub(r"^\s*//.*$", "", config, flags=re.MULTILINE)
        mode = json.loads(config)["mode"]
        build = stages(self.text)[0][1]
        if mode == "cuda":
            self.assertIn("-DWSYNC_CUDA=ON", build, "a CUDA-mode DaemonSet needs a CUDA build")
            self.assertIn("cuda-nvcc", build)
            self.assertIn("libnccl2", installed_packages(stages(self.text)[-1][1]),
                          "CUDA mode loads NCCL at run time")
        else:
            self.assertEqual(mode, "host")


if __name__ == "__main__":
    unittest.main()
