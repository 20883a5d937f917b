#include "quant/calibration/gptq_weights.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/w4_gemm.h"

namespace qeval {

GptqOptions gptq_options(const QuantSpec& weights) {
  QEVAL_CHECK(weights.kind == QuantKind::int4_zeropoint && weights.gptq.has_value(),
              "gptq_options: expected weights of kind int4_zeropoint with method gptq");
  const GptqSpec& g = *weights.gptq;
  GptqOptions o;
  o.bits = weights.bits();
  o.group_size = weights.granularity == Granularity::group ? weights.group_size : 0;
  o.symmetric = g.symmetric;
  o.dampening = g.dampening;
  o.block_size = g.block_size;
  o.order = g.actorder == GptqActOrder::none ? GptqOrder::none : GptqOrder::descending_hessian;
  o.group_params = g.updated_group_params ? GptqGroupParams::updated : GptqGroupParams::original;
  o.reference = g.autogptq_arithmetic ? GptqReference::autogptq : GptqReference::llm_compressor;
  return o;
}

CalibratedWeight calibrated_weight(const GptqResult& result, const QuantSpec& weights, const std::string& name) {
  const int bits = weights.bits();
  QEVAL_CHECK(bits >= 2 && bits <= 4, "{}: GPTQ's codes execute here in the 4-bit zero-point container, which holds "
              "2 to 4 bits; found {} bits", name, bits);
  QEVAL_CHECK(result.codes.numel() == 0 || result.codes.max().item<int>() < (1 << bits),
              "{}: a GPTQ code exceeds {} bits", name, bits);
  const std::int64_t N = result.codes.size(0), K = result.codes.size(1);
  const std::int64_t G = result.scales.size(1);
  CalibratedWeight c;
  const std::int64_t scale_bytes = 2 * N * G * 4;  // float32 scales and zeros
  // Counted at their width, as GPTQ checkpoints pack them (32 / b codes per int32 along K); held in nibbles here.
  const std::int64_t code_bytes = N * ((K * bits + 7) / 8);
  const std::int64_t group = weights.granularity == Granularity::group ? std::min(weights.group_size, K) : K;
  const at::Tensor consecutive = at::div(at::arange(K, at::kInt), group, "floor").to(at::kInt);
  if (result.group_of_column.equal(consecutive)) {
    W4Weight w;
    w.qweight = kernels::pack_u4(result.codes.contiguous());
    w.scales = result.scales.to(at::kFloat).contiguous();
    w.zeros = result.zeros.to(at::kFloat).contiguous();
    w.K = K;
    w.group_size = group;
    c.w4 = std::move(w);
    c.bytes = code_bytes + scale_bytes;
  } else {
    c.dequantized = result.dequantized.to(at::kFloat).contiguous();
    c.group_of_column = result.group_of_column;
    c.bytes = code_bytes + scale_bytes + K * 4;
  }
  return c;
}

}  // namespace qeval
