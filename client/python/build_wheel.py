"""Builds the Python client's wheel for machines that have no gRPC, protobuf or abseil: a trainer's
image (Ubuntu with a torch venv, say). The wheel carries libwsync_client.so and every shared
library it loads beyond those every Linux system has (glibc's, libstdc++, libgcc_s: the libraries
the manylinux policy leaves to the system), as auditwheel's repaired wheels do. Each carried
library finds the others next to it (RUNPATH $ORIGIN), libwsync_client.so finds them in
wsync/_libs, and the wheel's tag names the newest glibc any of them asks for
(manylinux_2_<N>_<arch>), so pip refuses it where that glibc is missing instead of failing at
import.

    python3 client/python/build_wheel.py --lib build/client/libwsync_client.so --out dist
    pip install dist/wsync-<version>-py3-none-manylinux_2_<N>_x86_64.whl

Needs ldd, patchelf and strip (Debian: libc-bin, patchelf, binutils); standard library only.
"""

import argparse
import base64
import hashlib
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
# Left to the system, as the manylinux policy leaves them: glibc's libraries and the C++ runtime.
SYSTEM_LIBRARIES = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libc.so.6", "libm.so.6",
    "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1", "libresolv.so.2",
    "libnsl.so.1", "libgcc_s.so.1", "libstdc++.so.6",
}
LIBRARY = "libwsync_client.so"
CARRIED = "_libs"


def version():
    text = (HERE / "pyproject.toml").read_text()
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not found:
        sys.exit("build_wheel: no version in pyproject.toml")
    return found.group(1)


def needed(library):
    """The libraries `library` loads (transitively), {soname: path}, less the system's."""
    out = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts or parts[0] in SYSTEM_LIBRARIES or os.path.basename(parts[0]) in \
                SYSTEM_LIBRARIES:
            continue
        if "=>" not in parts:
            continue
        path = parts[parts.index("=>") + 1]
        if path == "not":
            sys.exit(f"build_wheel: {library} needs {parts[0]}, which ldd did not find")
        found[parts[0]] = path
    return found


def newest_glibc(files):
    """The newest GLIBC_2.N symbol version any of `files` asks for, as (2, N)."""
    newest = (2, 17)
    for f in files:
        out = subprocess.run(["objdump", "-T", str(f)], capture_output=True, text=True,
                             check=True).stdout
        for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out):
            newest = max(newest, (int(major), int(minor)))
    return newest


def record_line(root, path):
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{len(data)}"


def build(lib, out_dir):
    ver = version()
    with tempfile.TemporaryDirectory(prefix="wsync-wheel-") as tmp:
        root = pathlib.Path(tmp)
        package = root / "wsync"
        shutil.copytree(HERE / "wsync", package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        carried = package / CARRIED
        carried.mkdir()
        shutil.copyfile(lib, package / LIBRARY)
        for soname, path in sorted(needed(lib).items()):
            shutil.copyfile(path, carried / soname)
        elves = [package / LIBRARY] + sorted(carried.iterdir())
        for elf in elves:
            elf.chmod(0o755)
            subprocess.run(["strip", "--strip-unneeded", str(elf)], check=True)
            rpath = f"$ORIGIN/{CARRIED}" if elf.parent == package else "$ORIGIN"
            subprocess.run(["patchelf", "--set-rpath", rpath, str(elf)], check=True)
        major, minor = newest_glibc(elves)
        tag = f"py3-none-manylinux_{major}_{minor}_{platform.machine()}"
        dist_info = root / f"wsync-{ver}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            "Metadata-Version: 2.1\n"
            "Name: wsync\n"
            f"Version: {ver}\n"
            "Summary: Python client of wsyncd, the weight-sync daemon for RL training\n"
            "Requires-Python: >=3.9\n"
            "Provides-Extra: numpy\n"
            "Requires-Dist: numpy; extra == \"numpy\"\n"
            "Provides-Extra: torch\n"
            "Requires-Dist: torch; extra == \"torch\"\n")
        (dist_info / "WHEEL").write_text(
            "Wheel-Version: 1.0\n"
            "Generator: wsync build_wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: {tag}\n")
        files = sorted(p for p in root.rglob("*") if p.is_file())
        record = [record_line(root, p) for p in files]
        record.append(f"wsync-{ver}.dist-info/RECORD,,")
        (dist_info / "RECORD").write_text("\n".join(record) + "\n")
        out_dir.mkdir(parents=True, exist_ok=True)
        wheel = out_dir / f"wsync-{ver}-{tag}.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
            # The dist-info last, as the wheel format recommends.
            for p in sorted(root.rglob("*"), key=lambda p: (p.is_relative_to(dist_info), p)):
                if p.is_file():
                    info = zipfile.ZipInfo.from_file(p, p.relative_to(root).as_posix())
                    with open(p, "rb") as f:
                        z.writestr(info, f.read(), zipfile.ZIP_DEFLATED)
        return wheel


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="the built libwsync_client.so")
    ap.add_argument("--out", required=True, help="the folder the wheel is written to")
    args = ap.parse_args()
    for tool in ("ldd", "patchelf", "strip", "objdump"):
        if shutil.which(tool) is None:
            sys.exit(f"build_wheel: {tool} is needed (Debian: apt install "
                     f"{'patchelf' if tool == 'patchelf' else 'binutils'})")
    print(build(pathlib.Path(args.lib), pathlib.Path(args.out)))


if __name__ == "__main__":
    main()
