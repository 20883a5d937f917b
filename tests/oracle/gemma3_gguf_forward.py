#!/usr/bin/env python3
"""An independent Gemma-3 forward pass for a GGUF file, the oracle for qeval's logits on
Gemma-3-270M (tests/model/gemma3_test.cpp). Written from Hugging Face's modeling_gemma3.py
(Gemma3TextModel) and llama.cpp's graph (src/models/gemma3.cpp, hyper-parameters in
llama-model.cpp), not from qeval: weights dequantised by llama.cpp's own Python package `gguf`
(gguf.quants.dequantize), the forward in numpy, float32 (softmax and norms in float64).

  gemma3_gguf_forward.py MODEL.gguf TOKENS.i32 LOGITS.f32 [HIDDEN.f32]

TOKENS.i32: little-endian int32 token ids (one sequence, position 0 first); LOGITS.f32: float32
[L, V] row-major; HIDDEN.f32 (optional): float32 [n_layers, L, d], each block's output (after
its second residual add, before the final norm).

What Gemma-3 does, and where each convention comes from:
  - embeddings × √d (d = gemma3.embedding_length), in float32 (HF Gemma3TextScaledWordEmbedding;
    llama.cpp ggml_scale(inpL, sqrtf(n_embd))); the LM head is the token embedding (tied: no
    output.weight), with no final-logit soft-capping (Gemma-3's config has none; llama.cpp's
    sliding-window graph applies none).
  - RMSNorm y = x / sqrt(mean(x²) + eps) · g. HF's Gemma3RMSNorm multiplies by (1 + w); llama.cpp's
    converter stores 1 + w in the GGUF, so g is the GGUF tensor as it is.
  - each block (sandwich norms):
        h = x + post_attention_norm(attention(attn_norm(x)))
        out = h + post_ffw_norm(down(gelu_tanh(gate(ffn_norm(h))) * up(ffn_norm(h))))
  - attention: q, k, v projections; RMSNorm over each head's 256 channels for q and for k
    (attn_q_norm, attn_k_norm), then RoPE in NEOX / HF "rotate half" pairing (i, i + head_dim/2):
    llama.cpp's gemma3 uses LLAMA_ROPE_TYPE_NEOX and its converter does not permute Gemma's q/k;
    q scaled by query_pre_attn_scalar^-1/2 = head_dim^-1/2 for every size but 27B (llama.cpp
    f_attention_scale; HF config query_pre_attn_scalar = 256 for 270M); grouped-query attention
    (4 query heads share 1 key/value head).
  - local and global layers: layer il is global when (il + 1) % 6 == 0 (llama.cpp
    set_swa_pattern(6); HF layer_types "full_attention" every sixth), else local: sliding window
    of gemma3.attention.sliding_window = 512 keys (query i sees keys j with i − j < 512, itself
    included: llama.cpp LLAMA_SWA_TYPE_STANDARD masks p1 − p0 >= n_swa; HF sliding_window_overlay
    kv_idx > q_idx − sliding_window) and RoPE base 10,000 (rope_freq_base_train_swa; HF
    rope_local_base_freq); global layers see every earlier key with RoPE base gemma3.rope.freq_base
    (1,000,000), no scaling for 270M (the GGUF has no rope.scaling keys).
"""
import sys

import numpy as np

import gguf


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.parts[f.data[0]]
    return value.tolist()[0] if value.dtype != np.uint8 else bytes(value).decode()


def rms_norm(x, g, eps):
    # float64 statistics, float32 result: x [..., n], g [n]
    x64 = x.astype(np.float64)
    y = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (y * g.astype(np.float64)).astype(np.float32)


def gelu_tanh(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64 ** 3)))).astype(np.float32)


def rope_half(x, positions, base):
    # x [L, H, hd]: pairs (i, i + hd/2) rotate by angle p * base^(-2i/hd)
    hd = x.shape[-1]
    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = positions[:, None].astype(np.float64) * inv[None, :]  # [L, hd/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : hd // 2].astype(np.float64), x[..., hd // 2 :].astype(np.float64)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(np.float32)


def main():
    model_path, tokens_path, logits_path = sys.argv[1:4]
    hidden_path = sys.argv[4] if len(sys.argv) > 4 else None
    reader = gguf.GGUFReader(model_path)
    arch = field(reader, "general.architecture")
    assert arch == "gemma3", f"this oracle handles gemma3 GGUF files, not {arch}"
    n_layers = field(reader, "gemma3.block_count")
    d = field(reader, "gemma3.embedding_length")
    n_heads = field(reader, "gemma3.attention.head_count")
    n_kv = field(reader, "gemma3.attention.head_count_kv", n_heads)
    head_dim = field(reader, "gemma3.attention.key_length", d // n_heads)
    eps = field(reader, "gemma3.attention.layer_norm_rms_epsilon")
    base_global = field(reader, "gemma3.rope.freq_base", 1_000_000.0)
    base_local = 10_000.0
    window = field(reader, "gemma3.attention.sliding_window")
    assert "gemma3.rope.scaling.type" not in reader.fields, "RoPE scaling is not handled by this oracle"
    assert "gemma3.final_logit_softcapping" not in reader.fields, "final soft-capping is not handled by this oracle"

    w = {}
    for t in reader.tensors:
        w[t.name] = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    assert "output.weight" not in w, "this oracle assumes the tied LM head of Gemma-3"

    tokens = np.fromfile(tokens_path, dtype="<i4").astype(np.int64)
    L = tokens.size
    emb = w["token_embd.weight"]  # [V, d]
    x = emb[tokens] * np.float32(np.sqrt(np.float32(d)))  # [L, d]
    pos = np.arange(L)
    causal = pos[None, :] <= pos[:, None]  # [query, key]
    local = causal & (pos[:, None] - pos[None, :] < window)
    q_scale = np.float32(1.0 / np.sqrt(head_dim))
    hidden = []
    for il in range(n_layers):
        p = f"blk.{il}."
        is_global = (il + 1) % 6 == 0
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        q = (h @ w[p + "attn_q.weight"].T).reshape(L, n_heads, head_dim)
        k = (h @ w[p + "attn_k.weight"].T).reshape(L, n_kv, head_dim)
        v = (h @ w[p + "attn_v.weight"].T).reshape(L, n_kv, head_dim)
        q = rms_norm(q, w[p + "attn_q_norm.weight"], eps)
        k = rms_norm(k, w[p + "attn_k_norm.weight"], eps)
        base = base_global if is_global else base_local
        q = rope_half(q, pos, base) * q_scale
        k = rope_half(k, pos, base)
        mask = causal if is_global else local
        out = np.empty((L, n_heads, head_dim), dtype=np.float32)
        group = n_heads // n_kv
        for hh in range(n_heads):
            kv = hh // group
            s = (q[:, hh, :] @ k[:, kv, :].T).astype(np.float64)  # [L, L]
            s = np.where(mask, s, -np.inf)
            s -= s.max(axis=-1, keepdims=True)
            a = np.exp(s)
            a /= a.sum(axis=-1, keepdims=True)
            out[:, hh, :] = (a.astype(np.float32) @ v[:, kv, :])
        attn = out.reshape(L, n_heads * head_dim) @ w[p + "attn_output.weight"].T
        x = x + rms_norm(attn, w[p + "post_attention_norm.weight"], eps)
        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        ff = gelu_tanh(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)
        ff = ff @ w[p + "ffn_down.weight"].T
        x = x + rms_norm(ff, w[p + "post_ffw_norm.weight"], eps)
        if hidden_path:
            hidden.append(x.copy())
    x = rms_norm(x, w["output_norm.weight"], eps)
    logits = x @ emb.T  # [L, V]
    np.ascontiguousarray(logits, dtype=np.float32).tofile(logits_path)
    if hidden_path:
        np.ascontiguousarray(np.stack(hidden), dtype=np.float32).tofile(hidden_path)


if __name__ == "__main__":
    main()
