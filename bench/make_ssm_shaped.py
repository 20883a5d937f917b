#!/usr/bin/env python3
"""Random Mamba-2-shaped and Mamba-shaped checkpoints in Hugging Face's layout, with numpy only.

    python3 bench/make_ssm_shaped.py OUT_DIR
        OUT_DIR/mamba2-shaped-hf   hidden 1024, expand 2, 32 heads of 64, state 128, 1 group, conv 4,
                                   chunk 256, 2 layers, vocabulary 512 (mamba2-370m's layer; the shapes of
                                   bench/moe_ssm_hf_eager.py's model, which needs transformers)
        OUT_DIR/mamba-shaped-hf    hidden 768, expand 2, state 16, time-step rank 48, conv 4, 2 layers,
                                   vocabulary 512 (mamba-130m's layer)
        OUT_DIR/tokens.bin         65,536 random uint16 token ids below 512 (seed 0)

The weights follow HF's initialisation in kind (normal 0.02 linears and embeddings, A = -[1..N] or
-U[1, 16], D = 1, dt bias the inverse softplus of a log-uniform time step in [0.001, 0.1]) so that
the time steps, decays and selection have realistic ranges; nothing here is trained. For timing the
statistics (bench/ssm_stats_bench.sh), not committed (~110 MB).
"""
import json
import os
import struct
import sys

import numpy as np


def save_safetensors(tensors, path):
    """The safetensors layout: 8-byte little-endian header length, JSON header, raw little-endian data."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def dt_bias(rng, n):
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.1), size=n)).clip(min=1e-4)
    return dt + np.log(-np.expm1(-dt))  # inverse softplus


def mamba2(rng, vocab=512, D=1024, expand=2, H=32, P=64, N=128, G=1, K=4, layers=2):
    E = expand * D
    assert H * P == E
    conv = E + 2 * G * N
    p = {"backbone.embeddings.weight": rng.normal(0, 0.02, (vocab, D)), "backbone.norm_f.weight": np.ones(D),
         "lm_head.weight": rng.normal(0, 0.02, (vocab, D))}
    for i in range(layers):
        m = f"backbone.layers.{i}."
        p[m + "norm.weight"] = np.ones(D)
        p[m + "mixer.in_proj.weight"] = rng.normal(0, 0.02, (E + conv + H, D))
        p[m + "mixer.conv1d.weight"] = rng.uniform(-0.5, 0.5, (conv, 1, K))
        p[m + "mixer.conv1d.bias"] = rng.uniform(-0.5, 0.5, conv)
        p[m + "mixer.dt_bias"] = dt_bias(rng, H)
        p[m + "mixer.A_log"] = np.log(rng.uniform(1, 16, H))
        p[m + "mixer.D"] = np.ones(H)
        p[m + "mixer.norm.weight"] = np.ones(E)
        p[m + "mixer.out_proj.weight"] = rng.normal(0, 0.02, (D, E))
    cfg = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "vocab_size": vocab, "hidden_size": D,
           "expand": expand, "num_heads": H, "head_dim": P, "state_size": N, "n_groups": G, "conv_kernel": K,
           "chunk_size": 256, "num_hidden_layers": layers, "hidden_act": "silu", "layer_norm_epsilon": 1e-5,
           "rms_norm": True, "norm_before_gate": False, "use_bias": False, "use_conv_bias": True,
           "tie_word_embeddings": False, "time_step_limit": [0.0, "Infinity"], "time_step_min": 0.001,
           "time_step_max": 0.1, "time_step_floor": 1e-4, "residual_in_fp32": True, "bos_token_id": 0,
           "eos_token_id": 0, "pad_token_id": 0, "torch_dtype": "float32"}
    return cfg, p


def mamba(rng, vocab=512, D=768, expand=2, N=16, K=4, layers=2):
    E, R = expand * D, -(-D // 16)
    p = {"backbone.embeddings.weight": rng.normal(0, 0.02, (vocab, D)), "backbone.norm_f.weight": np.ones(D)}
    for i in range(layers):
        m = f"backbone.layers.{i}."
        p[m + "norm.weight"] = np.ones(D)
        p[m + "mixer.in_proj.weight"] = rng.normal(0, 0.02, (2 * E, D))
        p[m + "mixer.conv1d.weight"] = rng.uniform(-0.5, 0.5, (E, 1, K))
        p[m + "mixer.conv1d.bias"] = rng.uniform(-0.5, 0.5, E)
        p[m + "mixer.x_proj.weight"] = rng.normal(0, 0.02, (R + 2 * N, E))
        p[m + "mixer.dt_proj.weight"] = rng.uniform(-R ** -0.5, R ** -0.5, (E, R))
        p[m + "mixer.dt_proj.bias"] = dt_bias(rng, E)
        p[m + "mixer.A_log"] = np.log(np.tile(np.arange(1, N + 1, dtype=np.float64), (E, 1)))
        p[m + "mixer.D"] = np.ones(E)
        p[m + "mixer.out_proj.weight"] = rng.normal(0, 0.02, (D, E))
    cfg = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "vocab_size": vocab, "hidden_size": D,
           "expand": expand, "intermediate_size": E, "state_size": N, "conv_kernel": K, "num_hidden_layers": layers,
           "hidden_act": "silu", "layer_norm_epsilon": 1e-5, "time_step_rank": "auto", "use_bias": False,
           "use_conv_bias": True, "tie_word_embeddings": True, "residual_in_fp32": True, "bos_token_id": 0,
           "eos_token_id": 0, "pad_token_id": 0, "torch_dtype": "float32"}
    return cfg, p


def main(out):
    for name, make, seed in (("mamba2-shaped-hf", mamba2, 1), ("mamba-shaped-hf", mamba, 2)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        cfg, p = make(np.random.default_rng(seed))
        save_safetensors(p, os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    np.random.default_rng(0).integers(0, 512, size=1 << 16).astype(np.uint16).tofile(os.path.join(out, "tokens.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
