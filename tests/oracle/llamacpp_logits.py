#!/usr/bin/env python3
"""llama.cpp's logits for one token sequence, through llama-cpp-python (logits_all): the second
opinion on a GGUF model's forward (llama.cpp computes the quantised matmuls on its own kernels,
with activations requantised to 8 bits for the k-quant dot products, so it differs from a
float32 forward on dequantised weights by more than rounding; compare top-1 tokens and the
size of the differences, not bits).

  llamacpp_logits.py MODEL.gguf TOKENS.i32 LOGITS.f32

TOKENS.i32: little-endian int32 ids (one sequence); LOGITS.f32: float32 [L, V] row-major.
"""
import sys

import numpy as np

import llama_cpp


def main():
    model, tokens_path, logits_path = sys.argv[1:4]
    tokens = np.fromfile(tokens_path, dtype="<i4").tolist()
    n = len(tokens)
    llm = llama_cpp.Llama(model_path=model, n_ctx=n, n_batch=n, n_ubatch=n, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval(tokens)
    np.ascontiguousarray(llm.scores[:n], dtype=np.float32).tofile(logits_path)


if __name__ == "__main__":
    main()
