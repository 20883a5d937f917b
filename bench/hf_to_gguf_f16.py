#!/usr/bin/env python3
"""An F16 GGUF (llama architecture) of the first LAYERS blocks of a Llama-shaped Hugging Face folder
of F16 safetensors (bench/make_llama_checkpoint.py), for timing llama.cpp's quantiser against
qeval's on the same tensors (bench/gguf_quantize_speed.sh).

  python3 bench/hf_to_gguf_f16.py HF_DIR OUT.gguf [LAYERS]

Every tensor keeps its shape; the embedding, the output head and the norms are written whole.
Q and K rows are written as the folder stores them, without convert_hf_to_gguf.py's rotary
permutation: the values are random, and the timing does not depend on their order. The vocabulary
is placeholder tokens ("t0", "t1", ...), enough for llama.cpp to load the file's metadata.
Needs the Python packages gguf and numpy; the safetensors are read through a memory map.
"""
import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np

HF_TO_GGUF = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def safetensors_arrays(folder):
    """Every tensor of the folder's .safetensors files as a read-only memory-mapped array."""
    arrays = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with open(path, "rb") as f:
            header_len = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(header_len))
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
        for name, t in header.items():
            if name == "__metadata__":
                continue
            if t["dtype"] != "F16":
                sys.exit(f"{path}: tensor {name} is {t['dtype']}; this script writes F16 from F16 safetensors only")
            begin, end = t["data_offsets"]
            arrays[name] = data[begin:end].view(np.float16).reshape(t["shape"])
    return arrays


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module...>.weight
    return f"blk.{parts[2]}.{HF_TO_GGUF['.'.join(parts[3:-1])]}.weight"


def main():
    folder, out = sys.argv[1], sys.argv[2]
    config = json.loads((Path(folder) / "config.json").read_text())
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else config["num_hidden_layers"]
    if not 0 < layers <= config["num_hidden_layers"]:
        sys.exit(f"LAYERS must be 1..{config['num_hidden_layers']} (the folder's num_hidden_layers), found {layers}")
    arrays = safetensors_arrays(folder)
    D, H, V = config["hidden_size"], config["num_attention_heads"], config["vocab_size"]
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"{Path(folder).name}-{layers}-layers")
    w.add_context_length(config.get("max_position_embeddings", 4096))
    w.add_embedding_length(D)
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(layers)
    w.add_head_count(H)
    w.add_head_count_kv(config.get("num_key_value_heads", H))
    w.add_rope_dimension_count(D // H)
    w.add_rope_freq_base(config.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-5))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([1] * V)
    w.add_bos_token_id(config.get("bos_token_id", 1))
    w.add_eos_token_id(config.get("eos_token_id", 2))
    for name, a in arrays.items():
        if name.startswith("model.layers.") and int(name.split(".")[2]) >= layers:
            continue
        # Norm weights in F32, as convert_hf_to_gguf.py writes them (llama.cpp keeps 1-D tensors F32).
        w.add_tensor(gguf_name(name), np.asarray(a, dtype=np.float32) if a.ndim == 1 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
