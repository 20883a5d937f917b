#!/usr/bin/env python3
"""The baseline of bench/gptq_solve_bench.cpp: llm-compressor 0.14's own GPTQ solve
(llmcompressor.modifiers.gptq.gptq_quantize.quantize_weight, W4A16: 4 bits, groups of 128,
symmetric, actorder static, percdamp 0.01, blocksize 128) on the same shapes, on the CPU, in
float32, timed around quantize_weight alone (the group parameters computed before, as its
observer does). Prints "solve N K SECONDS" lines. Needs torch 2.x and llmcompressor==0.14.0.

  python3 bench/gptq_solve_llmc.py [--reps 1] [--threads N] [--tokens 512] [--shapes 4096x4096,...]
"""
import argparse
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--shapes", default="4096x4096,1024x4096,14336x4096,4096x14336")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.utils import calculate_qparams
    from llmcompressor.modifiers.gptq.gptq_quantize import quantize_weight

    warm = torch.randn(64, 256)  # the first solve pays LAPACK's start, as in the C++ bench
    wargs = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128, actorder="static")
    ws, wz = calculate_qparams(warm.reshape(64, -1, 128).amin(-1), warm.reshape(64, -1, 128).amax(-1), wargs)
    quantize_weight(warm.unsqueeze(0), (warm.t() @ warm).unsqueeze(0), ws.unsqueeze(0), wz.unsqueeze(0), None, wargs,
                    blocksize=128, percdamp=0.01)
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128,
                            actorder="static")
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        w = torch.randn(n, k) * 0.02
        x = torch.randn(a.tokens, k)
        x[:, 0] *= 40
        h = (x.t() @ x) * (2.0 / a.tokens)
        groups = w.reshape(n, -1, 128)
        scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            quantize_weight(w.unsqueeze(0).clone(), h.unsqueeze(0).clone(), scale.unsqueeze(0), zp.unsqueeze(0), None,
                            args, blocksize=128, percdamp=0.01)
            times.append(time.perf_counter() - t0)
        print(f"solve {n} {k} {statistics.median(times):.4f}", flush=True)


if __name__ == "__main__":
    main()
