#!/usr/bin/env python3
"""Oracle for qeval's GGUF dequantisers: llama.cpp's own Python package `gguf`
(gguf.quants.dequantize, numpy float32) turns ggml blocks into float32.

  gguf_dequant_oracle.py blocks DIR TYPE [TYPE ...]
      For each ggml type name (Q4_0, Q6_K, F16, ...): reads DIR/TYPE.bin, whole blocks of that
      type, and writes DIR/TYPE.f32, the dequantised values as raw little-endian float32.

  gguf_dequant_oracle.py file MODEL.gguf OUT
      Reads every tensor of a GGUF file with gguf.GGUFReader and writes to OUT ('-': stdout),
      in file order, one frame per tensor: u32 name length, the name (UTF-8), u32 ggml type,
      u64 element count, then that many float32 (row-major, as the tensor's shape reversed from
      ne). Tensors of types gguf cannot dequantise are an error.
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize


# The tests give blocks infinite and NaN scales on purpose: no warnings for what follows from them.
np.seterr(all="ignore")


def as_float32(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    out = dequantize(data, qtype)
    assert out.dtype == np.float32, (qtype.name, out.dtype)
    return np.ascontiguousarray(out).reshape(-1)


def blocks(directory, type_names):
    for name in type_names:
        qtype = GGMLQuantizationType[name]
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        raw = np.fromfile(f"{directory}/{name}.bin", dtype=np.uint8)
        if raw.size % type_size != 0:
            raise SystemExit(f"{name}.bin: {raw.size} bytes is not a whole number of {type_size}-byte blocks")
        # dequantize() takes the raw bytes (last axis in bytes) for every type: it views them as
        # float32/float16 for F32/F16 and splits them into blocks for the others.
        as_float32(raw, qtype).tofile(f"{directory}/{name}.f32")


def whole_file(model, out_path):
    reader = GGUFReader(model)
    out = sys.stdout.buffer if out_path == "-" else open(out_path, "wb")
    for t in reader.tensors:
        values = as_float32(t.data, t.tensor_type)
        if values.size != int(t.n_elements):
            raise SystemExit(f"{t.name}: {values.size} values for {t.n_elements} elements")
        name = t.name.encode("utf-8")
        out.write(struct.pack("<I", len(name)) + name + struct.pack("<IQ", int(t.tensor_type), values.size))
        out.write(values.astype("<f4", copy=False).tobytes())
    out.flush()
    if out is not sys.stdout.buffer:
        out.close()


def main(argv):
    if len(argv) >= 2 and argv[0] == "blocks":
        blocks(argv[1], argv[2:])
    elif len(argv) == 3 and argv[0] == "file":
        whole_file(argv[1], argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
