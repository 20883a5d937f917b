#!/usr/bin/env python3
"""Tiny random checkpoints in the Hugging Face layout of the mixture-of-experts and state-space
families (issue 45), with reference outputs from an independent numpy float64 forward.

The forward follows each family's transformers modeling code (src/transformers/models/<family>/
modeling_<family>.py, read for this purpose):
  Mixtral     MixtralSparseMoeBlock: softmax over the experts, top-k, renormalised; experts w2(silu(w1 x) * w3 x)
  Qwen2-MoE   softmax, top-k, renormalised only with norm_topk_prob; a shared expert × sigmoid(shared_expert_gate x);
              experts on the layers with (i + 1) % decoder_sparse_step == 0 outside mlp_only_layers; q/k/v biases
  Qwen3-MoE   Qwen3 attention (q/k RMSNorm) + the sparse block without a shared expert
  Mamba       MambaMixer.slow_forward: in_proj → causal depthwise conv → silu → x_proj → dt_proj → softplus;
              zero-order-hold discretisation exp(ΔA), ΔB u; the sequential selective scan; + D u; × silu(z)
  Mamba-2     Mamba2Mixer.torch_forward: in_proj → z, xBC, dt; conv + silu on xBC; softplus(dt + dt_bias);
              the chunked SSD (segment sums, intra-chunk masked attention, chunk states, inter-chunk recurrence)
              checked here against the plain recurrence; gated RMSNorm over the whole d_inner; out_proj
  Jamba       attention (no positional encoding) every attn_layer_period at attn_layer_offset, Mamba elsewhere
              with RMSNorm of dt, B and C; experts every expert_layer_period at expert_layer_offset, softmax top-k
              not renormalised

Run once; the outputs are committed (CI needs no Python):
    python3 tests/oracle/hf_moe_ssm_forward.py tests/model/fixtures
Each <out>/<family>/ gets config.json, model.safetensors (float32) and reference.safetensors: input_ids [2, 12]
int64, logits [2, 12, V], hidden [2, n_layers, 12, D] (every block's output, before the final norm), and for MoE
models routing [2, n_moe_layers, 12, k] int64 (the experts each token picks, largest weight first). Needs numpy and
safetensors only. The script prints the smallest router margin (the gap between the k-th and (k+1)-th probability):
routing is compared exactly, so the fixtures are made with margins far above float32 rounding.
"""
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_families_forward import (B, L, Params, attention, common, heads, linear, rms_norm, rope, silu,  # noqa: E402
                                 tied)


def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---- mixture of experts ------------------------------------------------------------------------

def sparse_moe(x, p, prefix, router, expert_names, k, renormalize, routes, shared=False):
    """x [B, L, D] → [B, L, D]; the HF loop over experts with index_add of weighted outputs."""
    D = x.shape[-1]
    flat = x.reshape(-1, D)
    probs = softmax(flat @ p[prefix + router].T)  # [T, E]
    order = np.argsort(-probs, axis=-1, kind="stable")
    top = order[:, :k]
    w = np.take_along_axis(probs, top, -1)
    sorted_p = np.take_along_axis(probs, order, -1)
    routes["margin"] = min(routes.get("margin", 1.0), float((sorted_p[:, k - 1] - sorted_p[:, k]).min()))
    if renormalize:
        w = w / w.sum(-1, keepdims=True)
    out = np.zeros_like(flat)
    gate, up, down = expert_names
    for e in range(p[prefix + router].shape[0]):
        tok, slot = np.nonzero(top == e)
        if len(tok) == 0:
            continue
        ex = f"{prefix}experts.{e}."
        xe = flat[tok]
        ye = linear(silu(linear(xe, p, ex + gate)) * linear(xe, p, ex + up), p, ex + down)
        np.add.at(out, tok, ye * w[tok, slot][:, None])
    if shared:
        s = linear(silu(linear(flat, p, prefix + "shared_expert.gate_proj")) * linear(flat, p, prefix + "shared_expert.up_proj"),
                   p, prefix + "shared_expert.down_proj")
        g = 1.0 / (1.0 + np.exp(-(flat @ p[prefix + "shared_expert_gate.weight"].T)))
        out = out + g * s
    routes.setdefault("choices", []).append(top.reshape(x.shape[0], x.shape[1], k))
    return out.reshape(x.shape)


def moe_decoder(cfg, p, ids, kind, routes):
    """Mixtral, Qwen2-MoE, Qwen3-MoE: rotary attention + (routed experts | dense MLP)."""
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    h = p["model.embed_tokens.weight"][ids]
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        x = rms_norm(h, p[b + "input_layernorm.weight"], eps)
        q, k, v = (linear(x, p, b + f"self_attn.{n}_proj") for n in "qkv")
        q, k, v = heads(q, H, hd), heads(k, Hkv, hd), heads(v, Hkv, hd)
        if kind == "qwen3_moe":
            q = rms_norm(q, p[b + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, p[b + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, theta, hd), rope(k, theta, hd)
        h = h + linear(attention(q, k, v, hd ** -0.5), p, b + "self_attn.o_proj")
        x = rms_norm(h, p[b + "post_attention_layernorm.weight"], eps)
        if kind == "mixtral":
            m = sparse_moe(x, p, b + "block_sparse_moe.", "gate.weight", ("w1", "w3", "w2"),
                           cfg["num_experts_per_tok"], True, routes)
        elif is_qwen_moe_layer(cfg, i):
            m = sparse_moe(x, p, b + "mlp.", "gate.weight", ("gate_proj", "up_proj", "down_proj"),
                           cfg["num_experts_per_tok"], cfg["norm_topk_prob"], routes, shared=kind == "qwen2_moe")
        else:
            m = linear(silu(linear(x, p, b + "mlp.gate_proj")) * linear(x, p, b + "mlp.up_proj"), p, b + "mlp.down_proj")
        h = h + m
        hidden.append(h)
    h = rms_norm(h, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if tied(cfg) else p["lm_head.weight"]
    return h @ head.T, hidden


def is_qwen_moe_layer(cfg, i):
    return i not in cfg["mlp_only_layers"] and cfg["num_experts"] > 0 and (i + 1) % cfg["decoder_sparse_step"] == 0


# ---- state spaces ------------------------------------------------------------------------------

def causal_conv(x, w, bias):
    """x [B, L, C], w [C, 1, K] (nn.Conv1d depthwise, padding K - 1, first L outputs)."""
    K = w.shape[-1]
    xp = np.concatenate([np.zeros((x.shape[0], K - 1, x.shape[2])), x], 1)
    y = sum(xp[:, j:j + x.shape[1]] * w[:, 0, j] for j in range(K))
    return y + bias if bias is not None else y


def mamba_mixer(x, p, m, cfg, jamba=False, tap=None):
    """tap, when given, is called with the scan's operands (ssm_statistics_oracle.py): delta [B, L, E] after
    softplus, A [E, N], B and C [B, L, N] as the scan uses them, u [B, L, E], D [E] and y [B, L, E] (scan + D u)."""
    E = cfg["E"]
    N, R = cfg["N"], cfg["R"]
    proj = linear(x, p, m + "in_proj")
    u, z = proj[..., :E], proj[..., E:]
    u = silu(causal_conv(u, p[m + "conv1d.weight"], p.get(m + "conv1d.bias")))
    ssm = linear(u, p, m + "x_proj")
    dt, Bm, Cm = ssm[..., :R], ssm[..., R:R + N], ssm[..., R + N:]
    if jamba:
        eps = cfg["eps"]
        dt = rms_norm(dt, p[m + "dt_layernorm.weight"], eps)
        Bm = rms_norm(Bm, p[m + "b_layernorm.weight"], eps)
        Cm = rms_norm(Cm, p[m + "c_layernorm.weight"], eps)
    delta = softplus(linear(dt, p, m + "dt_proj"))  # [B, L, E]
    A = -np.exp(p[m + "A_log"])  # [E, N]
    state = np.zeros((x.shape[0], E, N))
    ys = []
    for t in range(x.shape[1]):
        dA = np.exp(A[None] * delta[:, t, :, None])
        dBu = delta[:, t, :, None] * Bm[:, t, None, :] * u[:, t, :, None]
        state = dA * state + dBu
        ys.append(state @ Cm[:, t, :, None])
    y = np.concatenate(ys, -1).transpose(0, 2, 1) + u * p[m + "D"]
    if tap:
        tap(delta=delta, A=A, B=Bm, C=Cm, u=u, D=p[m + "D"], y=y)
    return linear(y * silu(z), p, m + "out_proj")


def segsum(x):
    T = x.shape[-1]
    xe = np.repeat(x[..., None], T, -1)  # [..., i, j] = x[i]
    xe = np.where(np.tril(np.ones((T, T), bool), -1), xe, 0.0)
    s = np.cumsum(xe, -2)
    return np.where(np.tril(np.ones((T, T), bool), 0), s, -np.inf)


def ssd_chunked(x, dt, A, Bm, Cm, chunk):
    """HF Mamba2Mixer.torch_forward's SSD: x [B, L, H, P], dt [B, L, H], A [H], B/C [B, L, H, N]."""
    Bn, Ln, H, P = x.shape
    pad = (chunk - Ln % chunk) % chunk

    def chunks(t):
        t = np.concatenate([t, np.zeros((Bn, pad) + t.shape[2:])], 1)
        return t.reshape((Bn, -1, chunk) + t.shape[2:])

    X = chunks(x * dt[..., None])
    Adt = chunks(A * dt).transpose(0, 3, 1, 2)  # [B, H, c, T]
    Bc, Cc = chunks(Bm), chunks(Cm)
    Acs = np.cumsum(Adt, -1)
    Lm = np.exp(segsum(Adt))
    Y_diag = np.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, Lm, X)
    decay_states = np.exp(Acs[..., -1:] - Acs)
    states = np.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay_states, X)
    states = np.concatenate([np.zeros_like(states[:, :1]), states], 1)
    decay_chunk = np.exp(segsum(np.pad(Acs[..., -1], ((0, 0), (0, 0), (1, 0)))))
    states = np.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    Y_off = np.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, np.exp(Acs))
    return (Y_diag + Y_off).reshape(Bn, -1, H, P)[:, :Ln]


def ssd_recurrence(x, dt, A, Bm, Cm):
    Bn, Ln, H, P = x.shape
    h = np.zeros((Bn, H, P, Bm.shape[-1]))
    ys = []
    for t in range(Ln):
        h = np.exp(dt[:, t] * A)[..., None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, :, None, :]
        ys.append((h * Cm[:, t, :, None, :]).sum(-1))
    return np.stack(ys, 1)


def mamba2_mixer(x, p, m, cfg, tap=None):
    """tap as mamba_mixer's: delta [B, L, H] after softplus and the clamp, A [H], B and C [B, L, H, N] (each head
    its group's), u [B, L, H, P], D [H] and y [B, L, H, P] (SSD + D u, before the gated norm)."""
    E, N, H, G = cfg["E"], cfg["N"], cfg["H"], cfg["G"]
    P, conv = E // H, E + 2 * G * N
    proj = linear(x, p, m + "in_proj")
    z, xbc, dt = proj[..., :E], proj[..., E:E + conv], proj[..., E + conv:]
    xbc = silu(causal_conv(xbc, p[m + "conv1d.weight"], p.get(m + "conv1d.bias")))
    u = xbc[..., :E].reshape(x.shape[0], x.shape[1], H, P)
    Bm = np.repeat(xbc[..., E:E + G * N].reshape(x.shape[0], x.shape[1], G, N), H // G, 2)
    Cm = np.repeat(xbc[..., E + G * N:].reshape(x.shape[0], x.shape[1], G, N), H // G, 2)
    dt = np.clip(softplus(dt + p[m + "dt_bias"]), *cfg.get("dt_limit", (0.0, math.inf)))  # HF default (0, inf)
    A = -np.exp(p[m + "A_log"])
    y = ssd_chunked(u, dt, A, Bm, Cm, cfg["chunk"])
    assert np.abs(y - ssd_recurrence(u, dt, A, Bm, Cm)).max() < 1e-10, "chunked SSD disagrees with the recurrence"
    y = y + u * p[m + "D"][:, None]
    if tap:
        tap(delta=dt, A=A, B=Bm, C=Cm, u=u, D=p[m + "D"], y=y)
    y = y.reshape(x.shape[0], x.shape[1], E)
    g = y * silu(z)
    g = g / np.sqrt((g * g).mean(-1, keepdims=True) + cfg["eps"]) * p[m + "norm.weight"]
    return linear(g, p, m + "out_proj")


def mamba_family(cfg, p, ids, kind, tap=None):
    """tap(layer, **operands): each mixer's scan operands (mamba_mixer, mamba2_mixer)."""
    D, eps = cfg["hidden_size"], cfg["layer_norm_epsilon"]
    sizes = {"E": int(cfg["expand"] * D), "N": cfg["state_size"], "eps": eps}
    if kind == "mamba":
        sizes["R"] = math.ceil(D / 16) if cfg["time_step_rank"] == "auto" else cfg["time_step_rank"]
    else:
        sizes.update(H=cfg["num_heads"], G=cfg["n_groups"], chunk=cfg["chunk_size"],
                     dt_limit=tuple(cfg.get("time_step_limit", (0.0, math.inf))))
    h = p["backbone.embeddings.weight"][ids]
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"backbone.layers.{i}."
        x = rms_norm(h, p[b + "norm.weight"], eps)
        t = (lambda i=i, **a: tap(i, **a)) if tap else None
        h = h + (mamba_mixer(x, p, b + "mixer.", sizes, tap=t) if kind == "mamba" else
                 mamba2_mixer(x, p, b + "mixer.", sizes, tap=t))
        hidden.append(h)
    h = rms_norm(h, p["backbone.norm_f.weight"], eps)
    head = p["backbone.embeddings.weight"] if tied(cfg) else p["lm_head.weight"]
    return h @ head.T, hidden


def jamba(cfg, p, ids, routes, tap=None):
    """tap as mamba_family's, for the Mamba layers."""
    D, H, Hkv, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    hd = D // H
    sizes = {"E": cfg["mamba_expand"] * D, "N": cfg["mamba_d_state"], "R": cfg["mamba_dt_rank"], "eps": eps}
    h = p["model.embed_tokens.weight"][ids]
    hidden = []
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        x = rms_norm(h, p[b + "input_layernorm.weight"], eps)
        if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]:
            q, k, v = (linear(x, p, b + f"self_attn.{n}_proj") for n in "qkv")
            h = h + linear(attention(heads(q, H, hd), heads(k, Hkv, hd), heads(v, Hkv, hd), hd ** -0.5), p,
                           b + "self_attn.o_proj")
        else:
            h = h + mamba_mixer(x, p, b + "mamba.", sizes, jamba=True,
                                tap=(lambda i=i, **a: tap(i, **a)) if tap else None)
        x = rms_norm(h, p[b + "pre_ff_layernorm.weight"], eps)
        f = b + "feed_forward."
        if i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]:
            m = sparse_moe(x, p, f, "router.weight", ("gate_proj", "up_proj", "down_proj"), cfg["num_experts_per_tok"],
                           False, routes)
        else:
            m = linear(silu(linear(x, p, f + "gate_proj")) * linear(x, p, f + "up_proj"), p, f + "down_proj")
        h = h + m
        hidden.append(h)
    h = rms_norm(h, p["model.final_layernorm.weight"], eps)
    return h @ p["lm_head.weight"].T, hidden


# ---- checkpoints -------------------------------------------------------------------------------

def attention_params(p, b, D, H, Hkv, hd, qkv_bias=False, qk_norm=False):
    for n, rows in (("q", H * hd), ("k", Hkv * hd), ("v", Hkv * hd)):
        p.w(b + f"self_attn.{n}_proj.weight", rows, D)
        if qkv_bias:
            p.bias(b + f"self_attn.{n}_proj.bias", rows)
    p.w(b + "self_attn.o_proj.weight", D, H * hd)
    if qk_norm:
        p.gain(b + "self_attn.q_norm.weight", hd)
        p.gain(b + "self_attn.k_norm.weight", hd)


def experts_params(p, prefix, E, F, D, names, router="gate.weight"):
    p.w(prefix + router, E, D, std=0.6)
    for e in range(E):
        g, u, d = names
        p.w(f"{prefix}experts.{e}.{g}.weight", F, D)
        p.w(f"{prefix}experts.{e}.{u}.weight", F, D)
        p.w(f"{prefix}experts.{e}.{d}.weight", D, F)


def dense_params(p, prefix, F, D):
    p.w(prefix + "gate_proj.weight", F, D)
    p.w(prefix + "up_proj.weight", F, D)
    p.w(prefix + "down_proj.weight", D, F)


def mamba_params(p, m, D, E, N, R, K, jamba=False):
    p.w(m + "in_proj.weight", 2 * E, D)
    p.w(m + "conv1d.weight", E, 1, K, std=0.4)
    p.bias(m + "conv1d.bias", E)
    p.w(m + "x_proj.weight", R + 2 * N, E)
    p.w(m + "dt_proj.weight", E, R, std=0.5)
    # Time steps around softplus(-1.5) ≈ 0.2, A_log = log(1..N) as the S4D-real initialisation plus noise.
    p[m + "dt_proj.bias"] = (-1.5 + 0.5 * p.rng.standard_normal(E)).astype(np.float32)
    p[m + "A_log"] = (np.log(np.tile(np.arange(1, N + 1, dtype=np.float64), (E, 1))) +
                      0.1 * p.rng.standard_normal((E, N))).astype(np.float32)
    p[m + "D"] = (1.0 + 0.2 * p.rng.standard_normal(E)).astype(np.float32)
    p.w(m + "out_proj.weight", D, E)
    if jamba:
        p.gain(m + "dt_layernorm.weight", R)
        p.gain(m + "b_layernorm.weight", N)
        p.gain(m + "c_layernorm.weight", N)


def mamba2_params(p, m, D, E, N, H, G, K):
    conv = E + 2 * G * N
    p.w(m + "in_proj.weight", E + conv + H, D)
    p.w(m + "conv1d.weight", conv, 1, K, std=0.4)
    p.bias(m + "conv1d.bias", conv)
    p[m + "dt_bias"] = (-1.0 + 0.5 * p.rng.standard_normal(H)).astype(np.float32)
    p[m + "A_log"] = (np.log(np.arange(1, H + 1, dtype=np.float64)) + 0.1 * p.rng.standard_normal(H)).astype(np.float32)
    p[m + "D"] = (1.0 + 0.2 * p.rng.standard_normal(H)).astype(np.float32)
    p.gain(m + "norm.weight", E)
    p.w(m + "out_proj.weight", D, E)


def families():
    out = {}
    V = 80

    cfg = common("MixtralForCausalLM", "mixtral", attention_dropout=0.0, bos_token_id=1, eos_token_id=2, head_dim=None,
                 hidden_act="silu", hidden_size=16, initializer_range=0.02, intermediate_size=24,
                 max_position_embeddings=64, num_attention_heads=4, num_experts_per_tok=2, num_hidden_layers=2,
                 num_key_value_heads=2, num_local_experts=4, output_router_logits=False, rms_norm_eps=1e-5,
                 rope_theta=1000000.0, router_aux_loss_coef=0.02, router_jitter_noise=0.0, sliding_window=None,
                 tie_word_embeddings=False, use_cache=True, vocab_size=V)
    p = Params(11)
    D = 16
    p.w("model.embed_tokens.weight", V, D, std=1.0)
    for i in range(2):
        b = f"model.layers.{i}."
        p.gain(b + "input_layernorm.weight", D)
        attention_params(p, b, D, 4, 2, 4)
        p.gain(b + "post_attention_layernorm.weight", D)
        experts_params(p, b + "block_sparse_moe.", 4, 24, D, ("w1", "w3", "w2"))
    p.gain("model.norm.weight", D)
    p.w("lm_head.weight", V, D)
    out["tiny-mixtral-hf"] = (cfg, p, lambda ids, r, cfg=cfg, p=p: moe_decoder(cfg, p, ids, "mixtral", r))

    cfg = common("Qwen2MoeForCausalLM", "qwen2_moe", attention_dropout=0.0, bos_token_id=1, decoder_sparse_step=1,
                 eos_token_id=2, hidden_act="silu", hidden_size=16, initializer_range=0.02, intermediate_size=24,
                 max_position_embeddings=64, max_window_layers=3, mlp_only_layers=[1], moe_intermediate_size=12,
                 norm_topk_prob=False, num_attention_heads=4, num_experts=4, num_experts_per_tok=2,
                 num_hidden_layers=3, num_key_value_heads=2, output_router_logits=False, rms_norm_eps=1e-6,
                 rope_scaling=None, rope_theta=10000.0, router_aux_loss_coef=0.001, shared_expert_intermediate_size=20,
                 sliding_window=None, tie_word_embeddings=False, use_cache=True, use_sliding_window=False, vocab_size=V)
    p = Params(12)
    p.w("model.embed_tokens.weight", V, D, std=1.0)
    for i in range(3):
        b = f"model.layers.{i}."
        p.gain(b + "input_layernorm.weight", D)
        attention_params(p, b, D, 4, 2, 4, qkv_bias=True)
        p.gain(b + "post_attention_layernorm.weight", D)
        if is_qwen_moe_layer(cfg, i):
            experts_params(p, b + "mlp.", 4, 12, D, ("gate_proj", "up_proj", "down_proj"))
            dense_params(p, b + "mlp.shared_expert.", 20, D)
            p.w(b + "mlp.shared_expert_gate.weight", 1, D)
        else:
            dense_params(p, b + "mlp.", 24, D)
    p.gain("model.norm.weight", D)
    p.w("lm_head.weight", V, D)
    out["tiny-qwen2-moe-hf"] = (cfg, p, lambda ids, r, cfg=cfg, p=p: moe_decoder(cfg, p, ids, "qwen2_moe", r))

    cfg = common("Qwen3MoeForCausalLM", "qwen3_moe", attention_bias=False, attention_dropout=0.0, bos_token_id=1,
                 decoder_sparse_step=2, eos_token_id=2, head_dim=8, hidden_act="silu", hidden_size=16,
                 initializer_range=0.02, intermediate_size=24, max_position_embeddings=64, max_window_layers=2,
                 mlp_only_layers=[], moe_intermediate_size=12, norm_topk_prob=True, num_attention_heads=4,
                 num_experts=6, num_experts_per_tok=3, num_hidden_layers=2, num_key_value_heads=2,
                 output_router_logits=False, rms_norm_eps=1e-6, rope_scaling=None, rope_theta=1000000.0,
                 router_aux_loss_coef=0.001, sliding_window=None, tie_word_embeddings=False, use_cache=True,
                 use_sliding_window=False, vocab_size=V)
    p = Params(13)
    p.w("model.embed_tokens.weight", V, D, std=1.0)
    for i in range(2):
        b = f"model.layers.{i}."
        p.gain(b + "input_layernorm.weight", D)
        attention_params(p, b, D, 4, 2, 8, qk_norm=True)
        p.gain(b + "post_attention_layernorm.weight", D)
        if is_qwen_moe_layer(cfg, i):
            experts_params(p, b + "mlp.", 6, 12, D, ("gate_proj", "up_proj", "down_proj"))
        else:
            dense_params(p, b + "mlp.", 24, D)
    p.gain("model.norm.weight", D)
    p.w("lm_head.weight", V, D)
    out["tiny-qwen3-moe-hf"] = (cfg, p, lambda ids, r, cfg=cfg, p=p: moe_decoder(cfg, p, ids, "qwen3_moe", r))

    cfg = common("MambaForCausalLM", "mamba", bos_token_id=0, conv_kernel=4, eos_token_id=0, expand=2,
                 hidden_act="silu", hidden_size=16, initializer_range=0.1, intermediate_size=32,
                 layer_norm_epsilon=1e-5, num_hidden_layers=2, pad_token_id=0, rescale_prenorm_residual=False,
                 residual_in_fp32=True, state_size=8, time_step_floor=1e-4, time_step_init_scheme="random",
                 time_step_max=0.1, time_step_min=0.001, time_step_rank="auto", time_step_scale=1.0,
                 use_bias=False, use_cache=True, use_conv_bias=True, vocab_size=V)
    p = Params(14)
    p.w("backbone.embeddings.weight", V, D, std=1.0)
    for i in range(2):
        b = f"backbone.layers.{i}."
        p.gain(b + "norm.weight", D)
        mamba_params(p, b + "mixer.", D, 32, 8, 1, 4)
    p.gain("backbone.norm_f.weight", D)
    out["tiny-mamba-hf"] = (cfg, p, lambda ids, r, cfg=cfg, p=p: mamba_family(cfg, p, ids, "mamba"))

    cfg = common("Mamba2ForCausalLM", "mamba2", bos_token_id=0, chunk_size=5, conv_kernel=4, eos_token_id=0,
                 expand=2, head_dim=8, hidden_act="silu", hidden_size=16, initializer_range=0.1,
                 layer_norm_epsilon=1e-5, n_groups=2, norm_before_gate=False, num_heads=4, num_hidden_layers=2,
                 pad_token_id=0, rescale_prenorm_residual=False, residual_in_fp32=True, rms_norm=True, state_size=8,
                 tie_word_embeddings=False, time_step_floor=1e-4, time_step_max=0.1, time_step_min=0.001,
                 time_step_rank=1, use_bias=False, use_cache=True, use_conv_bias=True, vocab_size=V)
    p = Params(15)
    p.w("backbone.embeddings.weight", V, D, std=1.0)
    for i in range(2):
        b = f"backbone.layers.{i}."
        p.gain(b + "norm.weight", D)
        mamba2_params(p, b + "mixer.", D, 32, 8, 4, 2, 4)
    p.gain("backbone.norm_f.weight", D)
    p.w("lm_head.weight", V, D)
    out["tiny-mamba2-hf"] = (cfg, p, lambda ids, r, cfg=cfg, p=p: mamba_family(cfg, p, ids, "mamba2"))

    cfg = common("JambaForCausalLM", "jamba", attention_dropout=0.0, attn_layer_offset=1, attn_layer_period=2,
                 bos_token_id=1, eos_token_id=2, expert_layer_offset=0, expert_layer_period=3, hidden_act="silu",
                 hidden_size=16, initializer_range=0.02, intermediate_size=24, mamba_conv_bias=True, mamba_d_conv=4,
                 mamba_d_state=8, mamba_dt_rank=4, mamba_expand=2, mamba_proj_bias=False, max_position_embeddings=64,
                 num_attention_heads=4, num_experts=4, num_experts_per_tok=2, num_hidden_layers=4,
                 num_key_value_heads=2, num_logits_to_keep=1, output_router_logits=False, pad_token_id=0,
                 rms_norm_eps=1e-6, router_aux_loss_coef=0.001, sliding_window=None, tie_word_embeddings=False,
                 use_cache=True, use_mamba_kernels=False, vocab_size=V)
    p = Params(16)
    p.w("model.embed_tokens.weight", V, D, std=1.0)
    for i in range(4):
        b = f"model.layers.{i}."
        p.gain(b + "input_layernorm.weight", D)
        if i % 2 == 1:
            attention_params(p, b, D, 4, 2, 4)
        else:
            mamba_params(p, b + "mamba.", D, 32, 8, 4, 4, jamba=True)
        p.gain(b + "pre_ff_layernorm.weight", D)
        if i % 3 == 0:
            experts_params(p, b + "feed_forward.", 4, 24, D, ("gate_proj", "up_proj", "down_proj"), router="router.weight")
        else:
            dense_params(p, b + "feed_forward.", 24, D)
    p.gain("model.final_layernorm.weight", D)
    p.w("lm_head.weight", V, D)
    out["tiny-jamba-hf"] = (cfg, p, lambda ids, r, cfg=cfg, p=p: jamba(cfg, p, ids, r))
    return out


def main(root):
    for name, (cfg, p, forward) in families().items():
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        save_file({k: v for k, v in sorted(p.items())}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        ids = np.random.default_rng(200 + len(name)).integers(0, cfg["vocab_size"], size=(B, L)).astype(np.int64)
        saved = dict(p)
        p.update({k: v.astype(np.float64) for k, v in p.items()})
        routes = {}
        try:
            logits, hidden = forward(ids, routes)
        finally:
            p.update(saved)
        ref = {"input_ids": ids, "logits": logits.astype(np.float32), "hidden": np.stack(hidden, 1).astype(np.float32)}
        note = ""
        if routes.get("choices"):
            ref["routing"] = np.stack(routes["choices"], 1).astype(np.int64)
            note = f", smallest router margin {routes['margin']:.2e}"
        save_file(ref, os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
        print(f"{name}: logits max |{np.abs(logits).max():.3f}|, hidden max |{max(np.abs(h).max() for h in hidden):.3f}|"
              f"{note}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/model/fixtures")
