#!/usr/bin/env python3
"""A GGUF with every tensor dequantised to F32 (metadata copied, general.file_type ALL_F32): the
same weights for llama.cpp and qeval, so that llama-imatrix and `qeval imatrix` compute on equal
float32 weights (llama.cpp would otherwise round the activations to 8 bits inside a quantised
product, which no float forward reproduces). Used for docs/calibrated.md's comparison on
SmolLM2-135M, whose cached GGUF is Q4_1.

  python3 tests/oracle/gguf_dequantize_to_f32.py IN.gguf OUT.gguf

Needs numpy and gguf (llama.cpp's Python package).
"""
import sys

import gguf
import numpy as np


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), f.types[0], sub)
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, x.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
