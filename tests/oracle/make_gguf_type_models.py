#!/usr/bin/env python3
"""F32 GGUFs for the llama.cpp file-type check (tests/quant/gguf_types_llamacpp_test.cpp, issue 64).

  python3 tests/oracle/make_gguf_type_models.py STORIES_F32_GGUF OUT_DIR

Writes OUT_DIR/stories260K-f32.gguf (a copy: 64-wide rows, 172-wide ffn_down, separate output
tensor) and OUT_DIR/tiny256-f32.gguf: a Llama with every row length a multiple of 256 (d_model
256, ffn 256, 8 layers, 8 heads sharing 2 kv heads: GQA ratio 4), a tied embedding (no
output.weight) and the stories tokenizer, weights drawn from a fixed seed. Needs the Python
packages gguf and numpy.
"""
import shutil
import sys

import gguf
import numpy as np


def main():
    src, out = sys.argv[1], sys.argv[2]
    shutil.copyfile(src, f"{out}/stories260K-f32.gguf")
    reader = gguf.GGUFReader(src)

    def field(name):
        return reader.fields[name].contents()

    D, F, L, H, HKV, V = 256, 256, 8, 8, 2, len(field("tokenizer.ggml.tokens"))
    w = gguf.GGUFWriter(f"{out}/tiny256-f32.gguf", "llama")
    w.add_name("tiny256")
    w.add_context_length(128)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_rope_dimension_count(D // H)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_token_list(field("tokenizer.ggml.tokens"))
    w.add_token_scores(field("tokenizer.ggml.scores"))
    w.add_token_types(field("tokenizer.ggml.token_type"))
    w.add_bos_token_id(field("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(field("tokenizer.ggml.eos_token_id"))
    w.add_unk_token_id(field("tokenizer.ggml.unknown_token_id"))

    rng = np.random.default_rng(64)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(V, D, 0.05))
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
    hd = D // H
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
        w.add_tensor(p + "attn_q.weight", mat(H * hd, D, D ** -0.5))
        w.add_tensor(p + "attn_k.weight", mat(HKV * hd, D, D ** -0.5))
        w.add_tensor(p + "attn_v.weight", mat(HKV * hd, D, D ** -0.5))
        w.add_tensor(p + "attn_output.weight", mat(D, H * hd, 0.5 * D ** -0.5))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(F, D, D ** -0.5))
        w.add_tensor(p + "ffn_up.weight", mat(F, D, D ** -0.5))
        w.add_tensor(p + "ffn_down.weight", mat(D, F, 0.5 * F ** -0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
