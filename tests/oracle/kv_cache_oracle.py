#!/usr/bin/env python3
"""Oracle for qeval's Q8_0 / Q4_0 key/value caches (quant/kv_cache.h): llama.cpp's own Python
package `gguf` quantises each cache row and dequantises it again.

  kv_cache_oracle.py DIR TYPE ROW
      Reads DIR/TYPE.f32 (raw little-endian float32, rows of ROW values: one position of one kv
      head), writes DIR/TYPE.gguf-f32: gguf.quants.dequantize(gguf.quants.quantize(rows)) as
      float32, the values a llama.cpp cache of TYPE (q8_0 or q4_0) hands the attention.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

# Ties and huge values are on purpose: no warnings for what numpy does with them.
np.seterr(all="ignore")


def main():
    directory, name, row = sys.argv[1], sys.argv[2], int(sys.argv[3])
    qtype = GGMLQuantizationType[name.upper()]
    x = np.fromfile(os.path.join(directory, name + ".f32"), dtype="<f4").reshape(-1, row)
    y = dequantize(quantize(x, qtype), qtype).astype("<f4").reshape(-1)
    y.tofile(os.path.join(directory, name + ".gguf-f32"))


if __name__ == "__main__":
    main()
