"""The GPUs a build serves, read from the binary itself: every fat binary in the ELF section
.nv_fatbin lists its entries (an ELF of machine code for one sm_XY, or PTX for one compute_XY),
and the architectures found must be exactly those CMAKE_CUDA_ARCHITECTURES asked for ("80-real":
sm_80 code only, "90-virtual": compute_90 PTX only, "90": both). cuobjdump --list-elf and
--list-ptx read the same headers; the build machines have the compiler but not cuobjdump.

The fat binary layout (little-endian), as nvcc writes it:
  header  u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries after it
  entry   u16 kind (1 PTX, 2 ELF), u16 flags, u32 header size, u64 payload size, u32, u32,
          u16 minor, u16 major version of the format, u32 architecture (80 for sm_80), ...
Entries follow one another (header, then payload); fat binaries follow one another in the section.

Usage: cuda_architectures_test.py "ARCHITECTURES" BINARY...
       cuda_architectures_test.py --list BINARY...   # "elf 80 86 89 90; ptx 90" per binary
"""

import os
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50


def fatbin_entries(section):
    """(kind, arch) of every entry of every fat binary in `section`."""
    entries, at = [], 0
    while at + 16 <= len(section):
        magic, _version, header, size = struct.unpack_from("<IHHQ", section, at)
        if magic != FATBIN_MAGIC:
            raise ValueError(f"no fat binary header at byte {at} of .nv_fatbin")
        entry, end = at + header, at + header + size
        while entry + 32 <= end:
            kind, _flags, entry_header, payload = struct.unpack_from("<HHIQ", section, entry)
            arch = struct.unpack_from("<I", section, entry + 28)[0]
            entries.append(({1: "ptx", 2: "elf"}.get(kind, f"kind {kind}"), arch))
            entry += entry_header + payload
        at = end
    return entries


def expected(architectures):
    elf, ptx = set(), set()
    for a in architectures.split(";"):
        number, _, how = a.partition("-")
        if how in ("", "real"):
            elf.add(int(number))
        if how in ("", "virtual"):
            ptx.add(int(number))
    return elf, ptx


def read_entries(binary):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fatbin")
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", binary, out],
                       check=True)
        with open(out, "rb") as f:
            return fatbin_entries(f.read())


def found(entries):
    """The architectures with machine code and those with PTX, as two sets."""
    return ({arch for kind, arch in entries if kind == "elf"},
            {arch for kind, arch in entries if kind == "ptx"})


def listing(binary):
    """One line, as the GPU machine's cross-check with cuobjdump compares it:
    "elf 80 86; ptx 90"."""
    elf, ptx = found(read_entries(binary))
    return f"elf {' '.join(map(str, sorted(elf)))}; ptx {' '.join(map(str, sorted(ptx)))}"


def check(binary, architectures):
    entries = read_entries(binary)
    found_elf, found_ptx = found(entries)
    want_elf, want_ptx = expected(architectures)
    print(f"{binary}: {len(entries)} entries; machine code for "
          f"{', '.join(f'sm_{a}' for a in sorted(found_elf)) or 'none'}; PTX for "
          f"{', '.join(f'compute_{a}' for a in sorted(found_ptx)) or 'none'}")
    if (found_elf, found_ptx) != (want_elf, want_ptx):
        print(f"FAIL: CMAKE_CUDA_ARCHITECTURES '{architectures}' asks for machine code for "
              f"{sorted(want_elf)} and PTX for {sorted(want_ptx)}")
        return False
    return True


def main():
    if sys.argv[1] == "--list":
        for binary in sys.argv[2:]:
            print(listing(binary))
        return 0
    architectures, binaries = sys.argv[1], sys.argv[2:]
    results = [check(b, architectures) for b in binaries]
    return 0 if binaries and all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
