#!/usr/bin/python3
"""Writes a quantised "artifact" of a Llama-shaped folder that bench/make_llama_checkpoint.py made,
in the layout a library writes (issue 78 item 5: an 8B-shaped artifact beside its parent), for
the memory and speed runs of bench/quantized_artifact_speed.sh. Nothing here is a trained model
and nothing it writes is committed.

  bench/make_quantized_artifact.py --parent ~/.cache/qeval/bench/llama-3-8b-sparse --method gptq --out DIR
  bench/make_quantized_artifact.py --parent ... --method fp8-block --out DIR

Methods (every linear of the blocks; the embedding, the norms and the head are copied from the
parent as they are, F16):
  gptq       AutoGPTQ's layout, checkpoint_format gptq (v1), 4 bits, group 128, symmetric, no
             desc_act: qweight int32 [K/8, N], qzeros int32 [K/128, N/8], scales F16 [K/128, N],
             g_idx int32 [K] (k / 128)
  fp8-block  the fine-grained FP8 layout (quant_method fp8, weight_block_size [128, 128],
             activation_scheme dynamic): weight F8_E4M3 [N, K], weight_scale_inv F32
             [ceil(N/128), ceil(K/128)]

By default the codes and scales are holes (zeros that take no disk or memory until read): the
blocks dequantise to zeros, the parent's sparse blocks are zeros too, so both compute the same
function, and the run times reading, decoding and computing at the 8B shape. --random writes
random codes (seeded) and small positive scales instead, at disk speed.
"""
import argparse
import json
import os
import struct

import numpy as np

DTYPE_BYTES = {"F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "BF16": 2}


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def parent_tensors(parent):
    """name -> (file, dtype, shape, absolute offset, bytes), over the parent's shards."""
    files = sorted(f for f in os.listdir(parent) if f.endswith(".safetensors"))
    out = {}
    for file in files:
        header, base = read_header(os.path.join(parent, file))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            begin, end = t["data_offsets"]
            out[name] = (file, t["dtype"], t["shape"], base + begin, end - begin)
    return out


def quantised_fields(method, n, k):
    """The stored tensors of one [n, k] linear: (field, dtype, shape)."""
    if method == "gptq":
        g = (k + 127) // 128
        return [("qweight", "I32", [k // 8, n]), ("qzeros", "I32", [g, n // 8]), ("scales", "F16", [g, n]),
                ("g_idx", "I32", [k])]
    return [("weight", "F8_E4M3", [n, k]), ("weight_scale_inv", "F32", [(n + 127) // 128, (k + 127) // 128])]


def field_bytes(method, field, dtype, shape, rng, random):
    count = int(np.prod(shape))
    if field == "g_idx":
        return (np.arange(shape[0], dtype=np.int32) // 128).tobytes()
    if not random:
        return None  # a hole
    if dtype == "F16":
        return (rng.random(count, dtype=np.float32) * 0.01 + 0.001).astype(np.float16).tobytes()
    if dtype == "F32":
        return (rng.random(count, dtype=np.float32) * 0.01 + 0.001).tobytes()
    if dtype == "F8_E4M3":
        b = rng.integers(0, 256, count, dtype=np.uint8)
        return np.where((b & 0x7F) == 0x7F, b - 1, b).astype(np.uint8).tobytes()  # no NaN codes
    return rng.integers(-(2**31), 2**31 - 1, count, dtype=np.int64).astype(np.int32).tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parent", required=True)
    ap.add_argument("--method", choices=["gptq", "fp8-block"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--random", action="store_true", help="random codes and scales instead of holes")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    src = parent_tensors(a.parent)
    rng = np.random.default_rng(a.seed)
    entries = []  # (name, dtype, shape, source or None, field info)
    for name, (file, dtype, shape, offset, nbytes) in src.items():
        is_linear = ".layers." in name and name.endswith("_proj.weight")
        if not is_linear:
            entries.append((name, dtype, shape, (file, offset, nbytes), None))
            continue
        module = name[: -len(".weight")]
        n, k = shape
        for field, fdtype, fshape in quantised_fields(a.method, n, k):
            entries.append((f"{module}.{field}", fdtype, fshape, None, field))
    header, offset = {}, 0
    for name, dtype, shape, _, _ in entries:
        nbytes = int(np.prod(shape)) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, dtype, shape, source, field in entries:
            nbytes = int(np.prod(shape)) * DTYPE_BYTES[dtype]
            if source is not None:
                file, at, size = source
                with open(os.path.join(a.parent, file), "rb") as g:
                    g.seek(at)
                    for done in range(0, size, 1 << 26):
                        f.write(g.read(min(1 << 26, size - done)))
                continue
            data = field_bytes(a.method, field, dtype, shape, rng, a.random)
            if data is None:
                f.seek(nbytes, os.SEEK_CUR)
            else:
                f.write(data)
        f.truncate(f.tell())
    os.replace(path + ".tmp", path)
    with open(os.path.join(a.parent, "config.json")) as g:
        config = json.load(g)
    if a.method == "gptq":
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                                         "sym": True, "checkpoint_format": "gptq"}
    else:
        config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                         "weight_block_size": [128, 128]}
    with open(os.path.join(a.out, "config.json"), "w") as g:
        json.dump(config, g, indent=2)
    print(f"{a.out}: {a.method} of {a.parent}{' (random codes)' if a.random else ' (codes as holes)'}")


if __name__ == "__main__":
    main()
