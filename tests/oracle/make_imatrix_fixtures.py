#!/usr/bin/env python3
"""Makes tests/loaders/checkpoints/fixtures/imatrix_*: one small importance matrix written three ways.

  imatrix_libggml.gguf   through libggml's own gguf API (ctypes), the calls llama-imatrix's
                         save_imatrix makes at llama.cpp 0c1e57098 (tools/imatrix/imatrix.cpp):
                         general.type, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size,
                         then per entry (sorted) <name>.in_sum2 [columns, matrices] and
                         <name>.counts [1, matrices], F32. qeval's writer must give these bytes.
  imatrix_gguf_py.gguf   through llama.cpp's Python package gguf (GGUFWriter), the same keys and
                         tensors as numpy arrays [matrices, columns] and [matrices, 1]: another
                         writer's layout of the same contents, which qeval must read.
  imatrix_legacy.dat     save_imatrix_legacy's layout, packed here with struct (i32 entry count;
                         per entry name length, name, ncall, nval, values (sum / count) · ncall;
                         chunk count, dataset length, dataset).

The contents (tests/loaders/checkpoints/imatrix_file_test.cpp makes the same): three entries,
  blk.0.attn_q.weight        1 matrix of 64 columns, 37 tokens
  blk.0.ffn_down_exps.weight 4 matrices of 32 columns, tokens 10, 0, 3, 7 (expert 1 never routed)
  output.weight              1 matrix of 16 columns, 5 tokens
sums[i] = ((37·i) mod 101 + 1) / 8 · count of i's matrix (0 where it saw no token); datasets
["wiki.train.raw", "c4-sample.txt"], chunk_count 3, chunk_size 512.

  /work/cache/llamacpp-venv/bin/pip install llama-cpp-python==0.3.36 gguf numpy
  /work/cache/llamacpp-venv/bin/python tests/oracle/make_imatrix_fixtures.py [OUT_DIR]
"""
import ctypes
import glob
import os
import struct
import sys

import numpy as np

ENTRIES = {"blk.0.attn_q.weight": (64, [37]), "blk.0.ffn_down_exps.weight": (32, [10, 0, 3, 7]),
           "output.weight": (16, [5])}
DATASETS = ["wiki.train.raw", "c4-sample.txt"]
CHUNK_COUNT, CHUNK_SIZE = 3, 512


def sums_of(columns, counts):
    out = np.zeros(columns * len(counts), dtype=np.float32)
    for i in range(out.size):
        out[i] = ((37 * i) % 101 + 1) / 8.0 * counts[i // columns]
    return out


def find_libggml_base():
    import llama_cpp  # noqa: F401
    folder = os.path.dirname(llama_cpp.__file__)
    for pattern in ("lib/libggml-base.so*", "**/libggml-base.so*"):
        found = sorted(glob.glob(os.path.join(folder, pattern), recursive=True))
        if found:
            return found[0]
    raise SystemExit(f"libggml-base not found under {folder}")


class GgmlInitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def write_with_libggml(path):
    lib = ctypes.CDLL(find_libggml_base())
    lib.ggml_init.restype = ctypes.c_void_p
    lib.ggml_init.argtypes = [GgmlInitParams]
    lib.ggml_tensor_overhead.restype = ctypes.c_size_t
    lib.ggml_new_tensor_2d.restype = ctypes.c_void_p
    lib.ggml_new_tensor_2d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.ggml_set_name.restype = ctypes.c_void_p
    lib.ggml_set_name.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_get_data.restype = ctypes.c_void_p
    lib.ggml_get_data.argtypes = [ctypes.c_void_p]
    lib.ggml_free.argtypes = [ctypes.c_void_p]
    lib.gguf_init_empty.restype = ctypes.c_void_p
    lib.gguf_set_val_str.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.gguf_set_arr_str.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]
    lib.gguf_set_val_u32.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32]
    lib.gguf_add_tensor.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.gguf_write_to_file.restype = ctypes.c_bool
    lib.gguf_write_to_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_bool]
    lib.gguf_free.argtypes = [ctypes.c_void_p]

    size = sum(2 * (lib.ggml_tensor_overhead() + 4 * columns * len(counts) + 64) for columns, counts in ENTRIES.values())
    ctx = lib.ggml_init(GgmlInitParams(size, None, False))
    gguf = lib.gguf_init_empty()
    lib.gguf_set_val_str(gguf, b"general.type", b"imatrix")
    datasets = (ctypes.c_char_p * len(DATASETS))(*[d.encode() for d in DATASETS])
    lib.gguf_set_arr_str(gguf, b"imatrix.datasets", datasets, len(DATASETS))
    lib.gguf_set_val_u32(gguf, b"imatrix.chunk_count", CHUNK_COUNT)
    lib.gguf_set_val_u32(gguf, b"imatrix.chunk_size", CHUNK_SIZE)
    for name in sorted(ENTRIES):
        columns, counts = ENTRIES[name]
        nmat = len(counts)
        in_sum2 = lib.ggml_new_tensor_2d(ctx, 0, columns, nmat)
        count_t = lib.ggml_new_tensor_2d(ctx, 0, 1, nmat)
        lib.ggml_set_name(in_sum2, f"{name}.in_sum2".encode())
        lib.ggml_set_name(count_t, f"{name}.counts".encode())
        sums = sums_of(columns, counts)
        ctypes.memmove(lib.ggml_get_data(in_sum2), sums.ctypes.data, sums.nbytes)
        c = np.array(counts, dtype=np.float32)
        ctypes.memmove(lib.ggml_get_data(count_t), c.ctypes.data, c.nbytes)
        lib.gguf_add_tensor(gguf, in_sum2)
        lib.gguf_add_tensor(gguf, count_t)
    if not lib.gguf_write_to_file(gguf, path.encode(), False):
        raise SystemExit(f"gguf_write_to_file failed for {path}")
    lib.gguf_free(gguf)
    lib.ggml_free(ctx)


def write_with_gguf_py(path):
    import gguf
    w = gguf.GGUFWriter(path, arch=None)  # no general.architecture: an imatrix is not a model
    w.add_type(gguf.GGUFType.IMATRIX)
    w.add_array(gguf.Keys.IMatrix.DATASETS, DATASETS)
    w.add_uint32(gguf.Keys.IMatrix.CHUNK_COUNT, CHUNK_COUNT)
    w.add_uint32(gguf.Keys.IMatrix.CHUNK_SIZE, CHUNK_SIZE)
    for name in sorted(ENTRIES):
        columns, counts = ENTRIES[name]
        w.add_tensor(f"{name}.in_sum2", sums_of(columns, counts).reshape(len(counts), columns))
        w.add_tensor(f"{name}.counts", np.array(counts, dtype=np.float32).reshape(len(counts), 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_legacy(path):
    out = struct.pack("<i", len(ENTRIES))
    for name in sorted(ENTRIES):
        columns, counts = ENTRIES[name]
        sums = sums_of(columns, counts)
        ncall = (max(counts) + CHUNK_SIZE - 1) // CHUNK_SIZE
        values = np.zeros(sums.size, dtype=np.float32)
        for i in range(sums.size):
            count, value = np.float32(counts[i // columns]), sums[i]
            if count == 0:
                count, value = np.float32(1), np.float32(1)
            values[i] = np.float32(value / count) * np.float32(ncall)
        out += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", ncall, sums.size) + values.tobytes()
    out += struct.pack("<i", CHUNK_COUNT) + struct.pack("<i", len(DATASETS[-1])) + DATASETS[-1].encode()
    with open(path, "wb") as f:
        f.write(out)


def main(argv):
    out_dir = argv[0] if argv else os.path.join(os.path.dirname(__file__), "..", "loaders", "checkpoints", "fixtures")
    import importlib.metadata
    version = importlib.metadata.version("llama_cpp_python")
    if version != "0.3.36":
        raise SystemExit(f"llama-cpp-python {version} is installed; the fixtures pin 0.3.36 (llama.cpp 0c1e57098)")
    write_with_libggml(os.path.join(out_dir, "imatrix_libggml.gguf"))
    write_with_gguf_py(os.path.join(out_dir, "imatrix_gguf_py.gguf"))
    write_legacy(os.path.join(out_dir, "imatrix_legacy.dat"))
    for name in ("imatrix_libggml.gguf", "imatrix_gguf_py.gguf", "imatrix_legacy.dat"):
        print(name, os.path.getsize(os.path.join(out_dir, name)), "bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
