#!/usr/bin/env python3
"""Makes tests/quant/fixtures/gptq_reference_codes.json: GPTQ's codes from the reference
implementations themselves, given the same weights and the same Hessian.

Both sides build the problem from integers (splitmix64, as tests/oracle/make_ggml_quant_fixtures.py):
  W [N, K] = (u mod 1024 − 512) · 2^-10, float32 (exact);
  X [4 sequences, 32 tokens, K] = (u mod 17 − 8) · 2^-2, and H = 2/4 · Σ x xᵀ + diag(k · 2^-12), exact
  in float32 (every product and partial sum is a small multiple of 2^-4; the diagonal term keeps
  activation order free of ties, which argsort breaks as it likes), so the solvers start from the same
  bits and differ only where their arithmetic does (their matrix products' summation order).
The references:
  llm-compressor 0.14.0   llmcompressor.modifiers.gptq.gptq_quantize.quantize_weight, with the
                          scale and zero point compressed-tensors 0.19.0's calculate_qparams gives
                          for each group's min and max (what the memoryless min-max weight observer
                          hands GPTQModifier), codes recovered from its fake-quantised output;
  AutoGPTQ 0.7.1          auto_gptq.quantization.gptq.GPTQ.fasterquant on an nn.Linear whose H is
                          set directly, codes recovered from its dequantised output and the
                          scale / zero it returns (torch.cuda.synchronize stubbed out: CPU).
Codes are stored unsigned (compressed-tensors' signed codes + 2^(bits-1)), one hex digit per code
for bits <= 4, two for 8, row after row.

  python -m venv /work/cache/oracle-venv
  /work/cache/oracle-venv/bin/pip install llmcompressor==0.14.0 numpy   (it pins compressed-tensors==0.19.0)
  pip download --no-deps auto-gptq==0.7.1 (its wheel needs CUDA to import whole, so:)
  unzip -d /tmp/agq auto_gptq-0.7.1-*.whl 'auto_gptq/quantization/*'
  AUTOGPTQ_SRC=/tmp/agq /work/cache/oracle-venv/bin/python tests/oracle/make_gptq_fixtures.py OUT.json
"""
import json
import os
import sys

import numpy as np
import torch

N, K, SEQS, TOKENS = 16, 256, 4, 32
MASK64 = (1 << 64) - 1


def splitmix64(seed, n):
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def problem(seed, dead_columns):
    w = ((splitmix64(seed, N * K) % np.uint64(1024)).astype(np.int64) - 512).astype(np.float64) / 1024
    x = ((splitmix64(seed + 1, SEQS * TOKENS * K) % np.uint64(17)).astype(np.int64) - 8).astype(np.float64) / 4
    x = x.reshape(SEQS * TOKENS, K)
    x[:, dead_columns] = 0
    h = 2.0 / SEQS * (x.T @ x)  # exact in float64, and in float32
    # + k·2^-12 on the live diagonal: no two columns share a diagonal (the diagonal's multiples of
    # 1/8 would tie, and argsort orders ties as it likes), still exact in float32 (< 2^8, step 2^-12)
    live = np.ones(K)
    live[dead_columns] = 0
    h += np.diag(np.arange(K) * 2.0**-12 * live)
    return torch.tensor(w.reshape(N, K), dtype=torch.float32), torch.tensor(h, dtype=torch.float32)


def hex_codes(codes, bits):
    width = 1 if bits <= 4 else 2
    return "".join(f"{int(c):0{width}x}" for c in codes.reshape(-1).tolist())


def llm_compressor_case(w, h, bits, group_size, symmetric, actorder):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy
    from compressed_tensors.quantization.utils import calculate_qparams
    from llmcompressor.modifiers.gptq.gptq_quantize import quantize_weight

    args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric,
                            strategy="group" if group_size > 0 else "channel",
                            group_size=group_size if group_size > 0 else None, actorder=actorder)
    gs = group_size if group_size > 0 else K
    groups = w.reshape(N, K // gs, gs)
    scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), args)  # [N, G]
    q, loss, fallback = quantize_weight(w.unsqueeze(0).clone(), h.unsqueeze(0).clone(), scale.unsqueeze(0),
                                        zp.unsqueeze(0), None, args, blocksize=128, percdamp=0.01)
    q = q[0]
    g = torch.arange(K) // gs
    s, z = scale[:, g], zp[:, g].to(torch.float32)
    codes = torch.round(q / s + (0 if symmetric else z)).clamp(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    assert torch.equal((codes - (0 if symmetric else z)) * s, q), "codes do not reproduce the output"
    return {"codes": hex_codes((codes + (1 << (bits - 1))).to(torch.int64), bits), "loss": float(loss[0]),
            "rtn_fallback": bool(fallback[0])}


def autogptq_case(w, h, bits, group_size, symmetric, desc_act):
    src = os.environ.get("AUTOGPTQ_SRC")
    if not src:
        raise SystemExit("set AUTOGPTQ_SRC to an unzipped auto_gptq 0.7.1 wheel")
    torch.cuda.synchronize = lambda *a, **k: None
    sys.path.insert(0, src)  # auto_gptq/quantization/ alone imports only torch and transformers
    from auto_gptq.quantization.gptq import GPTQ
    layer = torch.nn.Linear(K, N, bias=False)
    layer.weight.data = w.clone()
    gptq = GPTQ(layer)
    gptq.quantizer.configure(bits, perchannel=True, sym=symmetric, mse=False)
    gptq.H = h.clone()
    gptq.nsamples = SEQS
    scale, zero, g_idx = gptq.fasterquant(blocksize=128, percdamp=0.01, group_size=group_size if group_size > 0 else -1,
                                          actorder=desc_act)
    q = layer.weight.data
    s, z = scale[:, g_idx.long()], zero[:, g_idx.long()]
    codes = torch.clamp(torch.round(q / s) + z, 0, (1 << bits) - 1)
    assert torch.equal(s * (codes - z), q), "codes do not reproduce the output"
    return {"codes": hex_codes(codes.to(torch.int64), bits), "g_idx": g_idx.tolist()}


CASES = [  # name, reference, seed, dead columns, bits, group size (0: channel), symmetric, order
    ("llmc-w4-g128-sym", "llm-compressor", 1, [], 4, 128, True, None),
    ("llmc-w4-g128-sym-actorder", "llm-compressor", 2, [5, 200], 4, 128, True, "weight"),
    ("llmc-w4-g64-asym", "llm-compressor", 3, [], 4, 64, False, None),
    ("llmc-w4-channel-sym", "llm-compressor", 4, [17], 4, 0, True, None),
    ("llmc-w3-g128-sym", "llm-compressor", 5, [], 3, 128, True, None),
    ("llmc-w8-channel-asym-actorder", "llm-compressor", 6, [], 8, 0, False, "weight"),
    ("autogptq-w4-g128-sym-desc", "autogptq", 7, [9], 4, 128, True, True),
    ("autogptq-w4-g64-asym", "autogptq", 8, [], 4, 64, False, False),
    ("autogptq-w4-g32-sym-desc", "autogptq", 9, [], 4, 32, True, True),
    ("autogptq-w2-channel-asym", "autogptq", 10, [], 2, 0, False, False),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gptq_reference_codes.json"
    torch.set_num_threads(1)
    cases = []
    for name, reference, seed, dead, bits, group_size, symmetric, order in CASES:
        w, h = problem(seed, dead)
        case = {"name": name, "reference": reference, "seed": seed, "dead_columns": dead, "bits": bits,
                "group_size": group_size, "symmetric": symmetric, "order": "descending_hessian" if order else "none"}
        if reference == "llm-compressor":
            case.update(llm_compressor_case(w, h, bits, group_size, symmetric, order))
        else:
            case.update(autogptq_case(w, h, bits, group_size, symmetric, order))
        cases.append(case)
        print(name, file=sys.stderr)
    import compressed_tensors
    import llmcompressor
    doc = {"made_by": "tests/oracle/make_gptq_fixtures.py", "N": N, "K": K, "sequences": SEQS, "tokens": TOKENS,
           "torch": torch.__version__, "llmcompressor": llmcompressor.__version__,
           "compressed_tensors": compressed_tensors.__version__, "autogptq": "0.7.1", "cases": cases}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
