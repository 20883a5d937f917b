#!/usr/bin/env python3
"""Oracle for qeval's ggml quantisers (quant/formats/ggml/quants.h): llama.cpp's own Python package
`gguf` (gguf.quants.quantize / dequantize, numpy).

  ggml_quant_oracle.py DIR TYPE [TYPE ...]
      For each ggml type name: when DIR/TYPE.f32 exists (raw little-endian float32, rows of
      ROW values, ROW in DIR/TYPE.row as text), writes DIR/TYPE.gguf-q, the bytes
      gguf.quants.quantize writes for it (an error if gguf cannot quantise TYPE). When
      DIR/TYPE.blocks exists (whole blocks of TYPE), writes DIR/TYPE.gguf-f32, their values
      as gguf.quants.dequantize gives them (float32).

  ggml_quant_oracle.py --quantisable
      Prints the names of the types gguf.quants.quantize handles among those qeval writes.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

QEVAL_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4"]

# Huge, tiny and tied inputs are on purpose: no warnings for what numpy does with them.
np.seterr(all="ignore")


def can_quantise(name):
    qtype = GGMLQuantizationType[name]
    block_size, _ = GGML_QUANT_SIZES[qtype]
    try:
        quantize(np.zeros((1, block_size), dtype=np.float32), qtype)
        return True
    except NotImplementedError:
        return False
    except Exception as e:  # gguf raises QuantError for a type it does not implement
        if type(e).__name__ == "QuantError":
            return False
        raise


def run(directory, names):
    for name in names:
        qtype = GGMLQuantizationType[name]
        base = os.path.join(directory, name)
        if os.path.exists(base + ".f32"):
            row = int(open(base + ".row").read())
            x = np.fromfile(base + ".f32", dtype="<f4").reshape(-1, row)
            q = quantize(x, qtype)
            np.ascontiguousarray(q).reshape(-1).astype(np.uint8, copy=False).tofile(base + ".gguf-q")
        if os.path.exists(base + ".blocks"):
            raw = np.fromfile(base + ".blocks", dtype=np.uint8)
            out = dequantize(raw, qtype)
            assert out.dtype == np.float32, (name, out.dtype)
            np.ascontiguousarray(out).reshape(-1).astype("<f4", copy=False).tofile(base + ".gguf-f32")


def main(argv):
    if argv == ["--quantisable"]:
        print(" ".join(n for n in QEVAL_TYPES if can_quantise(n)))
    elif len(argv) >= 2:
        run(argv[0], argv[1:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
