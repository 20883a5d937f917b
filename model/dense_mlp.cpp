// Block::mlp: the dense MLP (DESIGN.md §3): GELU (tanh or erf), ReLU, SwiGLU or GeGLU, with an
// optional online rotation of the hidden activation before the down projection (transforms/rotate).
// Block::gated_mlp: the same gated MLP through any three of the block's linears (an expert).
#include "model/block.h"

namespace qeval {

at::Tensor Block::mlp(const at::Tensor& h) const {
  const ModelConfig& c = *config_;
  at::Tensor gate, up;
  if (slots_.gate_up >= 0) {  // one [2F] output: gate then up (Phi-3)
    at::Tensor gate_up = linear(slots_.gate_up).forward(h);
    gate = gate_up.narrow(-1, 0, c.d_ff);
    up = gate_up.narrow(-1, c.d_ff, c.d_ff);
  } else {
    if (slots_.gate >= 0) gate = linear(slots_.gate).forward(h);
    up = linear(slots_.up).forward(h);
  }
  at::Tensor hidden;
  switch (c.mlp) {
    case MlpKind::gelu: hidden = at::gelu(up, "tanh"); break;
    case MlpKind::gelu_erf: hidden = at::gelu(up); break;
    case MlpKind::relu: hidden = at::relu(up); break;
    case MlpKind::swiglu: hidden = at::silu(gate) * up; break;
    case MlpKind::geglu: hidden = at::gelu(gate, "tanh") * up; break;
  }
  if (weights_.down_input_rotation.defined()) hidden = at::matmul(hidden, weights_.down_input_rotation);
  return linear(slots_.down).forward(hidden);
}

}  // namespace qeval

namespace qeval {

at::Tensor Block::gated_mlp(const ExpertSlots& slots, const at::Tensor& h) const {
  at::Tensor gate = linear(slots.gate).forward(h);
  at::Tensor up = linear(slots.up).forward(h);
  at::Tensor hidden = config_->mlp == MlpKind::geglu ? at::gelu(gate, "tanh") * up : at::silu(gate) * up;
  return linear(slots.down).forward(hidden);
}

}  // namespace qeval
