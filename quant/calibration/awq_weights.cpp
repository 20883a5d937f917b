#include "quant/calibration/awq_weights.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/w4_gemm.h"

namespace qeval {

AwqOptions awq_options(const QuantSpec& weights) {
  QEVAL_CHECK(weights.kind == QuantKind::int4_zeropoint && weights.awq.has_value(),
              "awq_options: expected weights of kind int4_zeropoint with method awq");
  const AwqSpec& a = *weights.awq;
  AwqOptions o;
  o.n_grid = a.n_grid;
  o.duo_scaling = a.duo_scaling == AwqDuo::off ? AwqDuoScaling::off
                  : a.duo_scaling == AwqDuo::on ? AwqDuoScaling::on
                                                : AwqDuoScaling::both;
  o.bits = weights.bits();
  o.group_size = weights.granularity == Granularity::group ? weights.group_size : 0;
  o.symmetric = false;  // W4A16_ASYM
  o.reference = AwqReference::llm_compressor;
  return o;
}

CalibratedWeight awq_calibrated_weight(const at::Tensor& folded_weight, const QuantSpec& weights,
                                       const std::string& name) {
  QEVAL_CHECK(weights.bits() == 4, "{}: AWQ's codes execute here as 4-bit zero-point weights, found {} bits", name,
              weights.bits());
  QEVAL_CHECK(folded_weight.defined() && folded_weight.dim() == 2 && folded_weight.scalar_type() == at::kFloat,
              "{}: AWQ quantises a float32 [out, in] weight", name);
  const AwqQuantized q = awq_quantize(folded_weight.contiguous(), awq_options(weights), name);
  const std::int64_t N = q.codes.size(0), K = q.codes.size(1), G = q.scales.size(1);
  W4Weight w;
  w.qweight = kernels::pack_u4(q.codes.contiguous());
  w.scales = q.scales.to(at::kFloat).contiguous();
  w.zeros = q.zeros.to(at::kFloat).contiguous();
  w.K = K;
  w.group_size = weights.granularity == Granularity::group ? std::min(weights.group_size, K) : K;
  CalibratedWeight c;
  c.w4 = std::move(w);
  c.bytes = N * ((K + 1) / 2) + 2 * N * G * 4;  // packed codes + float32 scales and zeros
  return c;
}

}  // namespace qeval
