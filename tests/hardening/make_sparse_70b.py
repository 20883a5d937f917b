#!/usr/bin/env python3
"""A Llama-2-70B-shaped checkpoint with real headers and no data, for timing `qeval inspect`.

Usage: tests/hardening/make_sparse_70b.py OUT_DIR [gguf]
Writes OUT_DIR/config.json + model.safetensors (BF16, 69 B parameters, 138 GB as a sparse file:
the header is real, the data area is a hole) or, with `gguf`, OUT_DIR/llama-70b.gguf (F16). Never
commit the result; it takes a few kilobytes of disk thanks to the hole.
"""
import json
import os
import struct
import sys
from pathlib import Path

out = Path(sys.argv[1])
gguf = len(sys.argv) > 2 and sys.argv[2] == "gguf"
out.mkdir(parents=True, exist_ok=True)
D, F, L, H, KV, V = 8192, 28672, 80, 64, 8, 32000
hd = D // H
tensors = [("model.embed_tokens.weight", [V, D])]
for i in range(L):
    p = f"model.layers.{i}."
    tensors += [(p + "input_layernorm.weight", [D]), (p + "self_attn.q_proj.weight", [H * hd, D]),
                (p + "self_attn.k_proj.weight", [KV * hd, D]), (p + "self_attn.v_proj.weight", [KV * hd, D]),
                (p + "self_attn.o_proj.weight", [D, H * hd]), (p + "post_attention_layernorm.weight", [D]),
                (p + "mlp.gate_proj.weight", [F, D]), (p + "mlp.up_proj.weight", [F, D]), (p + "mlp.down_proj.weight", [D, F])]
tensors += [("model.norm.weight", [D]), ("lm_head.weight", [V, D])]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


if not gguf:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + offset)  # the data area is a hole
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D, "intermediate_size": F,
        "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": V,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}, indent=2))
    print(f"{out}: {8 + len(h) + offset} bytes (sparse), {sum(numel(s) for _, s in tensors)} parameters")
else:
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    kv = [s("general.architecture") + struct.pack("<I", 8) + s("llama")]
    for k, v in {"llama.embedding_length": D, "llama.feed_forward_length": F, "llama.block_count": L,
                 "llama.attention.head_count": H, "llama.attention.head_count_kv": KV, "llama.context_length": 4096,
                 "llama.rope.dimension_count": hd}.items():
        kv.append(s(k) + struct.pack("<II", 4, v))
    kv.append(s("llama.attention.layer_norm_rms_epsilon") + struct.pack("<If", 6, 1e-5))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    infos, offset = b"", 0
    for name, shape in tensors:
        g = names.get(name)
        if g is None:
            i = name.split(".")[2]
            g = "blk." + i + "." + {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                                    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                                    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
                                    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}[".".join(name.split(".")[3:-1])] + ".weight"
        ne = list(reversed(shape))
        infos += s(g) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", 1, offset)
        n = 2 * numel(shape)
        offset += n + (-n) % 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv) + infos
    head += bytes((-len(head)) % 32)
    with open(out / "llama-70b.gguf", "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    print(f"{out / 'llama-70b.gguf'}: {len(head) + offset} bytes (sparse)")
