#!/usr/bin/env python3
"""Makes tests/eval/fixtures/gptq_stories260k_llmc.json: llm-compressor's own GPTQ codes for the
real model stories260K, layer by layer through its sequential pipeline, on fixed calibration
windows, so that tests/eval/gptq_end_to_end_test.cpp can run qeval's calibration pass on the same
token ids and compare every code.

What it does:
  1. reads stories260K.bin (llama2.c v0: 7 int32 header, then fp32 tensors; shared classifier) and
     writes it as a Hugging Face LlamaForCausalLM (config.json + model.safetensors) in a temporary
     folder. llama2.c rotates interleaved pairs (2i, 2i+1) of each head, HF rotates halves (i,
     i + hd/2); as transformers' convert_llama_weights_to_hf.py does, the rows of wq and wk are
     permuted within each head (row 2i -> i, 2i+1 -> i + hd/2), which makes the HF model compute the
     same function. The q/k codes are un-permuted back to llama2.c's row order before they are
     written (GPTQ solves every row on its own with the same H, so a row permutation permutes codes).
  2. tokenises tinystories/validation-head.txt with tok512.model (SentencePiece): each paragraph a
     document, BOS (1) before each, documents concatenated, cut into consecutive windows of L tokens.
     Windows 0..E-1 are held out for the NLL comparison, windows E..E+N-1 calibrate (qeval's rule:
     the calibration windows are the first N after the evaluated ones).
  3. runs llmcompressor.oneshot(model, dataset=the N windows as input_ids, one window a sample, no
     padding, no shuffling, no BOS added, no truncation; a hook on the embedding checks that) with
     GPTQModifier(config_groups: W4A16's weights, int4 symmetric, with strategy "channel"; targets
     Linear) and its defaults otherwise (actorder static, dampening_frac 0.01, block_size 128); the
     pipeline it infers is recorded (SequentialPipeline). Two cases:
       "g128"     ignore lm_head and every down_proj: qeval's gptq-w4-g128 without the down projections;
       "channel"  ignore lm_head: qeval's gptq-w4.
     W4A16's own group 128 cannot run on this model: llm-compressor 0.14 with compressed-tensors
     0.19 (the version it pins) refuses K = 172 (validate_group_size_divisibility: K % 128 != 0)
     and crashes on K = 64 (its weight observer unflattens the row into (-1, 128)). qeval takes
     G = ceil(K / 128) groups, the last shorter: at K = 64 that is one group of the row, exactly
     per channel, so case "g128" is llm-compressor's per channel on those linears; the down
     projections' ragged 128 + 44 have no llm-compressor counterpart and stay in full precision
     on both sides in that case.
  4. reads every quantised linear's codes (round(weight / weight_scale) + 8) and scales, checks that
     they reproduce llm-compressor's fake-quantised weight exactly, and records the calibration
     inputs it saw (a hook on the embedding) to prove they are the windows, unpadded, in order.
  5. evaluates the NLL (mean over the held-out windows' next-token predictions) of the converted
     full-precision model and of each llm-compressor model (fake-quantised, float32).

  /work/cache/oracle-venv/bin/pip install --target /tmp/sp sentencepiece   (tokenizer only)
  PYTHONPATH=/tmp/sp /work/cache/oracle-venv/bin/python tests/oracle/make_gptq_model_fixtures.py \\
      /work/shared/data tests/eval/fixtures/gptq_stories260k_llmc.json
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

CAL_WINDOWS, HELD_OUT, L = 16, 8, 128


def read_llama2c(path):
    with open(path, "rb") as f:
        dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("7i", f.read(28))
        data = np.frombuffer(f.read(), dtype=np.float32)
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // heads
    shapes = [("tok_emb", (vocab, dim)), ("rms_att", (layers, dim)), ("wq", (layers, dim, dim)),
              ("wk", (layers, kv_heads * hd, dim)), ("wv", (layers, kv_heads * hd, dim)),
              ("wo", (layers, dim, dim)), ("rms_ffn", (layers, dim)), ("w1", (layers, hidden, dim)),
              ("w2", (layers, dim, hidden)), ("w3", (layers, hidden, dim)), ("rms_final", (dim,))]
    t, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        t[name] = torch.tensor(data[off:off + n].reshape(shape).copy())
        off += n
    off += seq_len * hd // 2 * 2  # freq_cis_real, freq_cis_imag: unused (angles from theta 10000)
    if not shared:
        t["wcls"] = torch.tensor(data[off:off + vocab * dim].reshape(vocab, dim).copy())
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab,
               seq_len=seq_len, shared=shared)
    return cfg, t


def rotary_perm(n_heads, rows):
    """perm[j] = the llama2.c row that HF row j holds (transformers' permute for q and k)."""
    hd = rows // n_heads
    idx = torch.arange(rows).view(n_heads, hd // 2, 2).transpose(1, 2).reshape(rows)
    return idx


def write_hf(cfg, t, folder):
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    hd = cfg["dim"] // cfg["heads"]
    config = LlamaConfig(vocab_size=cfg["vocab"], hidden_size=cfg["dim"], intermediate_size=cfg["hidden"],
                         num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
                         num_key_value_heads=cfg["kv_heads"], head_dim=hd, max_position_embeddings=cfg["seq_len"],
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=cfg["shared"],
                         hidden_act="silu", bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    config.save_pretrained(folder)
    sd = {"model.embed_tokens.weight": t["tok_emb"], "model.norm.weight": t["rms_final"]}
    pq, pk = rotary_perm(cfg["heads"], cfg["dim"]), rotary_perm(cfg["kv_heads"], cfg["kv_heads"] * hd)
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = t["rms_att"][i]
        sd[p + "post_attention_layernorm.weight"] = t["rms_ffn"][i]
        sd[p + "self_attn.q_proj.weight"] = t["wq"][i][pq]
        sd[p + "self_attn.k_proj.weight"] = t["wk"][i][pk]
        sd[p + "self_attn.v_proj.weight"] = t["wv"][i]
        sd[p + "self_attn.o_proj.weight"] = t["wo"][i]
        sd[p + "mlp.gate_proj.weight"] = t["w1"][i]
        sd[p + "mlp.down_proj.weight"] = t["w2"][i]
        sd[p + "mlp.up_proj.weight"] = t["w3"][i]
    if not cfg["shared"]:
        sd["lm_head.weight"] = t["wcls"]
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(folder, "model.safetensors"))
    return pq, pk


def windows_from_text(data_dir):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(data_dir, "models/stories260K/tok512.model"))
    with open(os.path.join(data_dir, "text/tinystories/validation-head.txt"), encoding="utf-8") as f:
        paragraphs = [p.strip() for p in f.read().split("\n\n") if p.strip()]
    stream = []
    for p in paragraphs:
        stream.append(1)
        stream.extend(sp.encode(p))
        if len(stream) >= (CAL_WINDOWS + HELD_OUT) * L:
            break
    return [stream[i * L:(i + 1) * L] for i in range(CAL_WINDOWS + HELD_OUT)]


def placeholder_tokenizer():
    """oneshot wants a processor whenever a dataset is given; the dataset is already token ids,
    so a word-level tokenizer of the 512 ids' names stands in (the embedding hook below checks
    that what reaches the model is exactly the windows' ids)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(512)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")),
                                   unk_token="t0", bos_token="t1", eos_token="t2")


def nll(model, windows):
    """Mean NLL over every next-token prediction of the windows, and its standard error over windows."""
    per_window = []
    with torch.no_grad():
        for w in windows:
            ids = torch.tensor([w])
            logits = model(input_ids=ids).logits.float()[0, :-1]
            per_window.append(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none").double())
    tokens = torch.cat(per_window)
    return {"nll": float(tokens.mean()), "per_window": [float(x.mean()) for x in per_window]}


QNAMES = [("self_attn.q_proj", "attn.q"), ("self_attn.k_proj", "attn.k"), ("self_attn.v_proj", "attn.v"),
          ("self_attn.o_proj", "attn.o"), ("mlp.gate_proj", "mlp.gate"), ("mlp.up_proj", "mlp.up"),
          ("mlp.down_proj", "mlp.down")]


def ignore_for(case):
    return ["lm_head", "re:.*down_proj"] if case == "g128" else ["lm_head"]


def run_llmc(folder, cal, case, perm_q, perm_k, layers):
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from loguru import logger
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.eval()
    seen = []
    hook = model.model.embed_tokens.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()))

    log = []
    sink = logger.add(lambda m: log.append(str(m)), level="INFO")
    # W4A16's weights (int4, symmetric, actorder static by GPTQModifier's default) per output channel.
    # Group 128 cannot run here: see the module's docstring (case "g128" is per channel without down).
    modifier = GPTQModifier(config_groups={"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "channel"}}},
        ignore=ignore_for(case))
    ds = Dataset.from_dict({"input_ids": cal, "attention_mask": [[1] * len(w) for w in cal]})
    oneshot(model=model, dataset=ds, recipe=[modifier], processor=placeholder_tokenizer(),
            num_calibration_samples=len(cal), max_seq_length=L, shuffle_calibration_samples=False, batch_size=1)
    logger.remove(sink)
    hook.remove()
    pipeline = [m.split("Inferred ")[1].split()[0].strip("`") for m in log if "Inferred `" in m]
    solved = [m for m in log if "Quantizing 1 module(s)" in m]
    calib_inputs = [s for s in seen if s.device.type != "meta"]  # the sequential pipeline traces on meta tensors
    # The embedding's subgraph runs twice per window (calibration, then the propagating pass).
    assert len(calib_inputs) % len(cal) == 0, f"saw {[tuple(s.shape) for s in calib_inputs]}"
    for k, s in enumerate(calib_inputs):
        assert s[0].tolist() == cal[k % len(cal)], "llm-compressor's calibration input is not the window as given"
    out = {}
    for i in range(layers):
        for hf, qn in QNAMES:
            m = model.get_submodule(f"model.layers.{i}.{hf}")
            if not hasattr(m, "weight_scale"):
                continue
            w, s = m.weight.detach().float(), m.weight_scale.detach().float()  # [N, K], [N, G]
            G = s.shape[1]
            gs = (w.shape[1] + G - 1) // G
            sc = s.repeat_interleave(gs, dim=1)[:, :w.shape[1]]
            codes = torch.round(w / sc).clamp(-8, 7)
            assert torch.equal(codes * sc, w), f"{hf}: codes do not reproduce the fake-quantised weight"
            codes = (codes + 8).to(torch.int64)
            if qn == "attn.q":  # HF row j is llama2.c row perm[j]: put row perm[j] back
                codes, s = codes[torch.argsort(perm_q)], s[torch.argsort(perm_q)]
            if qn == "attn.k":
                codes, s = codes[torch.argsort(perm_k)], s[torch.argsort(perm_k)]
            out[f"layers.{i}.{qn}"] = {"shape": list(codes.shape), "groups": G,
                                       "codes": "".join(f"{c:x}" for c in codes.reshape(-1).tolist()),
                                       "scales": [float(x) for x in s.reshape(-1).tolist()]}
    assert len(solved) == len(out), f"{len(solved)} solves logged, {len(out)} quantised linears"
    return model, out, pipeline


def main():
    data_dir, out_path = sys.argv[1], sys.argv[2]
    import compressed_tensors
    import llmcompressor
    import transformers

    cfg, t = read_llama2c(os.path.join(data_dir, "models/stories260K/stories260K.bin"))
    windows = windows_from_text(data_dir)
    held_out, cal = windows[:HELD_OUT], windows[HELD_OUT:]
    from transformers import LlamaForCausalLM

    result = {
        "generator": "tests/oracle/make_gptq_model_fixtures.py",
        "versions": {"llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__},
        "model": "models/stories260K/stories260K.bin",
        "window_tokens": L,
        "calibration_windows": cal,
        "held_out_windows": held_out,
        "cases": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        perm_q, perm_k = write_hf(cfg, t, folder)
        full = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        result["full_precision"] = nll(full, held_out)
        del full
        for case in ("g128", "channel"):
            model, linears, pipeline = run_llmc(folder, cal, case, perm_q, perm_k, cfg["layers"])
            result["cases"][case] = {
                "qeval_scheme": "gptq-w4-g128" if case == "g128" else "gptq-w4",
                "exclude": ["layers.*.mlp.down"] if case == "g128" else [],
                "llmc_pipeline": pipeline,
                "llmc_modifier": "GPTQModifier(config_groups={weights: num_bits 4, int, symmetric, strategy channel}, "
                                 f"ignore={ignore_for(case)}) with its defaults: actorder static, dampening_frac 0.01, "
                                 "block_size 128",
                "linears": linears,
                "held_out": nll(model, held_out),
            }
            print(case, "pipeline", pipeline, "linears", len(linears), "NLL", result["cases"][case]["held_out"]["nll"],
                  "full", result["full_precision"]["nll"], file=sys.stderr)
    with open(out_path, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
