#!/usr/bin/env python3
"""Makes tests/quant/fixtures/ggml_quants_llamacpp.json and ggml_quants_importance_llamacpp.json:
rows quantised by llama.cpp itself.

Calls libggml's ggml_quantize_chunk(type, src, dst, 0, rows, row_length, imatrix) through
ctypes, from llama-cpp-python 0.3.36 (which vendors llama.cpp 0c1e57098), for every type qeval
writes: with imatrix = NULL into the first file (tests/quant/ggml_quants_test.cpp,
GgmlQuantFixtures), and with an importance matrix (row_length weights, the same for every row, as
llama-quantize passes a tensor's imatrix entry) into the second (tests/quant/ggml_importance_test.cpp).
The weights come from the same generator (kinds "spread": 1.m·2^e, e in [-20, 20], one in 8 zero;
"mild": 1.m·2^e, e in {-1, 0}; "blockzeros": spread, but zero on every third run of 16 columns;
"ones"; "zeros"), exact in float32, so they are not stored either.

The rows are not stored: both sides make them from (kind, seed, count, scale_exp) with the same
integer generator (splitmix64; three 20-bit fields summed, times 2^(scale_exp - 20), times 8 for
one value in 16; or, kind "grid", one byte minus 128 times 2^(scale_exp - 7)), exact in float32,
so only the quantised bytes (hex) are committed, and for the large cases (256 rows of 4096 or
2048 values per type) their FNV-1a 64-bit digest.

  python3 -m venv /work/cache/llamacpp-venv
  /work/cache/llamacpp-venv/bin/pip install llama-cpp-python==0.3.36 numpy
  /work/cache/llamacpp-venv/bin/python tests/oracle/make_ggml_quant_fixtures.py [OUT.json [OUT_IMPORTANCE.json]]

llama.cpp on x86-64 compiles ggml-quants.c without FMA; fixtures made on another architecture
could differ in the last bit of a sum, and so in a chosen scale (quant/formats/ggml/types.h).
"""
import ctypes
import glob
import json
import os
import platform
import sys

import numpy as np

GGML_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12,
              "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "MXFP4": 39}
BLOCK = {name: (256 if name.endswith("_K") else 32) for name in GGML_TYPES}
MASK64 = (1 << 64) - 1


def splitmix64(seed, n):
    """The first n outputs of splitmix64 seeded with `seed` (state i is seed + (i + 1)·γ)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def values(u, scale_exp):
    m = sum(((u >> np.uint64(20 * k)) & np.uint64(0xFFFFF)).astype(np.int64) - 0x80000 for k in range(3))
    x = np.ldexp(m.astype(np.float64), scale_exp - 20).astype(np.float32)  # |m| < 2^21: exact
    outlier = (u >> np.uint64(60)) == 0
    x[outlier] = x[outlier] * np.float32(8)
    return x


def rows_of(kind, seed, n, scale_exp):
    u = splitmix64(seed, n)
    if kind == "gauss":
        return values(u, scale_exp)
    if kind == "sparse":
        return np.where((u >> np.uint64(60)) == 0, values(u, scale_exp), np.float32(0)).astype(np.float32)
    if kind == "grid":  # small integers times a power of two: exact products, many exact ties
        m = (u & np.uint64(0xFF)).astype(np.int64) - 128
        return np.ldexp(m.astype(np.float64), scale_exp - 7).astype(np.float32)
    if kind == "zeros":
        return np.zeros(n, dtype=np.float32)
    if kind == "const":
        return np.full(n, np.ldexp(-0.75 if seed % 2 else 0.75, scale_exp), dtype=np.float32)
    raise SystemExit(f"unknown kind {kind}")


def importance_of(kind, seed, n):
    """n per-column weights of `kind` (see the module's doc), exact in float32."""
    u = splitmix64(seed, n)
    if kind == "ones":
        return np.ones(n, dtype=np.float32)
    if kind == "zeros":
        return np.zeros(n, dtype=np.float32)
    mant = 1.0 + (u & np.uint64(0xFFFF)).astype(np.float64) / 65536.0
    if kind == "mild":
        return np.ldexp(mant, ((u >> np.uint64(16)) % np.uint64(2)).astype(np.int64) - 1).astype(np.float32)
    w = np.ldexp(mant, ((u >> np.uint64(16)) % np.uint64(41)).astype(np.int64) - 20).astype(np.float32)
    if kind == "spread":
        w[(u >> np.uint64(61)) == 0] = 0
        return w
    if kind == "blockzeros":
        w[(np.arange(n) // 16) % 3 == 0] = 0
        return w
    raise SystemExit(f"unknown importance kind {kind}")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return f"{h:016x}"


# Cases stored as their bytes (a differing block can be shown) and, larger, as a digest of their
# bytes (FNV-1a 64): a rule that changes one value in a million still shows.
DIGEST_ROWS = 256


def cases():
    seed = 1
    out = []
    for name in GGML_TYPES:
        b = BLOCK[name]
        shapes = [("gauss", 1, b, 0), ("gauss", 2, 2 * b, -6), ("gauss", 1, b, 14), ("gauss", 1, b, -20),
                  ("sparse", 1, 2 * b, -3), ("grid", 1, b, 0), ("zeros", 1, b, 0), ("const", 1, b, -2),
                  ("const", 1, b, 5)]
        if b == 32:  # rows of 32·k that are not multiples of 256
            shapes += [("gauss", 2, 96, -1), ("gauss", 1, 160, 3)]
        for kind, rows, row_length, scale_exp in shapes:
            out.append({"type": name, "kind": kind, "seed": seed, "rows": rows, "row_length": row_length,
                        "scale_exp": scale_exp, "store": "bytes"})
            seed += 1
        for kind, scale_exp in (("gauss", -5), ("grid", -3)):
            out.append({"type": name, "kind": kind, "seed": seed, "rows": DIGEST_ROWS, "row_length": 4096 if b == 256 else 2048,
                        "scale_exp": scale_exp, "store": "fnv1a64"})
            seed += 1
    return out


def importance_cases():
    """Every type with an importance matrix: data kinds crossed with weight kinds, small (bytes)
    and large (digest); rows of 32·k that are not multiples of 256 for the 32-value types."""
    seed = 10001
    out = []
    for name in GGML_TYPES:
        b = BLOCK[name]
        shapes = [("gauss", 1, b, 0, "spread"), ("gauss", 2, 2 * b, -6, "spread"), ("gauss", 1, b, 0, "ones"),
                  ("gauss", 1, b, 3, "zeros"), ("gauss", 1, b, 14, "mild"), ("gauss", 1, b, -20, "spread"),
                  ("sparse", 1, 2 * b, -3, "spread"), ("grid", 1, b, 0, "blockzeros"), ("zeros", 1, b, 0, "spread"),
                  ("const", 1, b, -2, "spread"), ("const", 1, b, 5, "blockzeros")]
        if b == 32:
            shapes += [("gauss", 2, 96, -1, "spread"), ("gauss", 1, 160, 3, "blockzeros")]
        for kind, rows, row_length, scale_exp, imp in shapes:
            out.append({"type": name, "kind": kind, "seed": seed, "rows": rows, "row_length": row_length,
                        "scale_exp": scale_exp, "importance": imp, "importance_seed": seed + 5000, "store": "bytes"})
            seed += 1
        for kind, scale_exp, imp in (("gauss", -5, "spread"), ("grid", -3, "blockzeros")):
            out.append({"type": name, "kind": kind, "seed": seed, "rows": DIGEST_ROWS,
                        "row_length": 4096 if b == 256 else 2048, "scale_exp": scale_exp, "importance": imp,
                        "importance_seed": seed + 5000, "store": "fnv1a64"})
            seed += 1
    return out


def find_libggml_base():
    import llama_cpp  # noqa: F401  (the installed package's folder holds the libraries)
    folder = os.path.dirname(llama_cpp.__file__)
    for pattern in ("lib/libggml-base.so*", "lib/libggml-base.dylib", "**/libggml-base.so*"):
        found = sorted(glob.glob(os.path.join(folder, pattern), recursive=True))
        if found:
            return found[0]
    raise SystemExit(f"libggml-base not found under {folder}")


def quantise_cases(lib, case_list):
    quantize_chunk = lib.ggml_quantize_chunk
    quantize_chunk.restype = ctypes.c_size_t
    quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_int64, ctypes.c_void_p]
    row_size = lib.ggml_row_size
    row_size.restype = ctypes.c_size_t
    row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    result = []
    for c in case_list:
        t = GGML_TYPES[c["type"]]
        x = rows_of(c["kind"], c["seed"], c["rows"] * c["row_length"], c["scale_exp"])
        imatrix = None
        if "importance" in c:
            weights = importance_of(c["importance"], c["importance_seed"], c["row_length"])
            imatrix = weights.ctypes.data
        n_bytes = c["rows"] * row_size(t, c["row_length"])
        dst = np.zeros(n_bytes, dtype=np.uint8)
        written = quantize_chunk(t, x.ctypes.data, dst.ctypes.data, 0, c["rows"], c["row_length"], imatrix)
        if written != n_bytes:
            raise SystemExit(f"{c}: ggml_quantize_chunk wrote {written} bytes, expected {n_bytes}")
        store = c.pop("store")
        if store == "bytes":
            result.append(dict(c, bytes=dst.tobytes().hex()))
        else:
            result.append(dict(c, fnv1a64=fnv1a64(dst.tobytes()), n_bytes=int(n_bytes)))
    return result


def write_fixture(out_path, what, version, result):
    doc = {
        "what": what,
        "generator": "tests/oracle/make_ggml_quant_fixtures.py",
        "llama_cpp_python": version,
        "llama_cpp_commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f",
        "machine": platform.machine(),
        "cases": result,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")
    stored = sum(len(c["bytes"]) // 2 for c in result if "bytes" in c)
    hashed = sum(c["n_bytes"] for c in result if "n_bytes" in c)
    print(f"{out_path}: {len(result)} cases, {stored} bytes stored, {hashed} more as digests")


def main(argv):
    fixtures = os.path.join(os.path.dirname(__file__), "..", "quant", "fixtures")
    out_path = argv[0] if argv else os.path.join(fixtures, "ggml_quants_llamacpp.json")
    importance_path = argv[1] if len(argv) > 1 else os.path.join(fixtures, "ggml_quants_importance_llamacpp.json")
    import importlib.metadata
    version = importlib.metadata.version("llama_cpp_python")
    if version != "0.3.36":
        raise SystemExit(f"llama-cpp-python {version} is installed; the fixtures pin 0.3.36 (llama.cpp 0c1e57098)")
    lib = ctypes.CDLL(find_libggml_base())
    write_fixture(out_path, "rows quantised by llama.cpp's ggml_quantize_chunk (imatrix NULL); see the generating script",
                  version, quantise_cases(lib, cases()))
    write_fixture(importance_path,
                  "rows quantised by llama.cpp's ggml_quantize_chunk with an importance matrix (row_length weights, "
                  "the same for every row); see the generating script", version,
                  quantise_cases(lib, importance_cases()))


if __name__ == "__main__":
    main(sys.argv[1:])
