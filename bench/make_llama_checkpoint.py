#!/usr/bin/python3
"""Writes a Llama-shaped Hugging Face folder (config.json + F16 safetensors, sharded like HF's
at 5 GB) with random weights, for the memory benchmark (bench/memory_bench.sh). Nothing here is
a trained model and nothing it writes is committed: it goes to a cache folder.

  bench/make_llama_checkpoint.py --shape llama-3.2-1b --out ~/.cache/qeval/bench/llama-3.2-1b
  bench/make_llama_checkpoint.py --shape llama-3-8b --out ~/.cache/qeval/bench/llama-3-8b

Weights are N(0, 0.02) (projections) and 1 (norm gains), drawn in float32 from a seeded numpy
generator and rounded to float16, written tensor by tensor (memory: one tensor at a time). Also
writes <out>.tokens.bin beside the folder: 16,384 (--tokens) random token ids (uint32 little-endian) for qeval's pre-tokenised
data path, so no tokenizer is needed.

--fast draws one pool of 64 Mi values and writes every matrix as windows of it at a per-tensor
offset (rows repeat with a period of the pool): the same distribution and shapes, written at disk
speed rather than at the generator's (a 13B shape in well under a minute on a GPU machine's disk),
for timing and memory runs where the values do not matter.

--sparse leaves the blocks' matrices as holes (zeros that take no memory or disk until read): a
70B shape in /dev/shm costs the embedding, the head and the norms, for runs that time reading,
copying and computing at a size no machine here holds twice. Its blocks compute zeros, so such a
model's numbers mean nothing; its times and memory do.
"""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {
    # hidden, layers, heads, kv heads, MLP, vocabulary, tied
    "llama-3.2-1b": (2048, 16, 32, 8, 8192, 128256, True),
    "llama-3-8b": (4096, 32, 32, 8, 14336, 128256, False),
    "llama-2-7b": (4096, 32, 32, 32, 11008, 32000, False),
    "llama-2-13b": (5120, 40, 40, 40, 13824, 32000, False),
    "llama-2-70b": (8192, 80, 64, 8, 28672, 32000, False),
}


def tensors(shape):
    d, layers, heads, kv, mlp, vocab, tied = shape
    hd = d // heads
    yield "model.embed_tokens.weight", (vocab, d)
    for i in range(layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        yield p + "self_attn.q_proj.weight", (heads * hd, d)
        yield p + "self_attn.k_proj.weight", (kv * hd, d)
        yield p + "self_attn.v_proj.weight", (kv * hd, d)
        yield p + "self_attn.o_proj.weight", (d, heads * hd)
        yield p + "post_attention_layernorm.weight", (d,)
        yield p + "mlp.gate_proj.weight", (mlp, d)
        yield p + "mlp.up_proj.weight", (mlp, d)
        yield p + "mlp.down_proj.weight", (d, mlp)
    yield "model.norm.weight", (d,)
    if not tied:
        yield "lm_head.weight", (vocab, d)


class Pool:
    """Windows of one random pool (--fast): matrix rows from a rotating offset."""

    def __init__(self, rng, size=1 << 26):
        self.values = (rng.standard_normal(size, dtype=np.float32) * 0.02).astype(np.float16)
        self.values = np.concatenate([self.values, self.values])  # any window of `size` is contiguous
        self.size, self.offset = size, 0

    def block(self, rows, cols):
        n = rows * cols
        if n > self.size:
            return np.concatenate([self.block(min(rows, self.size // cols), cols) for _ in range(0, rows, self.size // cols)])[:rows]
        out = self.values[self.offset:self.offset + n].reshape(rows, cols)
        self.offset = (self.offset + 7919 * cols + 1) % self.size
        return out


def write_shard(path, entries, rng, pool=None, sparse=False):
    header, offset = {}, 0
    for name, shape in entries:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in entries:
            if len(shape) == 1:
                f.write(np.ones(shape, dtype=np.float16).tobytes())
                continue
            if sparse and ".layers." in name:
                f.seek(int(np.prod(shape)) * 2, os.SEEK_CUR)  # a hole
                continue
            rows = max(1, (1 << 24) // shape[1])  # ~16 M values at a time
            for r in range(0, shape[0], rows):
                n_rows = min(rows, shape[0] - r)
                if pool is not None:
                    f.write(pool.block(n_rows, shape[1]).tobytes())
                    continue
                block = rng.standard_normal((n_rows, shape[1]), dtype=np.float32) * 0.02
                f.write(block.astype(np.float16).tobytes())
        f.truncate(f.tell())  # a trailing hole still counts in the file's size
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-bytes", type=int, default=5 * 10**9)
    ap.add_argument("--fast", action="store_true", help="windows of one random pool (see above)")
    ap.add_argument("--sparse", action="store_true", help="blocks' matrices as holes (see above)")
    ap.add_argument("--tokens", type=int, default=16384, help="random token ids written beside the folder")
    a = ap.parse_args()
    shape = SHAPES[a.shape]
    d, layers, heads, kv, mlp, vocab, tied = shape
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    pool = Pool(rng) if a.fast else None
    shards, current, size = [], [], 0
    for name, s in tensors(shape):
        n = int(np.prod(s)) * 2
        if current and size + n > a.shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append((name, s))
        size += n
    shards.append(current)
    weight_map = {}
    for k, entries in enumerate(shards):
        file = "model.safetensors" if len(shards) == 1 else f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        write_shard(os.path.join(a.out, file), entries, rng, pool, a.sparse)
        for name, _ in entries:
            weight_map[name] = file
    if len(shards) > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": mlp, "vocab_size": vocab,
        "tie_word_embeddings": tied, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "hidden_act": "silu", "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2,
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # Beside the folder, not in it: a .bin inside would be taken for a llama2.c tokenizer.
    np.random.default_rng(a.seed + 1).integers(3, vocab, size=a.tokens, dtype=np.uint32).tofile(a.out.rstrip("/") + ".tokens.bin")
    print(f"{a.out}: {a.shape}, {len(shards)} file(s){', sparse' if a.sparse else ''}")


if __name__ == "__main__":
    main()
