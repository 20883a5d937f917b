# The PyTorch eager yardstick (Debian's python3-torch): evaluates a Llama GGUF model on the same
# windows as `qeval eval --data TOKENS.bin --seq-len L --max-windows N` (the first N windows of
# a uint16 token file, every token after the first scored) the way a PyTorch user would:
# weights dequantised once by llama.cpp's `gguf` package, an eager float32 forward, one window
# per forward, and each quantisation scheme *simulated* (quantise-dequantise in float, then the
# float GEMM; DESIGN.md §5 definitions). Prints one JSON line per scheme: tokens/s and PPL.
#
#   eager_eval.py MODEL.gguf TOKENS.bin SEQ_LEN WINDOWS THREADS SCHEME [SCHEME ...]
# SCHEME: full | int8-coarse | int8-moderate | int8-fine | int8-vectorwise | w4-zeropoint |
#         w4-zeropoint-g128
import json
import math
import sys
import time

import numpy as np
import torch


def absmax_int8(x, dim):
    """int8 absmax quantise-dequantise over `dim` (None: the whole tensor); zeros keep s = 1."""
    m = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    s = torch.where(m > 0, m / 127, torch.ones_like(m))
    return torch.clamp(torch.round(x / s), -127, 127) * s


def zeropoint_int4(w, group):
    """4-bit zero-point per output row (group 0) or per group of input columns; as qeval (quant/),
    the last group is padded with the row's last value and a constant group c comes back exactly."""
    rows, cols = w.shape
    g = group if group else cols
    n_groups = -(-cols // g)
    padded = torch.cat([w, w[:, -1:].expand(rows, n_groups * g - cols)], 1) if n_groups * g != cols else w
    v = padded.reshape(rows, n_groups, g)
    lo, hi = v.amin(-1, keepdim=True), v.amax(-1, keepdim=True)
    s = (hi - lo) / 15
    const = s == 0
    s = torch.where(const, torch.where(lo == 0, torch.ones_like(lo), lo.abs()), s)
    z = torch.where(const, (lo < 0).float(), torch.round(-lo / s))
    q = torch.clamp(torch.round(v / s) + z, 0, 15)
    return ((q - z) * s).reshape(rows, n_groups * g)[:, :cols]


# scheme -> (weight quantiser, input activation dim, output activation dim); dim "none" = float.
SCHEMES = {
    "full": (None, "none", "none"),
    "int8-coarse": (lambda w: absmax_int8(w, None), None, None),
    "int8-moderate": (lambda w: absmax_int8(w, None), None, "none"),
    "int8-fine": (lambda w: absmax_int8(w, 1), 0, "none"),
    "int8-vectorwise": (lambda w: absmax_int8(w, 1), 1, "none"),
    "w4-zeropoint": (lambda w: zeropoint_int4(w, 0), "none", "none"),
    "w4-zeropoint-g128": (lambda w: zeropoint_int4(w, 128), "none", "none"),
}


def score(name, windows, logits_of):
    """Evaluates every window (one forward each, no autograd), every token after the first scored:
    {"scheme", "tokens", "seconds", "tokens_per_second", "ppl"}."""
    nll_sum, scored = 0.0, 0
    start = time.perf_counter()
    with torch.no_grad():
        for tokens in windows:
            logp = torch.log_softmax(logits_of(tokens)[:-1].double(), -1)
            nll_sum -= logp.gather(1, tokens[1:, None]).sum().item()
            scored += len(tokens) - 1
    seconds = time.perf_counter() - start
    n = sum(len(t) for t in windows)
    return {"scheme": name, "tokens": n, "seconds": seconds, "tokens_per_second": n / seconds,
            "ppl": math.exp(nll_sum / scored)}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.parts[f.data[0]].tolist()[0]


def main():
    model_path, tokens_path = sys.argv[1:3]
    seq_len, n_windows, threads = (int(v) for v in sys.argv[3:6])
    schemes = sys.argv[6:]
    torch.set_num_threads(threads)
    import gguf  # here, so gpt2_eager.py can share the scheme definitions without it
    reader = gguf.GGUFReader(model_path)
    n_layers = field(reader, "llama.block_count")
    n_heads = field(reader, "llama.attention.head_count")
    n_kv = field(reader, "llama.attention.head_count_kv", n_heads)
    eps = field(reader, "llama.attention.layer_norm_rms_epsilon")
    theta = field(reader, "llama.rope.freq_base", 10000.0)
    base = {t.name: torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
            for t in reader.tensors}
    emb = base["token_embd.weight"]
    head = base.get("output.weight", emb)
    d = emb.shape[1]
    hd = d // n_heads
    stream = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    windows = [torch.from_numpy(stream[i * seq_len:(i + 1) * seq_len]) for i in range(n_windows)]
    assert len(windows[-1]) == seq_len, "not enough tokens for the windows asked"

    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)

    def rope(v):
        a, b = v[..., 0::2], v[..., 1::2]
        out = torch.empty_like(v)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def rms(v, g):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * g

    for name in schemes:
        wq, in_dim, out_dim = SCHEMES[name]
        w = {k: (wq(v) if wq and k.startswith("blk.") and v.dim() == 2 else v) for k, v in base.items()}

        def linear(x, key):
            if in_dim != "none":
                x = absmax_int8(x, in_dim)
            y = x @ w[key].T
            return y if out_dim == "none" else absmax_int8(y, out_dim)

        def logits_of(tokens):
            x = emb[tokens]
            for i in range(n_layers):
                p = f"blk.{i}."
                h = rms(x, w[p + "attn_norm.weight"])
                q = rope(linear(h, p + "attn_q.weight").view(seq_len, n_heads, hd).transpose(0, 1))
                k = rope(linear(h, p + "attn_k.weight").view(seq_len, n_kv, hd).transpose(0, 1))
                v = linear(h, p + "attn_v.weight").view(seq_len, n_kv, hd).transpose(0, 1)
                k = k.repeat_interleave(n_heads // n_kv, 0)
                v = v.repeat_interleave(n_heads // n_kv, 0)
                att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1)
                x = x + linear((att @ v).transpose(0, 1).reshape(seq_len, d), p + "attn_output.weight")
                h = rms(x, w[p + "ffn_norm.weight"])
                x = x + linear(torch.nn.functional.silu(linear(h, p + "ffn_gate.weight")) * linear(h, p + "ffn_up.weight"),
                               p + "ffn_down.weight")
            return rms(x, w["output_norm.weight"]) @ head.T

        print(json.dumps(score(name, windows, logits_of)), flush=True)


if __name__ == "__main__":
    main()
