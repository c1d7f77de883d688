#!/usr/bin/python3
"""Lists the CUDA code a binary carries, read from its fat binaries (the .nv_fatbin data nvcc
embeds in objects, archives, shared libraries and executables), without cuobjdump.

A fat binary is a 16-byte header (magic 0xBA55ED50, version 1, header size 16, u64 size of what
follows) and entries laid end to end; each entry starts with u16 kind (1 = PTX, 2 = ELF cubin),
u16, u32 entry-header size, u64 payload size, and holds its target architecture as a u32 at
byte 28 (75 for sm_75 / compute_75). The payload follows the entry header. This is the layout
cuobjdump --list-elf / --list-ptx print from.

Usage: scripts/dev/fatbin_archs.py FILE...         prints "sass: 75,80,90" and "ptx: 90"
       scripts/dev/fatbin_archs.py --expect-sass 75,80,90 --expect-ptx 90 FILE...
           exits 1 (naming what differs) unless FILE's cubins and PTX are exactly those sets.
Python 3 standard library only.
"""
import argparse
import struct
import sys

MAGIC = struct.pack("<I", 0xBA55ED50)
KINDS = {1: "ptx", 2: "sass"}


def scan(data):
    """(kind, arch) of every entry of every fat binary in data; raises ValueError on a header
    that claims more bytes than the file holds."""
    found = []
    pos = data.find(MAGIC)
    while pos >= 0:
        version, header_size, size = struct.unpack_from("<HHQ", data, pos + 4)
        if version != 1 or header_size != 16:  # the bytes merely look like a magic
            pos = data.find(MAGIC, pos + 4)
            continue
        end = pos + header_size + size
        if end > len(data):
            raise ValueError(f"fat binary at offset {pos} claims {size} bytes past the file's end")
        entry = pos + header_size
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if kind not in KINDS or entry_header < 32:
                raise ValueError(f"unknown fat binary entry (kind {kind}) at offset {entry}")
            found.append((KINDS[kind], arch))
            entry += entry_header + payload
        pos = data.find(MAGIC, end)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--expect-sass", help="comma-separated sm_ numbers, e.g. 75,80,90")
    parser.add_argument("--expect-ptx", help="comma-separated compute_ numbers, e.g. 90")
    args = parser.parse_args()
    sets = {"sass": set(), "ptx": set()}
    for name in args.files:
        with open(name, "rb") as f:
            for kind, arch in scan(f.read()):
                sets[kind].add(arch)
    for kind in ("sass", "ptx"):
        print(f"{kind}: " + ",".join(str(a) for a in sorted(sets[kind])))
    failed = False
    for kind, expect in (("sass", args.expect_sass), ("ptx", args.expect_ptx)):
        if expect is None:
            continue
        want = {int(a) for a in expect.split(",") if a}
        if sets[kind] != want:
            print(f"error: {kind} is {sorted(sets[kind])}, the build records {sorted(want)}",
                  file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
