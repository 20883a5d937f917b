# An independent Llama forward pass for a GGUF file, the oracle for qeval's logits on real
# checkpoints (tests/model/smollm2_test.cpp). Written from llama.cpp's graph (llama.cpp
# src/models/llama.cpp), not from qeval: weights dequantised by llama.cpp's own Python package
# `gguf` (gguf.quants.dequantize), the forward in PyTorch (Debian's python3-torch), float32.
#
#   llama_gguf_forward.py MODEL.gguf TOKENS.i32 LOGITS.f32
# TOKENS.i32: little-endian int32 token ids (one sequence); LOGITS.f32: float32 [L, V] row-major.
#
# GGUF conventions used: matrices are stored [out, in] (ne = {in, out}); Q and K rows are in
# llama.cpp's rotary order (adjacent pairs (2i, 2i+1) rotate together: rope "normal" mode,
# which llama.cpp's converter produced by permuting Hugging Face's half-split rows); no
# output.weight means the LM head is the token embedding (tied).
import sys

import numpy as np
import torch

import gguf


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.parts[f.data[0]]
    return value.tolist()[0] if value.dtype != np.uint8 else bytes(value).decode()


def main():
    model_path, tokens_path, logits_path = sys.argv[1:4]
    torch.set_num_threads(2)
    reader = gguf.GGUFReader(model_path)
    arch = field(reader, "general.architecture")
    assert arch == "llama", f"this oracle handles llama GGUF files, not {arch}"
    n_layers = field(reader, "llama.block_count")
    n_heads = field(reader, "llama.attention.head_count")
    n_kv = field(reader, "llama.attention.head_count_kv", n_heads)
    eps = field(reader, "llama.attention.layer_norm_rms_epsilon")
    theta = field(reader, "llama.rope.freq_base", 10000.0)

    weights = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        weights[t.name] = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))

    tokens = torch.from_numpy(np.fromfile(tokens_path, dtype="<i4").astype(np.int64))
    L = tokens.numel()
    emb = weights["token_embd.weight"]  # [V, d]
    x = emb[tokens]  # [L, d]
    d = x.shape[1]
    head_dim = d // n_heads

    def rms_norm(v, g):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * g

    # Rotary, adjacent pairs: angle(p, i) = p * theta^(-2i / head_dim).
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * inv[None, :]  # [L, head_dim/2]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()

    def rope(v):  # [heads, L, head_dim]
        a, b = v[..., 0::2], v[..., 1::2]
        out = torch.empty_like(v)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    mask = torch.full((L, L), float("-inf")).triu(1)
    for i in range(n_layers):
        p = f"blk.{i}."
        h = rms_norm(x, weights[p + "attn_norm.weight"])
        q = (h @ weights[p + "attn_q.weight"].T).view(L, n_heads, head_dim).transpose(0, 1)
        k = (h @ weights[p + "attn_k.weight"].T).view(L, n_kv, head_dim).transpose(0, 1)
        v = (h @ weights[p + "attn_v.weight"].T).view(L, n_kv, head_dim).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(n_heads // n_kv, dim=0)
        v = v.repeat_interleave(n_heads // n_kv, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / head_dim**0.5 + mask, dim=-1)
        o = (att @ v).transpose(0, 1).reshape(L, d)
        x = x + o @ weights[p + "attn_output.weight"].T
        h = rms_norm(x, weights[p + "ffn_norm.weight"])
        gate = h @ weights[p + "ffn_gate.weight"].T
        up = h @ weights[p + "ffn_up.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ weights[p + "ffn_down.weight"].T
    x = rms_norm(x, weights["output_norm.weight"])
    head = weights.get("output.weight", emb)
    logits = (x @ head.T).contiguous()
    logits.numpy().astype("<f4").tofile(logits_path)


if __name__ == "__main__":
    main()
