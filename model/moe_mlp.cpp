// Block::moe: a mixture-of-experts feed-forward (Mixtral, Qwen2/3-MoE, Jamba; DESIGN.md §3):
//   p = softmax(router · x) over the E experts (float32);  the top k by p;  their weights p, or p
//   renormalised over the k (config.moe_router_norm);  y = Σ_k w_k · expert_k(x)
//   (+ the shared expert, × sigmoid(g · x) when it is gated: Qwen2-MoE)
// Each expert runs once per sequence on that sequence's tokens routed to it, gathered into one
// [1, n, D] GEMM input: its linears are Linears like any other (quantised per scheme; an
// activation scale "per sequence" is over the gathered rows of that sequence), and a sequence's
// output never depends on the other rows of the batch. Contributions are added in expert order
// (as HF's loop over experts). The router and the shared expert's gate stay full precision.
#include <ATen/ATen.h>

#include "common/error.h"
#include "model/block.h"

namespace qeval {

at::Tensor Block::moe(const at::Tensor& h, ForwardObserver* observer) const {
  const ModelConfig& c = *config_;
  const MoeWeights& w = weights_.moe;
  const std::int64_t Bn = h.size(0), E = c.moe_experts, k = c.moe_top_k;
  // Router logits in the compute dtype, one GEMM per sequence (batch-independent bits), softmax in float32.
  std::vector<at::Tensor> logits;
  for (std::int64_t b = 0; b < Bn; ++b) logits.push_back(at::matmul(h[b], w.router.t()));
  const at::Tensor probs = at::softmax(at::stack(logits).to(at::kFloat), -1);  // [B, L, E]
  auto [top_w, top_i] = probs.topk(k, -1);                                     // [B, L, k], largest first
  if (c.moe_router_norm == RouterNorm::topk_renormalized) top_w = top_w / top_w.sum(-1, /*keepdim=*/true);
  top_w = top_w.to(h.scalar_type());
  if (observer && observer->wants_router(layer_)) observer->on_router(layer_, probs, top_i);

  at::Tensor out = at::zeros_like(h);
  // Which (token, slot) pairs each expert gets, for every sequence at once: sorted by expert, then
  // by token (a stable sort of the flattened choices).
  const at::Tensor top_i_cpu = top_i.to(at::kCPU).contiguous();
  for (std::int64_t b = 0; b < Bn; ++b) {
    const at::Tensor choices = top_i_cpu[b].reshape({-1});  // [L·k]: token t, slot s at t·k + s
    const at::Tensor counts = at::bincount(choices, {}, E);
    const at::Tensor order = std::get<1>(at::sort(choices, /*stable=*/true, 0, false));
    const std::int64_t* n = counts.data_ptr<std::int64_t>();
    const at::Tensor hb = h[b], wb = top_w[b].reshape({-1}), ob = out[b];
    std::int64_t begin = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      if (n[e] == 0) continue;
      const at::Tensor flat = order.narrow(0, begin, n[e]).to(h.device());  // t·k + s, ascending t
      begin += n[e];
      const at::Tensor tokens = at::floor_divide(flat, k);
      at::Tensor y = gated_mlp(slots_.experts[static_cast<std::size_t>(e)], hb.index_select(0, tokens).unsqueeze(0));
      ob.index_add_(0, tokens, y.squeeze(0) * wb.index_select(0, flat).unsqueeze(-1));
    }
  }
  if (c.moe_shared_d_ff > 0) {
    at::Tensor shared = gated_mlp(slots_.shared, h);
    if (w.shared_gate.defined()) {
      std::vector<at::Tensor> gates;
      for (std::int64_t b = 0; b < Bn; ++b) gates.push_back(at::matmul(h[b], w.shared_gate.t()));
      shared = shared * at::sigmoid(at::stack(gates));  // [B, L, 1]
    }
    out = out + shared;
  }
  return out;
}

}  // namespace qeval
