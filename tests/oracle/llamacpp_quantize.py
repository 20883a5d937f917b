#!/usr/bin/env python3
"""Quantise a GGUF with llama.cpp's own llama_model_quantize (llama-cpp-python 0.3.36, llama.cpp
0c1e57098), as `llama-quantize IN OUT TYPE` does without an importance matrix.

  python tests/oracle/llamacpp_quantize.py IN.gguf OUT.gguf Q4_K_M

TYPE is a llama_ftype suffix (Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_K_S, Q4_0, IQ4_NL, MXFP4_MOE).
"""
import sys

import llama_cpp


def main():
    src, out, ftype = sys.argv[1], sys.argv[2], sys.argv[3]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype.upper())
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(src.encode(), out.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize {src} -> {out} ({ftype}) failed: {rc}")


if __name__ == "__main__":
    main()
