#!/usr/bin/env python3
"""Random Mixtral-shaped and Mamba-2-shaped checkpoints at a realistic width (issue 45), and Hugging Face eager's
forward speed on them, for bench/moe_ssm_bench.sh to compare with `qeval eval` in the same run.

    python bench/moe_ssm_hf_eager.py make OUT_DIR          # OUT_DIR/{mixtral,mamba2}-random-hf + tokens.bin
    python bench/moe_ssm_hf_eager.py time MODEL_DIR SEQ_LEN WINDOWS   # prints one JSON line: tokens/s of HF eager

Needs transformers (4.46.3 is the newest that runs on Debian's torch 1.13) and numpy; the checkpoints are made with
transformers' own classes and save_pretrained (float32 safetensors), so qeval reads exactly what HF writes. Not
committed: a 2-layer Mixtral-shaped model at width 1024 is ~250 MB.
Shapes (2 layers each, vocabulary 512 so that the LM head does not dominate):
  Mixtral-shaped: hidden 1024, 8 experts of 3584, top-2, 16 heads / 4 KV heads (Mixtral-8x7B divided by 4 in width)
  Mamba-2-shaped: hidden 1024, expand 2, 32 heads of 64, state 128, 1 group, conv 4, chunk 256 (mamba2-370m's layer)
HF eager: the model in float32 on the CPU, torch.no_grad, attn_implementation="eager"; Mamba-2 runs its torch path
(no mamba_ssm kernels here), Mixtral its loop over experts.
"""
import json
import os
import sys
import time

import numpy as np
import torch
import transformers


def make(out):
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    mixtral = transformers.MixtralConfig(vocab_size=512, hidden_size=1024, intermediate_size=3584, num_hidden_layers=2,
                                         num_attention_heads=16, num_key_value_heads=4, num_local_experts=8,
                                         num_experts_per_tok=2, max_position_embeddings=4096, rope_theta=1e6,
                                         tie_word_embeddings=False)
    model = transformers.MixtralForCausalLM(mixtral)
    # Router weights wider than the init's 0.02 so that tokens spread over the experts as in a trained model.
    for layer in model.model.layers:
        layer.block_sparse_moe.gate.weight.data.normal_(0, 0.1)
    model.save_pretrained(os.path.join(out, "mixtral-random-hf"), safe_serialization=True)
    mamba2 = transformers.Mamba2Config(vocab_size=512, hidden_size=1024, expand=2, num_heads=32, head_dim=64,
                                       state_size=128, n_groups=1, conv_kernel=4, chunk_size=256, num_hidden_layers=2,
                                       tie_word_embeddings=False)
    # config.json as HF writes it: time_step_limit (0, inf) as [0.0, Infinity] (qeval reads Python's literals).
    transformers.Mamba2ForCausalLM(mamba2).save_pretrained(os.path.join(out, "mamba2-random-hf"), safe_serialization=True)
    np.random.default_rng(0).integers(0, 512, size=1 << 16).astype(np.uint16).tofile(os.path.join(out, "tokens.bin"))


def time_forward(model_dir, seq_len, windows):
    torch.set_num_threads(os.cpu_count())
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    tokens = np.fromfile(os.path.join(os.path.dirname(model_dir), "tokens.bin"), dtype=np.uint16).astype(np.int64)
    with torch.no_grad():
        model(torch.from_numpy(tokens[:seq_len][None]), use_cache=False)  # warm-up
        start = time.perf_counter()
        for w in range(windows):
            ids = torch.from_numpy(tokens[w * seq_len:(w + 1) * seq_len][None])
            model(ids, use_cache=False)
        seconds = time.perf_counter() - start
    print(json.dumps({"model": model_dir, "seq_len": seq_len, "windows": windows, "seconds": seconds,
                      "tokens_per_s": seq_len * windows / seconds, "threads": torch.get_num_threads(),
                      "transformers": transformers.__version__, "torch": torch.__version__}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        time_forward(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
