#!/usr/bin/env python3
"""Independent check of `ampctl export --format safetensors`.

usage: checkpoint_safetensors_check.py CHECKPOINT.json MODEL.safetensors

Reads both files with the Python standard library only (json, struct, base64, zlib; numpy is
used for a second look when it is installed) and checks that the safetensors file holds every
model tensor of the checkpoint with the same dtype, shape, bytes and values, in the layout the
format prescribes: an 8-byte little-endian header length N, N bytes of JSON padded with spaces
to a multiple of 8, then the tensors contiguous in header order. Exits 0 and prints "ok: ..."
on success, 1 with the first problem otherwise.
"""
import base64
import json
import math
import struct
import sys
import zlib

DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "i32": "I32"}
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4}


def values(raw, dtype):
    n = len(raw) // SIZES[dtype]
    if dtype == "BF16":  # struct has no bfloat16: it is the top half of a float32
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack("<%dH" % n, raw)]
    code = {"F32": "f", "F16": "e", "I32": "i"}[dtype]
    return list(struct.unpack("<%d%s" % (n, code), raw))


def same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def check(ckpt_path, st_path):
    with open(ckpt_path, encoding="utf-8") as f:
        ckpt = json.load(f)
    with open(st_path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        return "file shorter than the 8-byte header length"
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8 != 0:
        return "header length %d is not a multiple of 8" % n
    if 8 + n > len(blob):
        return "header length %d runs past the end of the file" % n
    text = blob[8:8 + n].decode("utf-8")
    if not text.startswith("{") or text.rstrip(" ") != text.rstrip():
        return "header must start with '{' and be padded with spaces only"
    header = json.loads(text)
    body = blob[8 + n:]
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if meta.get("format") != "pt":
            return "__metadata__.format is %r, expected 'pt'" % meta.get("format")
        if not all(isinstance(v, str) for v in meta.values()):
            return "__metadata__ values must all be strings"
    stored = ckpt["model"]["tensors"]
    if list(header) != list(stored):
        return "tensor names/order differ: %s vs %s" % (list(header), list(stored))
    end = 0
    compared = 0
    for name, entry in header.items():
        ref = stored[name]
        if entry["dtype"] != DTYPES[ref["dtype"]]:
            return "%s: dtype %s, checkpoint has %s" % (name, entry["dtype"], ref["dtype"])
        if entry["shape"] != ref["shape"]:
            return "%s: shape %s, checkpoint has %s" % (name, entry["shape"], ref["shape"])
        begin, stop = entry["data_offsets"]
        if begin != end or stop < begin:
            return "%s: data_offsets %s not contiguous after %d" % (name, entry["data_offsets"], end)
        end = stop
        raw = base64.b64decode(ref["data"], validate=True)
        if "%08x" % zlib.crc32(raw) != ref["crc32"]:
            return "%s: the checkpoint's crc32 %s does not match zlib's %08x" % (
                name, ref["crc32"], zlib.crc32(raw))
        numel = 1
        for d in ref["shape"]:
            numel *= d
        if len(raw) != numel * SIZES[entry["dtype"]]:
            return "%s: %d bytes for shape %s" % (name, len(raw), ref["shape"])
        got = body[begin:stop]
        if got != raw:
            return "%s: bytes differ from the checkpoint's" % name
        a, b = values(got, entry["dtype"]), values(raw, entry["dtype"])
        for i, (x, y) in enumerate(zip(a, b)):
            if not same(x, y):
                return "%s[%d]: %r vs %r" % (name, i, x, y)
        compared += len(a)
    if end != len(body):
        return "data section is %d bytes, tensors cover %d" % (len(body), end)
    extra = ""
    try:
        import numpy as np  # optional second reader
        kinds = {"F32": np.float32, "F16": np.float16, "I32": np.int32}
        for name, entry in header.items():
            if entry["dtype"] in kinds:
                begin, stop = entry["data_offsets"]
                arr = np.frombuffer(body[begin:stop], dtype=np.dtype(kinds[entry["dtype"]]).newbyteorder("<"))
                ref = values(base64.b64decode(stored[name]["data"]), entry["dtype"])
                if not all(same(float(x) if entry["dtype"] != "I32" else int(x), y)
                           for x, y in zip(arr.tolist(), ref)):
                    return "%s: numpy reads different values" % name
        extra = ", numpy agrees"
    except ImportError:
        extra = " (numpy absent: struct only)"
    print("ok: %d tensors, %d values compared%s" % (len(header), compared, extra))
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    problem = check(sys.argv[1], sys.argv[2])
    if problem:
        print("FAIL: " + problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
