#!/usr/bin/env python3
"""Writes tests/quant/fixtures/quantized_checkpoints/*.safetensors: small weights stored the way
each quantised-checkpoint library stores them, beside that library's own dequantisation run in
float32 (tensor `expected`). tests/quant/*_checkpoint_test.cpp hold qeval's codecs
(quant/formats/) to `expected` bit for bit.

Each file holds the stored tensors under their field names (qweight, qzeros, scales, g_idx,
weight_packed, weight_scale, absmax, ...) and `expected` [N, K] float32; its __metadata__ holds
the case's parameters (format, N, K, bits, group_size, ...). FP8 tensors are stored as their
bytes (U8): the codecs take E4M3 bytes.

Who packs and who dequantises (the oracle), per family:
  compressed-tensors 0.20.0   packing: the library's compressors (PackedQuantizationCompressor,
                              IntQuantizationCompressor, FloatQuantizationCompressor,
                              NVFP4PackedCompressor).compress; oracle: their decompress with the
                              scales widened to float32 first (NVFP4: unpack_fp4_from_uint8 and
                              dequantize with dtype float32, the library's own defaults being bf16)
  bitsandbytes                packing and oracle: bitsandbytes.functional quantize_4bit /
                              dequantize_4bit (nf4, fp4, nested or not) and int8_vectorwise_quant /
                              int8_vectorwise_dequant, on the CPU; the saved tensors are
                              QuantState.as_dict(packed=True), what save_pretrained writes
  AutoGPTQ 0.7.1              its QuantLinear.pack loops (qlinear_cuda.py) and its torch read
                              (qlinear_cuda.py forward without CUDA), copied below: importing
                              auto_gptq needs its CUDA build and transformers, and the packer takes a
                              float layer; the copies take the codes directly (the layout, not the
                              rounding, is under test). gptq_v2 (GPTQModel) stores the zero itself.
  AutoAWQ 0.2.9               packing: WQLinear_GEMM.from_linear's loop, copied (it needs a layer);
                              oracle: awq/utils/packing_utils.py dequantize_gemm, loaded from the
                              AutoAWQ source when AUTOAWQ_SRC points at it, else the copy below
  fine-grained FP8            transformers' FP8 layout (weight, weight_scale_inv per block),
                              written from its definition: W = fp8 · scale_inv per block

Usage: python make_quantized_checkpoint_fixtures.py OUT_DIR   (torch 2.x, compressed-tensors==0.20.0,
bitsandbytes, safetensors, numpy)
"""
import importlib.util
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

torch.manual_seed(78)
np.random.seed(78)

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/quant/fixtures/quantized_checkpoints"
os.makedirs(OUT, exist_ok=True)
WRITTEN = []


def save(case, tensors, meta):
    tensors = {k: v.contiguous() for k, v in tensors.items() if v is not None}
    for k, v in list(tensors.items()):
        if v.dtype == getattr(torch, "float8_e4m3fn", None):
            tensors[k] = v.view(torch.uint8)
    assert tensors["expected"].dtype == torch.float32
    meta = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in meta.items()}
    save_file(tensors, os.path.join(OUT, case + ".safetensors"), metadata=meta)
    WRITTEN.append(case)


def fp16_scales(shape, lo=1e-3, hi=5e-2):
    return (torch.rand(shape) * (hi - lo) + lo).half()


# ---------------------------------------------------------------- compressed-tensors 0.20.0
def compressed_tensors_cases():
    import compressed_tensors
    from compressed_tensors.compressors.naive_quantized.base import (FloatQuantizationCompressor,
                                                                     IntQuantizationCompressor)
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    assert compressed_tensors.__version__.startswith("0.20"), compressed_tensors.__version__

    def scheme(**weights):
        return QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**weights))

    def scale_shape(strategy, N, K, group=None, block=None):
        return {"tensor": (1,), "channel": (N, 1), "group": (N, K // (group or 1)),
                "block": ((N + (block or [1, 1])[0] - 1) // (block or [1, 1])[0],
                          (K + (block or [1, 1])[1] - 1) // (block or [1, 1])[1])}[strategy]

    # pack-quantized: 1..8 bits, symmetric and asymmetric, tensor / channel / group
    for bits, strategy, sym, group, N, K in [(4, "group", True, 32, 16, 128), (4, "group", False, 32, 24, 128),
                                             (8, "channel", True, None, 16, 64), (3, "group", False, 16, 20, 96),
                                             (2, "channel", False, None, 40, 64), (5, "tensor", True, None, 8, 70),
                                             (7, "group", False, 32, 12, 64), (1, "channel", True, None, 8, 40)]:
        s = scheme(num_bits=bits, type="int", symmetric=sym, strategy=strategy, group_size=group)
        sshape = scale_shape(strategy, N, K, group)
        scale = fp16_scales(sshape)
        qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        zp = None if sym else torch.randint(qmin, qmax + 1, sshape, dtype=torch.int8)
        w = (torch.randn(N, K) * 0.05).half()
        sd = {"weight": w, "weight_scale": scale}
        if zp is not None:
            sd["weight_zero_point"] = zp
        if sym:
            sd["weight_zero_point"] = torch.zeros(sshape, dtype=torch.int8)
        c = PackedQuantizationCompressor.compress(dict(sd), s)
        d = PackedQuantizationCompressor.decompress(
            {k: (v.float() if k == "weight_scale" else v) for k, v in c.items()}, s)
        save(f"ct_pack_b{bits}_{strategy}_{'sym' if sym else 'asym'}",
             {"weight_packed": c["weight_packed"], "weight_scale": c["weight_scale"],
              "weight_zero_point": c.get("weight_zero_point"), "expected": d["weight"].float()},
             {"format": "pack-quantized", "N": N, "K": K, "bits": bits, "strategy": strategy,
              "group_size": group or 0, "symmetric": sym, "library": "compressed-tensors " + compressed_tensors.__version__})

    # int-quantized (int8 codes stored as int8)
    for strategy, sym, group, N, K in [("channel", True, None, 16, 64), ("group", False, 32, 8, 128), ("tensor", True, None, 8, 48)]:
        s = scheme(num_bits=8, type="int", symmetric=sym, strategy=strategy, group_size=group)
        sshape = scale_shape(strategy, N, K, group)
        scale = torch.rand(sshape) * 0.01 + 1e-4
        sd = {"weight": torch.randn(N, K) * 0.1, "weight_scale": scale,
              "weight_zero_point": torch.zeros(sshape, dtype=torch.int8) if sym else
              torch.randint(-20, 20, sshape, dtype=torch.int8)}
        c = IntQuantizationCompressor.compress(dict(sd), s)
        d = IntQuantizationCompressor.decompress(dict(c), s)
        save(f"ct_int8_{strategy}_{'sym' if sym else 'asym'}",
             {"weight": c["weight"], "weight_scale": c["weight_scale"], "weight_zero_point": c.get("weight_zero_point"),
              "expected": d["weight"].float()},
             {"format": "int-quantized", "N": N, "K": K, "bits": 8, "strategy": strategy, "group_size": group or 0,
              "symmetric": sym, "library": "compressed-tensors " + compressed_tensors.__version__})

    # float-quantized: FP8 E4M3 with tensor, channel, group and block scales (float32 and bf16)
    for strategy, group, block, sdtype, N, K in [("tensor", None, None, torch.float32, 16, 64),
                                                 ("channel", None, None, torch.bfloat16, 16, 64),
                                                 ("group", 32, None, torch.float32, 8, 128),
                                                 ("block", None, [16, 32], torch.float32, 40, 72)]:
        s = scheme(num_bits=8, type="float", symmetric=True, strategy=strategy, group_size=group, block_structure=block)
        sshape = scale_shape(strategy, N, K, group, block)
        scale = (torch.rand(sshape) * 1e-3 + 1e-5).to(sdtype)
        w = torch.randn(N, K) * 0.2
        c = FloatQuantizationCompressor.compress({"weight": w, "weight_scale": scale}, s)
        d = FloatQuantizationCompressor.decompress(
            {k: (v.float() if k == "weight_scale" else v) for k, v in c.items()}, s)
        save(f"ct_fp8_{strategy}",
             {"weight": c["weight"], "weight_scale": c["weight_scale"], "expected": d["weight"].float()},
             {"format": "float-quantized", "N": N, "K": K, "bits": 8, "strategy": strategy, "group_size": group or 0,
              "block_structure": block or [0, 0], "library": "compressed-tensors " + compressed_tensors.__version__})

    # nvfp4-pack-quantized: E2M1 codes, E4M3 group scales, a float32 global scale
    for N, K in [(16, 64), (8, 160)]:
        s = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
            num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16))
        w = torch.randn(N, K) * 0.1
        global_scale = torch.tensor([448.0 * 6.0 / float(w.abs().max())], dtype=torch.float32)
        block_amax = w.reshape(N, K // 16, 16).abs().amax(-1)
        block_scale = (block_amax / 6.0 * global_scale).to(torch.float8_e4m3fn).float()
        block_scale[0, 0] = 0.0  # a zero scale: the block dequantises to zeros
        c = NVFP4PackedCompressor.compress({"weight": w, "weight_scale": block_scale,
                                            "weight_global_scale": global_scale}, s)
        unpacked = unpack_fp4_from_uint8(c["weight_packed"], N, K, dtype=torch.float32)
        expected = dequantize(x_q=unpacked, scale=c["weight_scale"].float(), args=s.weights,
                              global_scale=c["weight_global_scale"], dtype=torch.float32)
        save(f"ct_nvfp4_{N}x{K}",
             {"weight_packed": c["weight_packed"], "weight_scale": c["weight_scale"],
              "weight_global_scale": c["weight_global_scale"].reshape(1), "expected": expected.float()},
             {"format": "nvfp4-pack-quantized", "N": N, "K": K, "bits": 4, "group_size": 16,
              "library": "compressed-tensors " + compressed_tensors.__version__})


# ---------------------------------------------------------------- AutoGPTQ 0.7.1 / GPTQModel
def autogptq_pack_columns(values, bits):
    """AutoGPTQ 0.7.1 QuantLinear.pack's qweight loop (rows = K, packed along dim 0), verbatim but
    for the input: values [K, N] uint32."""
    intweight = values.astype(np.uint32)
    i, row = 0, 0
    qweight = np.zeros((intweight.shape[0] // 32 * bits, intweight.shape[1]), dtype=np.uint32)
    while row < qweight.shape[0]:
        if bits in [2, 4, 8]:
            for j in range(i, i + (32 // bits)):
                qweight[row] |= intweight[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        elif bits == 3:
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i))
            i += 10
            qweight[row] |= intweight[i] << 30
            row += 1
            qweight[row] |= (intweight[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 1)
            i += 10
            qweight[row] |= intweight[i] << 31
            row += 1
            qweight[row] |= (intweight[i] >> 1) & 0x3
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
    return qweight.astype(np.int32)


def autogptq_pack_zeros(zeros, bits):
    """QuantLinear.pack's qzeros loop: zeros [G, N] (already minus one for v1, as int64 so that a
    zero of 0 wraps to 0xFFFFFFFF under astype(uint32) as AutoGPTQ's does)."""
    zeros = zeros.astype(np.uint32)
    return autogptq_pack_columns(zeros.T.copy(), bits).T.copy()


def autogptq_read(qweight, qzeros, scales, g_idx, bits, v2):
    """qlinear_cuda.py forward (the torch path) up to the dequantised weight, scales in float32.
    For v2 (GPTQModel) the +1 is not applied."""
    K = g_idx.shape[0]
    if bits in [2, 4, 8]:
        wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32).unsqueeze(0)
        zeros = torch.bitwise_right_shift(torch.unsqueeze(qzeros, 2).expand(-1, -1, 32 // bits),
                                          wf.unsqueeze(0)).to(torch.int16 if bits == 8 else torch.int8)
        zeros = torch.bitwise_and(zeros, (2 ** bits) - 1)
        zeros = zeros + (0 if v2 else 1)
        zeros = zeros.reshape(scales.shape)
        weight = torch.bitwise_right_shift(torch.unsqueeze(qweight, 1).expand(-1, 32 // bits, -1),
                                           wf.unsqueeze(-1)).to(torch.int16 if bits == 8 else torch.int8)
        weight = torch.bitwise_and(weight, (2 ** bits) - 1)
    else:
        wf = torch.tensor([[0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0], [0, 1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31],
                           [0, 2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0]], dtype=torch.int32).reshape(1, 3, 12)
        zeros = qzeros.reshape(qzeros.shape[0], qzeros.shape[1] // 3, 3, 1).expand(-1, -1, -1, 12)
        zeros = zeros >> wf.unsqueeze(0)
        zeros[:, :, 0, 10] = (zeros[:, :, 0, 10] & 0x3) | ((zeros[:, :, 1, 0] << 2) & 0x4)
        zeros[:, :, 1, 11] = (zeros[:, :, 1, 11] & 0x1) | ((zeros[:, :, 2, 0] << 1) & 0x6)
        zeros = zeros & 0x7
        zeros = torch.cat([zeros[:, :, 0, :11], zeros[:, :, 1, 1:12], zeros[:, :, 2, 1:11]], dim=2)
        zeros = zeros + (0 if v2 else 1)
        zeros = zeros.reshape(scales.shape)
        weight = qweight.reshape(qweight.shape[0] // 3, 3, 1, qweight.shape[1]).expand(-1, -1, 12, -1)
        weight = (weight >> wf.unsqueeze(-1)) & 0x7
        weight[:, 0, 10] = (weight[:, 0, 10] & 0x3) | ((weight[:, 1, 0] << 2) & 0x4)
        weight[:, 1, 11] = (weight[:, 1, 11] & 0x1) | ((weight[:, 2, 0] << 1) & 0x6)
        weight = weight & 0x7
        weight = torch.cat([weight[:, 0, :11], weight[:, 1, 1:12], weight[:, 2, 1:11]], dim=1)
    weight = weight.reshape(weight.shape[0] * weight.shape[1], weight.shape[2])
    s = scales.float()
    return (s[g_idx.long()] * (weight - zeros[g_idx.long()])).t().contiguous()  # [N, K]


def gptq_cases():
    # AutoGPTQ's QuantLinear needs in and out features that are multiples of 32
    for bits, group, desc_act, v2, N, K, wrap in [(4, 32, False, False, 32, 128, True), (4, 32, True, False, 32, 128, False),
                                                  (3, 32, False, False, 32, 96, True), (3, 32, True, True, 64, 64, False),
                                                  (2, 16, False, False, 32, 64, True), (8, 64, False, True, 32, 128, False),
                                                  (8, -1, False, False, 32, 64, True), (4, 16, True, True, 32, 64, False)]:
        g = K if group == -1 else group
        G = (K + g - 1) // g
        codes = np.random.randint(0, 1 << bits, size=(K, N)).astype(np.int64)
        zeros = np.random.randint(0, 1 << bits, size=(G, N)).astype(np.int64)
        if wrap:  # zeros of 0: AutoGPTQ's packer writes 0 − 1 = 0xFFFFFFFF, setting every later field of the word
            zeros[0, 1] = 0
            zeros[G - 1, 3] = 0
        if desc_act:
            g_idx = torch.tensor(np.random.permutation(np.arange(K) // g), dtype=torch.int32)
        else:
            g_idx = torch.tensor(np.arange(K) // g, dtype=torch.int32)
        stored_zeros = zeros if v2 else zeros - 1
        qweight = torch.from_numpy(autogptq_pack_columns(codes.astype(np.uint32), bits))
        qzeros = torch.from_numpy(autogptq_pack_zeros(stored_zeros, bits))
        scales = fp16_scales((G, N))
        expected = autogptq_read(qweight, qzeros, scales, g_idx, bits, v2)
        fmt = "gptq_v2" if v2 else "gptq"
        save(f"gptq_b{bits}_g{group}_{'actorder' if desc_act else 'static'}_{fmt}{'_wrap' if wrap else ''}",
             {"qweight": qweight, "qzeros": qzeros, "scales": scales, "g_idx": g_idx, "expected": expected},
             {"format": fmt, "N": N, "K": K, "bits": bits, "group_size": group, "desc_act": desc_act,
              "library": "AutoGPTQ 0.7.1 (pack and qlinear_cuda read, copied)"})


# ---------------------------------------------------------------- AutoAWQ 0.2.9
def awq_pack(intweight, bits):
    """WQLinear_GEMM.from_linear's packing loop (intweight [K, N] int32)."""
    pack_num = 32 // bits
    qweight = torch.zeros((intweight.shape[0], intweight.shape[1] // 32 * bits), dtype=torch.int32)
    for col in range(intweight.shape[1] // pack_num):
        order_map = [0, 2, 4, 6, 1, 3, 5, 7]
        for i in range(pack_num):
            qweight_col = intweight[:, col * pack_num + order_map[i]]
            qweight[:, col] |= qweight_col << (i * bits)
    return qweight


def awq_dequantize_gemm():
    src = os.environ.get("AUTOAWQ_SRC")
    if src:
        spec = importlib.util.spec_from_file_location("awq_packing_utils", os.path.join(src, "awq/utils/packing_utils.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.dequantize_gemm, "AutoAWQ 0.2.9 packing_utils.dequantize_gemm"
    raise SystemExit("set AUTOAWQ_SRC to an unpacked autoawq-0.2.9 source (pip download --no-deps autoawq==0.2.9)")


def awq_cases():
    dequantize_gemm, who = awq_dequantize_gemm()
    for group, N, K in [(32, 32, 64), (64, 32, 128), (128, 64, 128)]:  # N: a multiple of 32, as from_linear packs it
        G = K // group
        codes = torch.randint(0, 16, (K, N), dtype=torch.int32)
        zeros = torch.randint(0, 16, (G, N), dtype=torch.int32)
        scales = fp16_scales((G, N))
        qweight, qzeros = awq_pack(codes, 4), awq_pack(zeros, 4)
        expected = dequantize_gemm(qweight, qzeros, scales.float(), 4, group).t().contiguous()
        save(f"awq_gemm_g{group}", {"qweight": qweight, "qzeros": qzeros, "scales": scales, "expected": expected.float()},
             {"format": "awq-gemm", "N": N, "K": K, "bits": 4, "group_size": group,
              "library": who + ", WQLinear_GEMM.from_linear packing (copied)"})


# ---------------------------------------------------------------- bitsandbytes
def bnb_cases():
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    for quant_type, nested, blocksize, N, K in [("nf4", False, 64, 16, 64), ("nf4", True, 64, 48, 192),
                                                ("fp4", False, 64, 16, 64), ("fp4", True, 128, 40, 200),
                                                ("nf4", False, 32, 5, 13)]:
        w = torch.randn(N, K) * 0.1
        packed, qs = F.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested,
                                     quant_storage=torch.uint8)
        expected = F.dequantize_4bit(packed, qs)
        d = qs.as_dict(packed=False)
        t = {"weight": packed, "absmax": d["absmax"], "quant_map": d["quant_map"], "expected": expected.float()}
        meta = {"format": "bitsandbytes-4bit", "N": N, "K": K, "quant_type": quant_type, "blocksize": blocksize,
                "nested": nested, "library": "bitsandbytes " + bnb.__version__}
        if nested:
            t["nested_absmax"], t["nested_quant_map"] = d["nested_absmax"], d["nested_quant_map"]
            meta["nested_blocksize"], meta["nested_offset"] = d["nested_blocksize"], d["nested_offset"]
        save(f"bnb_{quant_type}{'_nested' if nested else ''}_b{blocksize}_{N}x{K}", t, meta)
    for N, K in [(16, 64), (7, 33)]:
        w = torch.randn(N, K) * 0.3
        w[0, :] = 0.0  # a zero row: SCB 0
        CB, SCB, _ = F.int8_vectorwise_quant(w)
        expected = F.int8_vectorwise_dequant(CB, SCB)
        save(f"bnb_int8_{N}x{K}", {"weight": CB, "SCB": SCB, "expected": expected.float()},
             {"format": "bitsandbytes-int8", "N": N, "K": K, "library": "bitsandbytes " + bnb.__version__})


# ---------------------------------------------------------------- fine-grained FP8
def fp8_block_cases():
    for (bn, bk), N, K in [((128, 128), 136, 144), ((16, 32), 40, 72)]:
        w = torch.randn(N, K) * 0.05
        rows, cols = (N + bn - 1) // bn, (K + bk - 1) // bk
        scale_inv = torch.empty(rows, cols)
        q = torch.empty(N, K, dtype=torch.float8_e4m3fn)
        for r in range(rows):
            for c in range(cols):
                blk = w[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk]
                s = blk.abs().max() / 448.0
                q[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk] = (blk / s).to(torch.float8_e4m3fn)
                scale_inv[r, c] = s
        expanded = scale_inv.repeat_interleave(bn, 0)[:N].repeat_interleave(bk, 1)[:, :K]
        expected = q.to(torch.float32) * expanded
        save(f"fp8_block_{bn}x{bk}", {"weight": q, "weight_scale_inv": scale_inv, "expected": expected},
             {"format": "fp8", "N": N, "K": K, "weight_block_size": [bn, bk],
              "library": "transformers FineGrainedFP8 layout (definition), torch " + torch.__version__})


if __name__ == "__main__":
    for name, fn in [("compressed-tensors", compressed_tensors_cases), ("gptq", gptq_cases), ("awq", awq_cases),
                     ("bitsandbytes", bnb_cases), ("fp8", fp8_block_cases)]:
        if os.environ.get("ONLY") and name not in os.environ["ONLY"].split(","):
            continue
        fn()
    print("\n".join(WRITTEN))
