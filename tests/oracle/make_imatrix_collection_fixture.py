#!/usr/bin/env python3
"""Makes tests/eval/fixtures/imatrix_tiny_llama*: a tiny F32 Llama GGUF, a short text, and what
llama-imatrix (llama.cpp 0c1e57098, the copy llama-cpp-python 0.3.36 vendors) collects from them,
for tests/eval/ggml_imatrix_collection_test.cpp (qeval imatrix against llama-imatrix, no llama.cpp
needed in CI).

  python3 tests/oracle/make_imatrix_collection_fixture.py STORIES_F32_GGUF TEXT LLAMA_IMATRIX LLAMA_QUANTIZE [OUT_DIR]

  STORIES_F32_GGUF  data/models/stories260K/stories260K-tok512-f32.gguf (its tokenizer is reused)
  TEXT              data/text/tinystories/validation-head.txt (its first 1,600 characters are kept)
  LLAMA_IMATRIX     the llama-imatrix binary (LLAMA_QUANTIZE: llama-quantize), built from vendor/llama.cpp:
                      cmake -B /tmp/llama-build -S <vendor/llama.cpp> -DGGML_NATIVE=OFF -DGGML_AVX512=ON \
                        -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF \
                        -DCMAKE_BUILD_TYPE=Release
                      cmake --build /tmp/llama-build --target llama-imatrix llama-quantize -j2

Writes OUT_DIR (default tests/eval/fixtures):
  imatrix_tiny_llama.gguf          Llama, d_model 32, ffn 96, 2 layers, 4 heads sharing 2 kv heads,
                                   tied embedding, the stories tokenizer (512 tokens, BOS added),
                                   weights drawn from numpy seed 77, F32 (~110 KB)
  imatrix_tiny_llama.txt           the text
  imatrix_tiny_llama.imatrix.gguf  llama-imatrix -m imatrix_tiny_llama.gguf -f imatrix_tiny_llama.txt
                                   -c 32 -b 32 --no-ppl -t 2 -ctk f32 -ctv f32 -fa off
                                   -o imatrix_tiny_llama.imatrix.gguf
                                   (run in OUT_DIR, so the dataset is named by the file name). The
                                   float32 KV cache and no flash attention keep llama.cpp's attention
                                   in float32 like qeval's: with its defaults (F16 cache, flash
                                   attention's F16 query) the sums after the first attention differ
                                   by up to 4e-4 relative, not by float32 rounding
  imatrix_tiny_llama.<q4_k_m|iq4_nl>.imatrix-llamacpp.gguf
                                   llama-quantize --imatrix imatrix_tiny_llama.imatrix.gguf
                                   imatrix_tiny_llama.gguf OUT <Q4_K_M|IQ4_NL> 2: what qeval's
                                   gguf-q4_k_m / gguf-iq4_nl with that --imatrix must hold
Needs numpy and gguf (llama.cpp's Python package).
"""
import os
import subprocess
import sys

import gguf
import numpy as np

D, F, L, H, HKV = 32, 96, 2, 4, 2
N_CTX = 32


def write_model(src, path):
    reader = gguf.GGUFReader(src)

    def field(name):
        return reader.fields[name].contents()

    V = len(field("tokenizer.ggml.tokens"))
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("imatrix-tiny")
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
    rng = np.random.default_rng(77)
    tensors = {}

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    tensors["token_embd.weight"] = mat(V, D, 1.0)
    tensors["output_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    hd = D // H
    for i in range(L):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
        tensors[p + "attn_q.weight"] = mat(H * hd, D, D ** -0.5)
        tensors[p + "attn_k.weight"] = mat(HKV * hd, D, D ** -0.5)
        tensors[p + "attn_v.weight"] = mat(HKV * hd, D, D ** -0.5)
        tensors[p + "attn_output.weight"] = mat(D, H * hd, D ** -0.5)
        tensors[p + "ffn_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
        tensors[p + "ffn_gate.weight"] = mat(F, D, D ** -0.5)
        tensors[p + "ffn_up.weight"] = mat(F, D, D ** -0.5)
        tensors[p + "ffn_down.weight"] = mat(D, F, F ** -0.5)
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def main():
    src, text_path, llama_imatrix, llama_quantize = sys.argv[1:5]
    out = sys.argv[5] if len(sys.argv) > 5 else os.path.join(os.path.dirname(__file__), "..", "eval", "fixtures")
    model = os.path.join(out, "imatrix_tiny_llama.gguf")
    tensors = write_model(src, model)
    text = open(text_path, encoding="utf-8").read()[:1600]
    with open(os.path.join(out, "imatrix_tiny_llama.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    subprocess.run([os.path.abspath(llama_imatrix), "-m", "imatrix_tiny_llama.gguf", "-f", "imatrix_tiny_llama.txt",
                    "-c", str(N_CTX), "-b", str(N_CTX), "--no-ppl", "-t", "2", "-ctk", "f32", "-ctv", "f32", "-fa", "off",
                    "-o", "imatrix_tiny_llama.imatrix.gguf"],
                   cwd=out, check=True)
    for t in ("Q4_K_M", "IQ4_NL"):
        subprocess.run([os.path.abspath(llama_quantize), "--imatrix", "imatrix_tiny_llama.imatrix.gguf",
                        "imatrix_tiny_llama.gguf", f"imatrix_tiny_llama.{t.lower()}.imatrix-llamacpp.gguf", t, "2"],
                       cwd=out, check=True)
    r = gguf.GGUFReader(os.path.join(out, "imatrix_tiny_llama.imatrix.gguf"))
    counts = {float(np.array(t.data).reshape(-1)[0]) for t in r.tensors if t.name.endswith(".counts")}
    print(f"{len(r.tensors) // 2} entries, counts {sorted(counts)}")

if __name__ == "__main__":
    main()
