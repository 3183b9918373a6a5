"""Carries libwsync_client.so into the package when it can be found at build time.

The library is looked for, in order, at $WSYNC_CLIENT_LIB and in this checkout's build tree
(build/client/libwsync_client.so). Found, it is copied next to wsync/__init__.py, where the loader
looks first, and the wheel is marked as platform-specific. Not found, the package installs
without it and loads the library at run time from $WSYNC_CLIENT_LIB or the linker's path.

    pip install ./client/python                      # with network access for setuptools
    pip install --no-build-isolation ./client/python # offline, with setuptools installed
"""

import os
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent
LIBRARY = "libwsync_client.so"


def find_library():
    env = os.environ.get("WSYNC_CLIENT_LIB")
    candidates = [pathlib.Path(env)] if env else []
    candidates.append(HERE.parent.parent / "build" / "client" / LIBRARY)
    return next((c for c in candidates if c.is_file()), None)


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        library = find_library()
        target = pathlib.Path(self.build_lib) / "wsync" / LIBRARY
        if library is None:
            print(f"wsync: {LIBRARY} not found at build time (set WSYNC_CLIENT_LIB); the package "
                  "will look for it when imported")
            return
        print(f"wsync: carrying {library}")
        shutil.copyfile(library, target)


class MaybeBinaryDistribution(Distribution):
    def has_ext_modules(self):
        # A wheel that carries a shared library is for this platform only.
        return find_library() is not None


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=MaybeBinaryDistribution)
