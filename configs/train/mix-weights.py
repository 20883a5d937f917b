#!/usr/bin/env python3
"""Issue 18: how heavy-tailed the trained weights are, per linear kind, for runs of the study.

    configs/train/mix-weights.py [RUN_DIR ...]   (default: every results/train/mix/*/model.safetensors)

Per-channel int8 (int8-fine, int8-vectorwise) and per-channel 4-bit quantise each output row of a
weight with its own scale, so their weight error grows with the row's crest factor max|w| / rms(w);
per-tensor int8 (coarse, moderate) with the tensor's. Activation outliers cost nothing under
int8-fine (every input feature has its own scale), which leaves the weights to decide it. Prints,
per run and linear kind (q, k, v, o, up, down; mean over layers): the kurtosis of the weight
entries, the mean row crest factor and the tensor crest factor, as Markdown.
Only the standard library (the safetensors header is JSON; the weights are little-endian float32).
"""
import array
import json
import math
import struct
import sys
from pathlib import Path

KINDS = ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down"]


def read_safetensors(path: Path):
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"mix-weights: {path}: tensor {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        values = array.array("f")
        values.frombytes(blob[8 + n + begin : 8 + n + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (values, info["shape"])
    return tensors


def kurtosis(xs):
    mean = sum(xs) / len(xs)
    m2 = sum((x - mean) ** 2 for x in xs) / len(xs)
    m4 = sum((x - mean) ** 4 for x in xs) / len(xs)
    return m4 / (m2 * m2)


def crest(xs):
    return max(abs(x) for x in xs) / math.sqrt(sum(x * x for x in xs) / len(xs))


def stats(values, shape):
    rows, cols = shape
    row_crest = sum(crest(values[r * cols : (r + 1) * cols]) for r in range(rows)) / rows
    return kurtosis(values), row_crest, crest(values)


def main():
    dirs = [Path(a) for a in sys.argv[1:]] or sorted(p.parent for p in Path("results/train/mix").glob("*/model.safetensors"))
    print("| run | kind | weight kurtosis | row crest max/rms | tensor crest max/rms |")
    print("|---|---|---:|---:|---:|")
    for d in dirs:
        tensors = read_safetensors(d / "model.safetensors")
        for kind in KINDS:
            per_layer = [stats(*tensors[name]) for name in sorted(tensors) if name.endswith(f".{kind}.weight")]
            if not per_layer:
                continue
            k, rc, tc = (sum(s[i] for s in per_layer) / len(per_layer) for i in range(3))
            print(f"| {d.name} | {kind} | {k:.2f} | {rc:.2f} | {tc:.2f} |")


if __name__ == "__main__":
    main()
