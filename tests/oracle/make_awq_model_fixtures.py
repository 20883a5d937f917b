#!/usr/bin/env python3
"""Makes tests/eval/fixtures/awq_stories260k_llmc.json: llm-compressor 0.14's own AWQ on the real model
stories260K, layer by layer through its sequential pipeline, on fixed calibration windows, so that
tests/eval/awq_end_to_end_test.cpp can run qeval's calibration pass on the same token ids and compare
every mapping's grid point, every code, scale and zero point, and the folded norms.

The conversion (llama2.c -> Hugging Face LlamaForCausalLM, q/k rows permuted for HF's rotate-half
rotary), the windows (tok512, a BOS before each paragraph, 8 held-out windows of 128 tokens then 16
calibration windows) and the NLL are make_gptq_model_fixtures.py's, imported from it.

What it runs: llmcompressor.oneshot(model, dataset = the 16 windows, one window a sample, unpadded,
unshuffled; a hook on the embedding checks that) with the recipe
    AWQModifier()                  its defaults: mappings inferred for Llama (AWQ_MAPPING_REGISTRY's
                                   default_mappings), duo_scaling True, n_grid 20
    QuantizationModifier(config_groups: weights int 4 bits, asymmetric, strategy "channel";
                         targets Linear; ignore lm_head)
i.e. W4A16_ASYM with its group of 128 replaced by per channel. Group 128 cannot run on stories260K
in llm-compressor 0.14 with compressed-tensors 0.19 (make_gptq_model_fixtures.py's docstring): K = 172
(down) is refused by validate_group_size_divisibility, and at K = 64 the weight observer fails to
unflatten a row into groups of 128. qeval's equivalent is the spec
    {"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq",
                 "awq": {"duo_scaling": true, "n_grid": 20, "calibration": {"windows": 16}}}}
(per channel in both the search's quantiser, the w_mean's chunks and the final codes). The pipeline it
infers is recorded (SequentialPipeline).

What it records: per mapping the search ran (v -> o is skipped on both sides: stories260K has 4 kv
heads for 8 heads, so v's 32 outputs are not o's 64 inputs), read by wrapping AWQModifier's
_compute_best_scale / _compute_loss: the grid (ratio, duo), every point's loss, the chosen index and
the token count; every quantised linear's codes (compressed-tensors' quantize(weight, weight_scale,
weight_zero_point) + 8, checked to rebuild its fake-quantised weight exactly), scales and zero points
(+ 8), q/k rows put back in llama2.c's order; both norms' folded gains per layer; the NLL of the
fake-quantised model (quantisation on, as after oneshot) on the held-out windows; and, per mapping,
how far the x_mean llm-compressor used is from the x_mean of the folded model run in full precision
and from that of the fake-quantised model (which stream the layer was calibrated on: the mappings'
x_mean_rel_diff_to_unquantised_stream and x_mean_rel_diff_to_quantised_stream; on this fixture
≤ 4e-7 and 3-18 % from layer 1 on: llm-compressor propagates AWQ's layers unquantised, inside
DisableQuantization).

  /work/cache/oracle-venv/bin/pip install --target /tmp/sp sentencepiece   (tokenizer only)
  PYTHONPATH=/tmp/sp /work/cache/oracle-venv/bin/python tests/oracle/make_awq_model_fixtures.py \\
      /work/shared/data tests/eval/fixtures/awq_stories260k_llmc.json
"""
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gptq_model_fixtures as g  # noqa: E402  (conversion, windows, NLL)

N_GRID = 20


def weights_args():
    return {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "channel"}


def record_searches(awq_base):
    """Wraps AWQModifier's search so that every mapping's grid, losses and choice are kept."""
    records = []
    orig_best, orig_loss = awq_base.AWQModifier._compute_best_scale, awq_base.AWQModifier._compute_loss

    def best_scale(self, mapping, fp16_outputs, orig_layer_weights):
        x_sum, count = self._smooth_activation_stats[mapping.smooth_name]
        rec = {"smooth": mapping.smooth_name, "balance": list(mapping.balance_names), "parent": mapping.parent_name,
               "x_mean": (x_sum / count).float().clone(), "tokens": int(count),
               "grid": [[r, bool(d)] for r, d in self._get_grid_search_params()], "losses": []}
        records.append(rec)
        scales = orig_best(self, mapping, fp16_outputs, orig_layer_weights)
        rec["scales"] = scales.float().clone()
        return scales

    def compute_loss(self, fp16_outputs, int_w_outputs):
        loss = orig_loss(self, fp16_outputs, int_w_outputs)
        if records and "scales" not in records[-1]:
            records[-1]["losses"].append(loss)
        return loss

    awq_base.AWQModifier._compute_best_scale = best_scale
    awq_base.AWQModifier._compute_loss = compute_loss
    return records


def stream_x_means(model, cal, quantised):
    """Per layer, x_mean of q_proj's and gate_proj's inputs over the calibration windows (float32 sums
    per window, as AWQModifier's hook), with the model's weight quantisation on or off."""
    from llmcompressor.utils.helpers import DisableQuantization

    sums = {}

    def hook(name):
        def fn(_m, args, _out):
            a = args[0].abs().detach().flatten(0, -2)
            s, n = sums.get(name, (torch.zeros(a.shape[1]), 0))
            sums[name] = (s + a.float().sum(0), n + a.shape[0])
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()
               if n.endswith(("q_proj", "gate_proj", "down_proj"))]
    with torch.no_grad():
        if quantised:
            for w in cal:
                model(input_ids=torch.tensor([w]))
        else:
            with DisableQuantization(model):
                for w in cal:
                    model(input_ids=torch.tensor([w]))
    for h in handles:
        h.remove()
    return {n: s / c for n, (s, c) in sums.items()}


def run_llmc(folder, cal, perm_q, perm_k, layers):
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize, quantize
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier
    from llmcompressor.modifiers.transform.awq import base as awq_base
    from llmcompressor.pipelines.cache import IntermediatesCache
    from loguru import logger
    from transformers import LlamaForCausalLM

    # Pinning host memory needs a CUDA driver; on a CPU-only machine it is left out (it moves no number).
    IntermediatesCache.pin_memory = lambda self, batch_index: None
    records = record_searches(awq_base)

    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.eval()
    seen = []
    hook = model.model.embed_tokens.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()))
    log = []
    sink = logger.add(lambda m: log.append(str(m)), level="INFO")
    recipe = [AWQModifier(n_grid=N_GRID),  # duo_scaling True, mappings inferred: the defaults
              QuantizationModifier(config_groups={"group_0": {"targets": ["Linear"], "weights": weights_args()}},
                                   ignore=["lm_head"])]
    ds = Dataset.from_dict({"input_ids": cal, "attention_mask": [[1] * len(w) for w in cal]})
    oneshot(model=model, dataset=ds, recipe=recipe, processor=g.placeholder_tokenizer(),
            num_calibration_samples=len(cal), max_seq_length=g.L, shuffle_calibration_samples=False, batch_size=1)
    logger.remove(sink)
    hook.remove()
    pipeline = [m.split("Inferred ")[1].split()[0].strip("`") for m in log if "Inferred `" in m]
    calib_inputs = [s for s in seen if s.device.type != "meta"]  # the sequential pipeline traces on meta tensors
    assert calib_inputs and len(calib_inputs) % len(cal) == 0, f"saw {[tuple(s.shape) for s in calib_inputs]}"
    for k, s in enumerate(calib_inputs):
        assert s[0].tolist() == cal[k % len(cal)], "llm-compressor's calibration input is not the window as given"

    linears = {}
    for i in range(layers):
        for hf, qn in g.QNAMES:
            m = model.get_submodule(f"model.layers.{i}.{hf}")
            if not hasattr(m, "weight_scale"):
                continue
            args = m.quantization_scheme.weights
            assert args.strategy == "channel" and not args.symmetric and args.num_bits == 4
            w, s, z = m.weight.data, m.weight_scale.data, m.weight_zero_point.data  # [N, K], [N, 1], [N, 1]
            q = quantize(w, s, z, args)
            assert torch.equal((q - z.to(q.dtype)) * s, fake_quantize(w, s, z, args)), f"{hf}: codes do not rebuild"
            codes, zeros, scales = (q.to(torch.int64) + 8), (z.to(torch.int64) + 8), s.float()
            assert int(codes.min()) >= 0 and int(codes.max()) <= 15 and int(zeros.min()) >= 0 and int(zeros.max()) <= 15
            if qn in ("attn.q", "attn.k"):  # HF row j is llama2.c row perm[j]: put row perm[j] back
                back = torch.argsort(perm_q if qn == "attn.q" else perm_k)
                codes, zeros, scales = codes[back], zeros[back], scales[back]
            linears[f"layers.{i}.{qn}"] = {
                "shape": list(codes.shape), "groups": 1,
                "codes": "".join(f"{c:x}" for c in codes.reshape(-1).tolist()),
                "scales": [float(x) for x in scales.reshape(-1).tolist()],
                "zeros": "".join(f"{c:x}" for c in zeros.reshape(-1).tolist())}
    norms = {}
    for i in range(layers):
        for hf, qn in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "mlp_norm")):
            norms[f"layers.{i}.{qn}.weight"] = [float(x) for x in
                                                model.get_submodule(f"model.layers.{i}.{hf}").weight.data.tolist()]
    return model, linears, norms, records, pipeline


def canonical(hf_name):
    """model.layers.3.self_attn.q_proj -> layers.3.attn.q; ...input_layernorm -> layers.3.attn_norm."""
    rest = hf_name.removeprefix("model.")
    for hf, qn in g.QNAMES + [("input_layernorm", "attn_norm"), ("post_attention_layernorm", "mlp_norm"),
                              ("self_attn", "attn"), ("mlp", "mlp")]:
        if rest.endswith("." + hf):
            return rest[: -len(hf)] + qn
    raise ValueError(hf_name)


def main():
    data_dir, out_path = sys.argv[1], sys.argv[2]
    import compressed_tensors
    import llmcompressor
    import transformers
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg, t = g.read_llama2c(os.path.join(data_dir, "models/stories260K/stories260K.bin"))
    windows = g.windows_from_text(data_dir)
    held_out, cal = windows[:g.HELD_OUT], windows[g.HELD_OUT:]
    with tempfile.TemporaryDirectory() as folder:
        perm_q, perm_k = g.write_hf(cfg, t, folder)
        full = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        full_nll = g.nll(full, held_out)
        del full
        model, linears, norms, records, pipeline = run_llmc(folder, cal, perm_q, perm_k, cfg["layers"])
        held = g.nll(model, held_out)
        # Which stream each layer was calibrated on: the folded model's (same function as full
        # precision) with quantisation off, or with every linear fake-quantised.
        x_off, x_on = stream_x_means(model, cal, False), stream_x_means(model, cal, True)

    mappings = []
    for r in records:
        losses = r["losses"]
        assert len(losses) == len(r["grid"]) == N_GRID, (len(losses), len(r["grid"]))
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        first = r["balance"][0]
        # folded x_mean of the first balance input (its smooth op divided it by these very scales)
        x_fold = r["x_mean"] / r["scales"]
        rel = lambda a: float(((x_fold - a).abs() / a.abs().clamp(min=1e-12)).max())  # noqa: E731
        mappings.append({
            "smooth": canonical(r["smooth"]), "balance": [canonical(b) for b in r["balance"]],
            "parent": canonical(r["parent"]), "tokens": r["tokens"], "grid": r["grid"], "losses": losses,
            "grid_index": best, "ratio": r["grid"][best][0], "duo": r["grid"][best][1],
            "x_mean_rel_diff_to_unquantised_stream": rel(x_off[first]),
            "x_mean_rel_diff_to_quantised_stream": rel(x_on[first])})
        print(f"{mappings[-1]['smooth']:>20} -> {','.join(mappings[-1]['balance']):<48} best {best:2d} "
              f"ratio {r['grid'][best][0]:.4f} duo {r['grid'][best][1]} loss {losses[best]:.6e} "
              f"(first {losses[0]:.6e}); x_mean vs unquantised stream {mappings[-1]['x_mean_rel_diff_to_unquantised_stream']:.2e}, "
              f"vs quantised {mappings[-1]['x_mean_rel_diff_to_quantised_stream']:.2e}", file=sys.stderr)

    result = {
        "generator": "tests/oracle/make_awq_model_fixtures.py",
        "versions": {"llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__},
        "model": "models/stories260K/stories260K.bin",
        "window_tokens": g.L,
        "calibration_windows": cal,
        "held_out_windows": held_out,
        "llmc_pipeline": pipeline,
        "llmc_recipe": f"AWQModifier(n_grid={N_GRID}) (duo_scaling True, Llama default mappings), "
                       f"QuantizationModifier(config_groups={{weights: {weights_args()}, targets Linear}}, "
                       "ignore=['lm_head'])",
        "qeval_spec": {"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq",
                                   "awq": {"duo_scaling": True, "n_grid": N_GRID,
                                           "calibration": {"windows": len(cal)}}}},
        "full_precision": full_nll,
        "held_out": held,
        "mappings": mappings,
        "linears": linears,
        "folded_norms": norms,
    }
    print("pipeline", pipeline, "mappings", len(mappings), "linears", len(linears), "NLL", held["nll"],
          "full", full_nll["nll"], file=sys.stderr)
    with open(out_path, "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
