#include "quant/calibration/awq_mappings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "model/block.h"

namespace qeval {

namespace {

// What makes `layer` other than Llama-style, or "" when it is.
std::string unsupported_layout(const ModelConfig& c, std::int64_t layer) {
  if (c.mixer(layer) != MixerKind::attention) return "a Mamba mixer";
  if (c.ffn(layer) == FfnKind::moe) return "a mixture-of-experts feed-forward";
  if (c.ffn(layer) == FfnKind::none) return "no feed-forward";
  if (c.fused_qkv) return "one fused q/k/v projection (GPT-2 style)";
  if (c.fused_gate_up) return "one fused gate/up projection (Phi-3 style)";
  if (!c.gated_mlp()) return fmt::format("an ungated MLP ({}: up → down cannot fold through it)", to_string(c.mlp));
  if (c.parallel_residual) return "parallel attention and MLP branches (GPT-NeoX style)";
  if (c.sandwich_norms) return "sandwich norms (Gemma-2/3 style)";
  if (c.norm == NormKind::rmsnorm_single) return "a single-gain RMSNorm";
  return "";
}

}  // namespace

std::vector<AwqMapping> awq_mappings(const ModelConfig& c, std::int64_t layer, const std::string& model) {
  const std::string why = unsupported_layout(c, layer);
  QEVAL_CHECK(why.empty(),
              "AWQ: model {} layer {} has {}; AWQ here supports Llama-style layers (llm-compressor's default "
              "mappings: separate q/k/v and o, a gated MLP with separate gate/up/down, a per-channel norm before "
              "each branch: Llama, Mistral, Qwen2/3)", model, layer, why);
  const std::string p = fmt::format("layers.{}.", layer);
  std::vector<AwqMapping> out;
  out.push_back({p + "attn_norm → attn.q, attn.k, attn.v", p + "attn_norm", true,
                 {p + "attn.q", p + "attn.k", p + "attn.v"}, AwqParent::mixer, p + "attn", ""});
  AwqMapping vo{p + "attn.v → attn.o", p + "attn.v", false, {p + "attn.o"}, AwqParent::linear, p + "attn.o", ""};
  const LinearShape v = linear_shape(c, p + "attn.v"), o = linear_shape(c, p + "attn.o");
  if (v.out != o.in)
    vo.skipped = fmt::format("v has {} outputs and o {} inputs (grouped-query attention): llm-compressor skips "
                             "v → o when the shapes differ", v.out, o.in);
  out.push_back(vo);
  out.push_back({p + "mlp_norm → mlp.gate, mlp.up", p + "mlp_norm", true, {p + "mlp.gate", p + "mlp.up"},
                 AwqParent::ffn, p + "mlp", ""});
  out.push_back({p + "mlp.up → mlp.down", p + "mlp.up", false, {p + "mlp.down"}, AwqParent::linear, p + "mlp.down", ""});
  return out;
}

}  // namespace qeval
