#!/usr/bin/python3
"""The weights hash of a safetensors checkpoint folder (docs/weights-hash.md, tensor-bytes-xxh3),
computed apart from qeval: the headers parsed here, each tensor's stored bytes hashed with the
system's libxxhash (XXH3-64) through ctypes, the lines combined in byte order of the names.

  bench/weights_hash.py FOLDER        # prints the 16 hex digits a qeval record's weights_hash has

Reads each tensor once, in file order; needs libxxhash.so.0 (Debian/Ubuntu: libxxhash0).
"""
import ctypes
import json
import os
import struct
import sys

xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(data: bytes) -> str:
    return f"{xxh.XXH3_64bits(data, len(data)):016x}"


def main(folder: str) -> None:
    # The weight files as qeval opens them: the index's shards, else model.safetensors.
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    lines = {}
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            start = 8 + n
            for tensor, info in header.items():
                if tensor == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                f.seek(start + begin)
                shape = ",".join(str(d) for d in info["shape"])
                lines[tensor.encode()] = b"%s\0%s\0%s\0%s\n" % (
                    tensor.encode(), info["dtype"].encode(), shape.encode(), xxh3(f.read(end - begin)).encode())
    print(xxh3(b"".join(lines[k] for k in sorted(lines))))


if __name__ == "__main__":
    main(sys.argv[1])
