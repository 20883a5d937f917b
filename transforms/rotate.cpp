#include "transforms/rotate.h"

#include "common/error.h"
#include "transforms/fold_norms.h"
#include "transforms/orthogonal.h"
#include "transforms/weight_math.h"

namespace qeval {
namespace {

double orthogonality_error(const at::Tensor& q) {
  return (at::matmul(q.t(), q) - at::eye(q.size(0), at::kDouble)).abs().max().item<double>();
}

void rotate_reader(LinearWeights& l, const at::Tensor& q) {
  if (l.weight.defined()) l.weight = f32(at::matmul(f64(l.weight), q));
}

void rotate_writer(LinearWeights& l, const at::Tensor& q) {
  l.weight = f32(at::matmul(q.t(), f64(l.weight)));
  if (l.bias.defined()) l.bias = f32(at::matmul(f64(l.bias), q));
}

}  // namespace

at::Tensor rotation_matrix(std::int64_t n, const RotateOptions& options) {
  if (options.kind == "hadamard") return randomized_hadamard(n, options.seed);
  if (options.kind == "orthogonal") return random_orthogonal(n, options.seed);
  fail("rotate: unknown kind '{}': expected hadamard or orthogonal", options.kind);
}

nlohmann::json rotate_model(ModelConfig& config, ModelWeights& weights, const RotateOptions& options) {
  // Experts and state-space mixers read and write the residual stream through layers this transform
  // does not know (routers, convolutions, the scan): refused rather than half-transformed.
  QEVAL_CHECK(config.layer_mixers.empty() && config.layer_ffns.empty(),
              "rotate: models with a layer pattern (mixture-of-experts or state-space layers, here architecture {}) are "
              "not supported",
              config.architecture);
  // What the rotation handles beyond GPT-2 / Llama: q/k norms act inside each head, after the
  // projections (untouched by a residual rotation); (1 + w) gains were made plain gains on load;
  // a parallel residual has the same readers and writers; fused qkv / gate_up are readers like the
  // separate ones. Sandwich norms cannot be folded (fold_norms says why).
  QEVAL_CHECK(!config.sandwich_norms,
              "rotate: cannot fold sandwich norms (post-attention and post-MLP norms, as in Gemma-3): their gains act "
              "after normalisation on the residual side, where the rotated stream would need a dense matrix instead "
              "of a diagonal gain; use smooth, or no transform, for this model");
  const at::Tensor q = rotation_matrix(config.d_model, options);  // checks the kind before any work
  nlohmann::json report = {{"name", "rotate"},
                           {"kind", options.kind},
                           {"seed", options.seed},
                           {"online_down", options.online_down}};
  if (options.kind == "hadamard") report["hadamard_factors"] = hadamard_factors(config.d_model);
  report["fold"] = fold_norms(config, weights);
  report["orthogonality_error"] = orthogonality_error(q);

  weights.token_embedding = f32(at::matmul(f64(weights.token_embedding), q));
  if (weights.position_embedding.defined()) weights.position_embedding = f32(at::matmul(f64(weights.position_embedding), q));
  for (auto& b : weights.blocks) {
    for (LinearWeights* l : {&b.qkv, &b.q, &b.k, &b.v, &b.up, &b.gate, &b.gate_up}) rotate_reader(*l, q);
    rotate_writer(b.o, q);
    rotate_writer(b.down, q);
  }
  weights.lm_head = f32(at::matmul(f64(weights.lm_head), q));

  if (options.online_down) {
    // A different seed from the residual rotation's, so the two are independent.
    RotateOptions down_options{"hadamard", options.seed + 1, false};
    const at::Tensor r = rotation_matrix(config.d_ff, down_options);
    report["online_down_hadamard_factors"] = hadamard_factors(config.d_ff);
    const at::Tensor r32 = f32(r);
    for (auto& b : weights.blocks) {
      QEVAL_CHECK(!b.down_input_rotation.defined(), "rotate: online_down asked twice (the model already has one)");
      b.down.weight = f32(at::matmul(f64(b.down.weight), r));  // y = (h R)(W R)ᵀ = h Wᵀ
      b.down_input_rotation = r32;
    }
  }
  return report;
}

}  // namespace qeval
