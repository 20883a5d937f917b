#!/usr/bin/env python3
"""Tiny random checkpoints in the Hugging Face layout of each family qeval loads beyond GPT-2 and
Llama, with reference outputs from an independent forward pass written here in numpy (float64).

The forward follows each family's transformers modeling code (src/transformers/models/<family>/
modeling_<family>.py, read for this purpose; transformers >= 4.51 does not run on this machine's
Debian torch): Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm, head_dim independent of the width),
Mistral (one sliding window on every layer), Gemma-3 (embeddings x sqrt(d) rounded to the model
dtype, (1 + w) RMSNorm gains, q/k norms, sandwich norms, GeGLU with tanh GELU, sliding-window layers
with their own RoPE base and a global layer every sixth, scale query_pre_attn_scalar^-1/2), Phi-3
(fused qkv_proj and gate_up_proj, partial rotary, sliding window), GPT-NeoX (parallel residual,
partial rotary, per-head fused [q k v] rows, exact GELU, LayerNorm with biases) and OPT (learned
positions with offset 2, ReLU MLP, q scaled after its bias).

Run once; the outputs are committed (CI needs no Python):
    python3 tests/oracle/hf_families_forward.py tests/model/fixtures
Each <out>/<family>/ gets config.json (the keys HF writes for that family), model.safetensors
(float32) and reference.safetensors: input_ids [2, 12] int64, logits [2, 12, V] and hidden
[2, n_layers, 12, D] (the output of every block, before the final norm), float32 from float64 maths.
Needs numpy and safetensors only.
"""
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import save_file

B, L = 2, 12
erf = np.vectorize(math.erf)


# ---- the pieces, as HF writes them -------------------------------------------------------------

def rms_norm(x, w, eps, plus_one=False):
    x = x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))
    return x * ((1.0 + w) if plus_one else w)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def linear(x, p, name, bias=None):
    y = x @ p[name + ".weight"].T
    if bias or (bias is None and name + ".bias" in p):
        y = y + p[name + ".bias"]
    return y


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def rope(x, theta, rot):
    """HF apply_rotary_pos_emb with cos/sin of width `rot` (partial rotary passes the rest)."""
    inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    freqs = np.outer(np.arange(x.shape[-2], dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    xr, xp = x[..., :rot], x[..., rot:]
    return np.concatenate([xr * cos + rotate_half(xr) * sin, xp], -1)


def attention(q, k, v, scale, window=None):
    """q [B,H,L,hd], k/v [B,Hkv,L,hd]; causal, and key j visible to query i only if i - j < window."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # repeat_kv
    s = q @ k.transpose(0, 1, 3, 2) * scale
    i = np.arange(q.shape[2])[:, None]
    j = np.arange(q.shape[2])[None, :]
    allowed = j <= i
    if window:
        allowed &= (i - j) < window
    s = np.where(allowed, s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    p = s / s.sum(-1, keepdims=True)
    o = p @ v  # [B,H,L,hd]
    return o.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[2], -1)


def heads(x, n, hd):
    return x.reshape(x.shape[0], x.shape[1], n, hd).transpose(0, 2, 1, 3)


# ---- the families ------------------------------------------------------------------------------

def llama_like(cfg, p, ids, qk_norm=False, qkv_fused=False, gate_up_fused=False, windows=None):
    """Qwen2, Qwen3, Mistral, Phi-3."""
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    rot = int(hd * cfg.get("partial_rotary_factor", 1.0))
    eps, theta, F = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["intermediate_size"]
    h = p["model.embed_tokens.weight"][ids]
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        x = rms_norm(h, p[b + "input_layernorm.weight"], eps)
        if qkv_fused:
            qkv = linear(x, p, b + "self_attn.qkv_proj")
            q, k, v = qkv[..., :H * hd], qkv[..., H * hd:(H + Hkv) * hd], qkv[..., (H + Hkv) * hd:]
        else:
            q, k, v = (linear(x, p, b + f"self_attn.{n}_proj") for n in "qkv")
        q, k, v = heads(q, H, hd), heads(k, Hkv, hd), heads(v, Hkv, hd)
        if qk_norm:
            q = rms_norm(q, p[b + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, p[b + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, theta, rot), rope(k, theta, rot)
        h = h + linear(attention(q, k, v, hd ** -0.5, windows[i] if windows else None), p, b + "self_attn.o_proj")
        x = rms_norm(h, p[b + "post_attention_layernorm.weight"], eps)
        if gate_up_fused:
            gu = linear(x, p, b + "mlp.gate_up_proj")
            gate, up = gu[..., :F], gu[..., F:]
        else:
            gate, up = linear(x, p, b + "mlp.gate_proj"), linear(x, p, b + "mlp.up_proj")
        h = h + linear(silu(gate) * up, p, b + "mlp.down_proj")
        hidden.append(h)
    h = rms_norm(h, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if tied(cfg) else p["lm_head.weight"]
    return h @ head.T, hidden


def gemma3(cfg, p, ids):
    D, H, Hkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    norm = lambda x, name: rms_norm(x, p[name], eps, plus_one=True)
    # Gemma3TextScaledWordEmbedding: sqrt(hidden_size) as a tensor cast to the weights' dtype (float32 here).
    h = p["model.embed_tokens.weight"][ids] * np.float64(np.float32(D ** 0.5))
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        sliding = cfg["layer_types"][i] == "sliding_attention" if "layer_types" in cfg else bool(
            (i + 1) % cfg["sliding_window_pattern"])
        theta = cfg["rope_local_base_freq"] if sliding else cfg["rope_theta"]
        x = norm(h, b + "input_layernorm.weight")
        q, k, v = (linear(x, p, b + f"self_attn.{n}_proj") for n in "qkv")
        q, k, v = heads(q, H, hd), heads(k, Hkv, hd), heads(v, Hkv, hd)
        q, k = norm(q, b + "self_attn.q_norm.weight"), norm(k, b + "self_attn.k_norm.weight")
        q, k = rope(q, theta, hd), rope(k, theta, hd)
        a = linear(attention(q, k, v, cfg["query_pre_attn_scalar"] ** -0.5, cfg["sliding_window"] if sliding else None),
                   p, b + "self_attn.o_proj")
        h = h + norm(a, b + "post_attention_layernorm.weight")
        x = norm(h, b + "pre_feedforward_layernorm.weight")
        m = linear(gelu_tanh(linear(x, p, b + "mlp.gate_proj")) * linear(x, p, b + "mlp.up_proj"), p, b + "mlp.down_proj")
        h = h + norm(m, b + "post_feedforward_layernorm.weight")
        hidden.append(h)
    logits = norm(h, "model.norm.weight") @ p["model.embed_tokens.weight"].T
    if cfg.get("final_logit_softcapping"):
        c = cfg["final_logit_softcapping"]
        logits = np.tanh(logits / c) * c
    return logits, hidden


def gpt_neox(cfg, p, ids):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = D // H
    rot = int(hd * cfg["rotary_pct"])
    eps = cfg["layer_norm_eps"]
    ln = lambda x, name: layer_norm(x, p[name + ".weight"], p[name + ".bias"], eps)
    h = p["gpt_neox.embed_in.weight"][ids]
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"gpt_neox.layers.{i}."
        x = ln(h, b + "input_layernorm")
        qkv = linear(x, p, b + "attention.query_key_value").reshape(B, L, H, 3 * hd).transpose(0, 2, 1, 3)
        q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
        q, k = rope(q, cfg["rotary_emb_base"], rot), rope(k, cfg["rotary_emb_base"], rot)
        a = linear(attention(q, k, v, hd ** -0.5), p, b + "attention.dense")
        x2 = ln(h, b + "post_attention_layernorm")
        m = linear(gelu_erf(linear(x2, p, b + "mlp.dense_h_to_4h")), p, b + "mlp.dense_4h_to_h")
        assert cfg["use_parallel_residual"]
        h = m + a + h
        hidden.append(h)
    return ln(h, "gpt_neox.final_layer_norm") @ p["embed_out.weight"].T, hidden


def opt(cfg, p, ids):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = D // H
    ln = lambda x, name: layer_norm(x, p[name + ".weight"], p[name + ".bias"], 1e-5)
    pos = np.arange(L) + 2  # OPTLearnedPositionalEmbedding: cumsum(mask) - 1 + offset 2
    h = p["model.decoder.embed_tokens.weight"][ids] + p["model.decoder.embed_positions.weight"][pos]
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.decoder.layers.{i}."
        x = ln(h, b + "self_attn_layer_norm")
        q = linear(x, p, b + "self_attn.q_proj") * hd ** -0.5
        k, v = linear(x, p, b + "self_attn.k_proj"), linear(x, p, b + "self_attn.v_proj")
        h = h + linear(attention(heads(q, H, hd), heads(k, H, hd), heads(v, H, hd), 1.0), p, b + "self_attn.out_proj")
        x = ln(h, b + "final_layer_norm")
        h = h + linear(np.maximum(linear(x, p, b + "fc1"), 0), p, b + "fc2")
        hidden.append(h)
    return ln(h, "model.decoder.final_layer_norm") @ p["model.decoder.embed_tokens.weight"].T, hidden


# ---- checkpoints -------------------------------------------------------------------------------

def tied(cfg):
    # HF writes tie_word_embeddings only where it differs from PretrainedConfig's default (True)
    # or the family's; Gemma3TextConfig's default is True, so its config.json leaves it out.
    return cfg.get("tie_word_embeddings", True)


def common(arch, model_type, **kw):
    c = {"architectures": [arch], "model_type": model_type}
    c.update(kw)
    c.update({"torch_dtype": "float32", "transformers_version": "4.57.1"})
    return dict(sorted(c.items()))


class Params(dict):
    def __init__(self, seed):
        super().__init__()
        self.rng = np.random.default_rng(seed)

    def w(self, name, *shape, std=0.3):
        self[name] = (self.rng.standard_normal(shape) * std).astype(np.float32)

    def gain(self, name, n, center=1.0):  # norm gains around `center` (0 for Gemma's stored w)
        self[name] = (center + 0.2 * self.rng.standard_normal(n)).astype(np.float32)

    def bias(self, name, n):
        self[name] = (0.1 * self.rng.standard_normal(n)).astype(np.float32)


def rotary_decoder_params(cfg, seed, qkv_bias=False, qk_norm=False, qkv_fused=False, gate_up_fused=False,
                          sandwich=False, gain_center=1.0):
    p = Params(seed)
    V, D, F = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    p.w("model.embed_tokens.weight", V, D, std=1.0)
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        p.gain(b + "input_layernorm.weight", D, gain_center)
        if qkv_fused:
            p.w(b + "self_attn.qkv_proj.weight", (H + 2 * Hkv) * hd, D)
        else:
            for n, rows in (("q", H * hd), ("k", Hkv * hd), ("v", Hkv * hd)):
                p.w(b + f"self_attn.{n}_proj.weight", rows, D)
                if qkv_bias:
                    p.bias(b + f"self_attn.{n}_proj.bias", rows)
        p.w(b + "self_attn.o_proj.weight", D, H * hd)
        if qk_norm:
            p.gain(b + "self_attn.q_norm.weight", hd, gain_center)
            p.gain(b + "self_attn.k_norm.weight", hd, gain_center)
        p.gain(b + "post_attention_layernorm.weight", D, gain_center)
        if sandwich:
            p.gain(b + "pre_feedforward_layernorm.weight", D, gain_center)
            p.gain(b + "post_feedforward_layernorm.weight", D, gain_center)
        if gate_up_fused:
            p.w(b + "mlp.gate_up_proj.weight", 2 * F, D)
        else:
            p.w(b + "mlp.gate_proj.weight", F, D)
            p.w(b + "mlp.up_proj.weight", F, D)
        p.w(b + "mlp.down_proj.weight", D, F)
    p.gain("model.norm.weight", D, gain_center)
    if not tied(cfg):
        p.w("lm_head.weight", V, D)
    return p


def families():
    out = {}

    cfg = common("Qwen2ForCausalLM", "qwen2", attention_dropout=0.0, bos_token_id=1, eos_token_id=2, hidden_act="silu",
                 hidden_size=16, initializer_range=0.02, intermediate_size=40, max_position_embeddings=64,
                 max_window_layers=1, num_attention_heads=4, num_hidden_layers=2, num_key_value_heads=2,
                 rms_norm_eps=1e-6, rope_scaling=None, rope_theta=10000.0, sliding_window=5, tie_word_embeddings=False,
                 use_cache=True, use_sliding_window=True, vocab_size=80,
                 layer_types=["full_attention", "sliding_attention"])
    p = rotary_decoder_params(cfg, 1, qkv_bias=True)
    out["tiny-qwen2-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: llama_like(cfg, p, ids, windows=[None, 5]))

    cfg = common("Qwen3ForCausalLM", "qwen3", attention_bias=False, attention_dropout=0.0, bos_token_id=1,
                 eos_token_id=2, head_dim=8, hidden_act="silu", hidden_size=16, initializer_range=0.02,
                 intermediate_size=40, max_position_embeddings=64, max_window_layers=2, num_attention_heads=4,
                 num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-6, rope_scaling=None, rope_theta=1000000.0,
                 sliding_window=None, tie_word_embeddings=True, use_cache=True, use_sliding_window=False, vocab_size=80,
                 layer_types=["full_attention", "full_attention"])
    p = rotary_decoder_params(cfg, 2, qk_norm=True)
    out["tiny-qwen3-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: llama_like(cfg, p, ids, qk_norm=True))

    cfg = common("MistralForCausalLM", "mistral", attention_dropout=0.0, bos_token_id=1, eos_token_id=2, head_dim=None,
                 hidden_act="silu", hidden_size=16, initializer_range=0.02, intermediate_size=40,
                 max_position_embeddings=64, num_attention_heads=4, num_hidden_layers=2, num_key_value_heads=1,
                 rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4, tie_word_embeddings=False, use_cache=True,
                 vocab_size=80)
    p = rotary_decoder_params(cfg, 3)
    out["tiny-mistral-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: llama_like(cfg, p, ids, windows=[4, 4]))

    # Gemma-3 as transformers 4.51 writes Gemma3ForCausalLM (no layer_types: the pattern decides).
    cfg = common("Gemma3ForCausalLM", "gemma3_text", attention_bias=False, attention_dropout=0.0,
                 attn_logit_softcapping=None, bos_token_id=2, cache_implementation="hybrid", eos_token_id=1,
                 final_logit_softcapping=None, head_dim=12, hidden_activation="gelu_pytorch_tanh", hidden_size=16,
                 initializer_range=0.02, intermediate_size=32, max_position_embeddings=64, num_attention_heads=2,
                 num_hidden_layers=7, num_key_value_heads=1, pad_token_id=0, query_pre_attn_scalar=12,
                 rms_norm_eps=1e-6, rope_local_base_freq=10000.0, rope_scaling=None, rope_theta=1000000.0,
                 sliding_window=4, sliding_window_pattern=6, use_cache=True, vocab_size=80)
    p = rotary_decoder_params(cfg, 4, qk_norm=True, sandwich=True, gain_center=0.0)
    out["tiny-gemma3-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: gemma3(cfg, p, ids))

    cfg = common("Phi3ForCausalLM", "phi3", attention_bias=False, attention_dropout=0.0, bos_token_id=1,
                 embd_pdrop=0.0, eos_token_id=2, hidden_act="silu", hidden_size=32, initializer_range=0.02,
                 intermediate_size=40, max_position_embeddings=64, num_attention_heads=4, num_hidden_layers=2,
                 num_key_value_heads=2, original_max_position_embeddings=64, pad_token_id=0, partial_rotary_factor=0.5,
                 resid_pdrop=0.0, rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0, sliding_window=6,
                 tie_word_embeddings=False, use_cache=True, vocab_size=80)
    p = rotary_decoder_params(cfg, 5, qkv_fused=True, gate_up_fused=True)
    out["tiny-phi3-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: llama_like(cfg, p, ids, qkv_fused=True, gate_up_fused=True, windows=[6, 6]))

    cfg = common("GPTNeoXForCausalLM", "gpt_neox", attention_bias=True, attention_dropout=0.0, bos_token_id=0,
                 classifier_dropout=0.1, eos_token_id=0, hidden_act="gelu", hidden_dropout=0.0, hidden_size=32,
                 initializer_range=0.02, intermediate_size=64, layer_norm_eps=1e-5, max_position_embeddings=64,
                 num_attention_heads=4, num_hidden_layers=2, rope_scaling=None, rotary_emb_base=10000,
                 rotary_pct=0.25, tie_word_embeddings=False, use_cache=True, use_parallel_residual=True, vocab_size=80)
    p = Params(6)
    V, D, F, H = 80, 32, 64, 4
    p.w("gpt_neox.embed_in.weight", V, D, std=1.0)
    for i in range(2):
        b = f"gpt_neox.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm"):
            p.gain(b + n + ".weight", D)
            p.bias(b + n + ".bias", D)
        for n, o, i_ in (("attention.query_key_value", 3 * D, D), ("attention.dense", D, D),
                         ("mlp.dense_h_to_4h", F, D), ("mlp.dense_4h_to_h", D, F)):
            p.w(b + n + ".weight", o, i_)
            p.bias(b + n + ".bias", o)
    p.gain("gpt_neox.final_layer_norm.weight", D)
    p.bias("gpt_neox.final_layer_norm.bias", D)
    p.w("embed_out.weight", V, D)
    out["tiny-gpt-neox-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: gpt_neox(cfg, p, ids))

    cfg = common("OPTForCausalLM", "opt", _remove_final_layer_norm=False, activation_dropout=0.0,
                 activation_function="relu", attention_dropout=0.0, bos_token_id=2, do_layer_norm_before=True,
                 dropout=0.1, enable_bias=True, eos_token_id=2, ffn_dim=32, hidden_size=16, init_std=0.02,
                 layer_norm_elementwise_affine=True, layerdrop=0.0, max_position_embeddings=16, num_attention_heads=4,
                 num_hidden_layers=2, pad_token_id=1, prefix="</s>", use_cache=True, vocab_size=80,
                 word_embed_proj_dim=16)
    p = Params(7)
    V, D, F = 80, 16, 32
    p.w("model.decoder.embed_tokens.weight", V, D, std=1.0)
    p.w("model.decoder.embed_positions.weight", 16 + 2, D, std=0.5)
    for i in range(2):
        b = f"model.decoder.layers.{i}."
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            p.gain(b + n + ".weight", D)
            p.bias(b + n + ".bias", D)
        for n, o, i_ in (("self_attn.q_proj", D, D), ("self_attn.k_proj", D, D), ("self_attn.v_proj", D, D),
                         ("self_attn.out_proj", D, D), ("fc1", F, D), ("fc2", D, F)):
            p.w(b + n + ".weight", o, i_)
            p.bias(b + n + ".bias", o)
    p.gain("model.decoder.final_layer_norm.weight", D)
    p.bias("model.decoder.final_layer_norm.bias", D)
    out["tiny-opt-hf"] = (cfg, p, lambda ids, cfg=cfg, p=p: opt(cfg, p, ids))
    return out


def main(root):
    for name, (cfg, p, forward) in families().items():
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        save_file({k: v for k, v in sorted(p.items())}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        ids = np.random.default_rng(100 + len(name)).integers(0, cfg["vocab_size"], size=(B, L)).astype(np.int64)
        p64 = {k: v.astype(np.float64) for k, v in p.items()}
        logits, hidden = run(forward, p, p64, ids)
        save_file({"input_ids": ids, "logits": logits.astype(np.float32),
                   "hidden": np.stack(hidden, 1).astype(np.float32)},
                  os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
        print(f"{name}: logits max |{np.abs(logits).max():.3f}|, hidden max |{max(np.abs(h).max() for h in hidden):.3f}|")


def run(forward, p, p64, ids):
    # The forward closures read `p`; hand them float64 copies of the float32 weights.
    saved = dict(p)
    p.update(p64)
    try:
        return forward(ids)
    finally:
        p.update(saved)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/model/fixtures")
