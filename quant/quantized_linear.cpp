#include "quant/quantized_linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "kernels/fp32_gemm.h"
#include "kernels/int8_gemm.h"
#include "kernels/int8_linear.h"
#include "kernels/int8_quantize.h"
#include "kernels/w4_gemm.h"
#include "kernels/w4_linear.h"
#include "model/placement.h"
#include "quant/calibrated_weights.h"
#include "quant/float_quantize.h"
#include "quant/formats/ggml/activations.h"
#include "quant/formats/ggml/quants.h"
#include "quant/ggml_importance.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/quantize.h"
#include "quant/schemes/scheme_json.h"

namespace qeval {

namespace {

// Rows sharing one dynamic scale: 1 per token, else every row of the sequence (DESIGN.md §5).
std::int64_t rows_per_scale(const QuantSpec& q, std::int64_t L) {
  return q.granularity == Granularity::token ? 1 : std::max<std::int64_t>(L, 1);
}

}  // namespace

std::string to_string(ExecutionPath p) { return p == ExecutionPath::kernel ? "kernel" : "reference"; }

std::string kernel_path_unavailable_reason(const SchemeSpec& spec) {
  const QuantSpec& w = spec.weights;
  const QuantSpec& a = spec.input_activations;
  switch (w.kind) {
    case QuantKind::none: return "the weights are not quantised, so there is no integer or packed GEMM to run";
    case QuantKind::int4_zeropoint:
      if (w.gptq && w.gptq->actorder == GptqActOrder::group)
        return "GPTQ's activation-ordered groups (g_idx) are not runs of consecutive columns, which the 4-bit "
               "kernels need: the weights are dequantised once and run as a float32 GEMM";
      return "";  // w4_gemm takes float (or fake-quantised) activations
    case QuantKind::int8_absmax: break;
    case QuantKind::fp8:
    case QuantKind::mx:
    case QuantKind::nvfp4:
      return "the CPU has no FP8/FP6/FP4 arithmetic: the weights are dequantised once and the exact product of the "
             "dequantised values runs as a float32 GEMM";
    case QuantKind::ggml:
      return w.ggml_q8_activations
                 ? "llama.cpp's types run as the weight a GGUF of that type holds, dequantised once, in a float32 GEMM "
                   "on the activations rounded to llama.cpp's CPU blocks (Q8_0 / Q8_1 / Q8_K / F16, gguf-q8)"
                 : "llama.cpp's types run as the weight a GGUF of that type holds, dequantised once, in a float32 GEMM "
                   "on full-precision activations";
  }
  if (w.granularity == Granularity::group)
    return "per-group int8 weight scales along the input dimension cannot be factored out of an integer GEMM";
  switch (a.kind) {
    case QuantKind::none: return "int8 weights with unquantised activations have no integer GEMM";
    case QuantKind::int4_zeropoint: return "4-bit zero-point activations have no integer GEMM here";
    case QuantKind::int8_absmax: break;
    case QuantKind::fp8:
    case QuantKind::mx:
    case QuantKind::nvfp4: return "int8 weights with floating-point-format activations have no integer GEMM";
    case QuantKind::ggml: return "kind ggml is for weights only";
  }
  if (a.granularity == Granularity::feature)
    return "per-feature activation scales cannot be factored out of an integer GEMM";
  return "";
}

std::shared_ptr<QuantizedLinearLog> QuantizedLinear::make_log() { return std::make_shared<QuantizedLinearLog>(); }

QuantizedLinear::QuantizedLinear(const std::string& name, const at::Tensor& weight, const at::Tensor& bias,
                                 const SchemeSpec& spec, ExecutionPath path, std::shared_ptr<QuantizedLinearLog> log,
                                 std::optional<float> weight_max_abs)
    : name_(name),
      weights_(spec.weights),
      inputs_(spec.input_activations),
      outputs_(spec.output_activations),
      path_(path),
      bias_(bias),
      keep_(spec.keep_tokens),
      outlier_threshold_(spec.outlier_threshold),
      log_(log ? std::move(log) : make_log()) {
  QEVAL_CHECK(weight.defined() && weight.dim() == 2 && weight.scalar_type() == at::kFloat,
              "QuantizedLinear {}: expected a float32 [out, in] weight", name);
  out_ = weight.size(0);
  in_ = weight.size(1);
  QEVAL_CHECK(!bias_.defined() || (bias_.dim() == 1 && bias_.size(0) == out_ && bias_.scalar_type() == at::kFloat),
              "QuantizedLinear {}: bias must be float32 [{}]", name, out_);
  if (path == ExecutionPath::kernel) {
    const std::string why = kernel_path_unavailable_reason(spec);
    QEVAL_CHECK(why.empty(), "QuantizedLinear {}: scheme {} cannot run on the kernel path: {}", name, spec.name, why);
  }
  switch (weights_.kind) {
    case QuantKind::int8_absmax:
      int8_ = quantize_int8_weight(weight.contiguous(), weights_, name, weight_max_abs);
      break;
    case QuantKind::int4_zeropoint:
      if (weights_.gptq || weights_.awq) {
        // GPTQ's or AWQ's codes, made before the evaluation (eval/weight_calibration_pass.h).
        QEVAL_CHECK(spec.calibrated_weights && spec.calibrated_weights->by_name.count(name),
                    "QuantizedLinear {}: scheme {} quantises its weights with {}, but no calibrated weight was made "
                    "for this linear", name, spec.name, weights_.gptq ? "GPTQ" : "AWQ");
        const CalibratedWeight& c = spec.calibrated_weights->by_name.at(name);
        const std::int64_t n = c.w4 ? c.w4->out_features() : c.dequantized.size(0);
        const std::int64_t k = c.w4 ? c.w4->in_features() : c.dequantized.size(1);
        QEVAL_CHECK(n == weight.size(0) && k == weight.size(1), "QuantizedLinear {}: the calibrated weight is [{}, {}], "
                    "the layer's weight [{}, {}]", name, n, k, weight.size(0), weight.size(1));
        if (c.w4)
          w4_ = *c.w4;
        else
          float_weight_ = c.dequantized;
        calibrated_bytes_ = c.bytes;  // as the method's checkpoints pack them (GPTQ at 3 bits: 3 bits a code)
      } else {
        w4_ = quantize_w4_weight(weight.contiguous(), weights_, name);
      }
      break;
    case QuantKind::none: float_weight_ = weight; break;
    case QuantKind::fp8:
    case QuantKind::mx:
    case QuantKind::nvfp4:
      // Dequantised once: the CPU's exact path is the float32 product of the dequantised values.
      float_weight_ = fake_quantize_float_weight(weight, weights_, weight_max_abs);
      break;
    case QuantKind::ggml:
      // The float32 a GGUF of this layer's type holds (SchemeRewrite resolved the type per tensor).
      QEVAL_CHECK(!weights_.ggml_type.empty(), "QuantizedLinear {}: kind ggml needs the tensor's type resolved (a file "
                  "type's choice is made by SchemeRewrite)", name);
    {
      const GgmlType type = ggml_type_from_json_name(weights_.ggml_type, name, false);
      // With an importance matrix, as llama-quantize --imatrix: this tensor's entry when the file
      // has one (quant/ggml_importance.h); Q8_0 and MXFP4 never read it.
      const at::Tensor importance = spec.ggml_importance ? spec.ggml_importance->find(name) : at::Tensor();
      QEVAL_CHECK(weights_.ggml_imatrix.empty() || spec.ggml_importance, "QuantizedLinear {}: scheme {} names the "
                  "importance matrix {}, but it was not read (eval/ggml_imatrix.h)", name, spec.name,
                  weights_.ggml_imatrix);
      float_weight_ = importance.defined() && type != GgmlType::F16
                          ? quantize_dequantize_ggml(weight.contiguous().to(at::kFloat), type, importance)
                          : ggml_round_trip(weight.contiguous(), type);
    }
      if (weights_.ggml_q8_activations)
        ggml_activations_ = ggml_vec_dot_type(ggml_type_from_json_name(weights_.ggml_type, name, false));
      break;
  }
  if (inputs_.is_static()) {
    QEVAL_CHECK(spec.calibrated && spec.calibrated->amax.count(name),
                "QuantizedLinear {}: scheme {} has a static input scale (calibration) but none was calibrated for "
                "this linear",
                name, spec.name);
    static_input_scale_ = static_activation_scale(inputs_, spec.calibrated->amax.at(name));
  }
  QEVAL_CHECK(keep_.count >= 0, "QuantizedLinear {}: keep_tokens count must be non-negative, got {}", name,
              keep_.count);
  if (keep_.enabled()) {
    QEVAL_CHECK(inputs_.enabled() || outputs_.enabled(),
                "QuantizedLinear {}: scheme {} keeps tokens but quantises no activations", name, spec.name);
    float_op_.emplace(weight, bias);
  }
  if (outlier_threshold_) {
    // The scheme's rules (vector-wise int8 only, threshold non-negative), with this layer named.
    validate_scheme(spec, fmt::format("QuantizedLinear {} (scheme {})", name, spec.name));
    float_op_.emplace(weight, bias);
  }
}

QuantizedLinear::QuantizedLinear(const QuantizedLinear& source, PlacementCache& cache)
    : name_(source.name_),
      weights_(source.weights_),
      inputs_(source.inputs_),
      outputs_(source.outputs_),
      path_(source.path_),
      in_(source.in_),
      out_(source.out_),
      keep_(source.keep_),
      outlier_threshold_(source.outlier_threshold_),
      static_input_scale_(source.static_input_scale_),
      log_(source.log_) {
  calibrated_bytes_ = source.calibrated_bytes_;
  const at::ScalarType compute = cache.placement().dtype;
  // Packed codes as they are; their scales, zeros and the epilogue's bias stay float32.
  if (source.int8_) {
    int8_ = *source.int8_;
    int8_->q = cache.move(int8_->q);
    int8_->scales = cache.move(int8_->scales, at::kFloat);
  }
  if (source.w4_) {
    w4_ = *source.w4_;
    w4_->qweight = cache.move(w4_->qweight);
    w4_->scales = cache.move(w4_->scales, at::kFloat);
    w4_->zeros = cache.move(w4_->zeros, at::kFloat);
  }
  float_weight_ = cache.move(source.float_weight_, at::kFloat);
  bias_ = cache.move(source.bias_, at::kFloat);
  device_bias_ = cache.move(source.bias_);
  // A static input scale has no fused int8_linear on the device yet: its int8 layers run the
  // float GEMM on the dequantised weight there.
  const bool float_gemm = path_ == ExecutionPath::reference || (int8_ && static_input_scale_) ||
                          (w4_ && !kernels::w4_linear_supports(cache.placement().device, compute));
  if (compute == at::kDouble)
    device_weight_ = source.float64_weight();  // once per placement, not per forward_float64 call
  else if (float_gemm)
    device_weight_ = cache.move(source.dequantized_weight());
  if (source.float_op_) float_op_.emplace(cache.move(source.float_op_->weight()), cache.move(source.float_op_->bias()));
  const std::string dtype = dtype_name(compute);
  if (path_ == ExecutionPath::kernel && int8_ && !static_input_scale_)
    engine_ = "int8_linear on " + cache.placement().device.str() + ", " + dtype + " out";
  else if (device_weight_.defined())
    engine_ = "dequantise + " + dtype + " GEMM on " + cache.placement().device.str();
  else
    engine_ = "w4_linear on " + cache.placement().device.str() + ", " + dtype;
}

std::shared_ptr<const Linear> QuantizedLinear::placed(PlacementCache& cache) const {
  return std::shared_ptr<const Linear>(new QuantizedLinear(*this, cache));  // the constructor is private
}

std::int64_t QuantizedLinear::weight_bytes() const {
  std::int64_t bytes = bias_.defined() ? bias_.numel() * 4 : 0;
  // Kept rows and outlier features run the fp32 weight, so such a layer holds it besides the
  // packed one.
  if (float_op_) bytes += float_op_->weight().numel() * 4;
  if (calibrated_bytes_ > 0) return bytes + calibrated_bytes_;
  if (int8_) return bytes + int8_->bytes();
  if (w4_) return bytes + w4_->bytes();
  if (weights_.is_float_format()) return bytes + float_format_weight_bytes(weights_, out_, in_);
  if (weights_.kind == QuantKind::ggml)
    return bytes + ggml_tensor_bytes(ggml_type_from_json_name(weights_.ggml_type, name_, false), out_, in_);
  return bytes + float_weight_.numel() * static_cast<std::int64_t>(float_weight_.element_size());
}

std::string QuantizedLinear::describe() const {
  auto part = [this](const char* what, const QuantSpec& q) {
    if (!q.enabled()) return std::string();
    std::string kind = to_string(q.kind);
    if (q.is_float_format()) kind += "-" + to_string(q.element);
    if (q.kind == QuantKind::ggml)
      return fmt::format(" {}:ggml-{}{}", what, q.ggml_type,
                         ggml_activations_ ? " × " + to_string(*ggml_activations_) + " activations" : "");
    if (q.kind == QuantKind::mx && q.scale_round_up) kind += " scale up";
    if (q.is_static() && static_input_scale_) kind += fmt::format(" static scale {}", *static_input_scale_);
    return fmt::format(" {}:{}/{}", what, kind, q.granularity_name());
  };
  std::string engine = engine_;
  if (engine.empty() && path_ == ExecutionPath::kernel)
    engine = int8_ ? "int8_gemm" : "w4_gemm";
  else if (engine.empty())
    engine = "dequantise + fp32 GEMM";
  const std::string keep =
      keep_.enabled() ? fmt::format(", keep {}:{} in fp32 (fp32 weight held too)", to_string(keep_.rule), keep_.count)
                      : std::string();
  const std::string outliers =
      outlier_threshold_ ? fmt::format(", outliers |x|>={} in fp32 (fp32 weight held too)", *outlier_threshold_)
                         : std::string();
  const std::string dequantised =
      weights_.is_float_format() || weights_.kind == QuantKind::ggml ? ", weight dequantised once to fp32" : "";
  return fmt::format("quantised{}{}{}{}{}{}, {} path ({})", part("w", weights_), part("in", inputs_),
                     part("out", outputs_), keep, outliers, dequantised, to_string(path_), engine);
}

std::set<std::string> QuantizedLinear::engines_used() const {
  std::lock_guard<std::mutex> lock(log_->mutex);
  return log_->engines_used;
}

at::Tensor QuantizedLinear::dequantized_weight() const {
  if (int8_) return int8_->dequantize();
  if (w4_) return w4_->dequantize();
  return float_weight_;
}

at::Tensor QuantizedLinear::forward(const at::Tensor& x) const {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == in_ &&
                  (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble || !x.device().is_cpu()),
              "QuantizedLinear ", name_, ": expected float32 or float64 [B, L, ", in_,
              "] (any float dtype on a GPU), got ",
              x.scalar_type(), " ", x.sizes(), " on ", x.device());
  const std::int64_t B = x.size(0);
  {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->rows += B * x.size(1);  // an expert's linear sees only its routed tokens (records count them)
  }
  if (B == 0) return at::empty({0, x.size(1), out_}, x.options());
  if (x.size(1) == 0) return forward_quantized(x);
  if (outlier_threshold_) return forward_mixed(x);
  return keep_.enabled() ? forward_keeping(x) : forward_quantized(x);
}

at::Tensor QuantizedLinear::select_outlier_features(const at::Tensor& x) const {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == in_, "QuantizedLinear ", name_, ": expected [B, L, ", in_, "], got ",
              x.sizes());
  const std::int64_t B = x.size(0);
  if (!outlier_threshold_ || x.size(1) == 0) return at::zeros({B, in_}, x.options().dtype(at::kBool));
  // max |x| per feature of each sequence is exact in float32; the comparison is in double so a
  // threshold that float32 cannot hold (6.0000001) is not rounded first. NaN is never >= T.
  return x.abs().amax(1).to(at::kDouble).ge(*outlier_threshold_);  // [B, in]
}

QuantizedLinear::OutlierFeatures QuantizedLinear::outlier_features() const {
  std::lock_guard<std::mutex> lock(log_->mutex);
  return log_->outliers;
}

void QuantizedLinear::reset_outlier_features() const {
  std::lock_guard<std::mutex> lock(log_->mutex);
  log_->outliers = {};
}

at::Tensor QuantizedLinear::forward_mixed(const at::Tensor& x) const {
  const std::int64_t B = x.size(0);
  const at::Tensor outlier = select_outlier_features(x);  // [B, in] bool
  std::vector<at::Tensor> features(static_cast<std::size_t>(B));  // per sequence: [|O|] int64, ascending
  bool any = false, all = true;
  {
    const at::Tensor cpu = outlier.cpu();
    std::lock_guard<std::mutex> lock(log_->mutex);
    OutlierFeatures& log = log_->outliers;
    log.sequences += B;
    for (std::int64_t b = 0; b < B; ++b) {
      const at::Tensor ids = cpu[b].nonzero().reshape({-1});
      const std::int64_t n = ids.numel();
      log.total += n;
      log.max = std::max(log.max, n);
      const auto* p = ids.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < n; ++i) ++log.counts[p[i]];
      any = any || n > 0;
      all = all && n == in_;
      features[static_cast<std::size_t>(b)] = ids.to(x.device());
    }
  }
  if (!any) return forward_quantized(x);  // the vector-wise scheme exactly
  if (all) return float_op_->forward(x);  // exactly what the full-precision layer computes
  // Zeroed columns quantise to code 0 (exact zeros in the integer sums) and leave the per-token
  // scales to the other columns.
  at::Tensor y = forward_quantized(x.masked_fill(outlier.unsqueeze(1), 0.0f)).contiguous();  // [B, L, out]
  const at::Tensor& w = float_op_->weight();  // [out, in] fp32
  for (std::int64_t b = 0; b < B; ++b) {
    const at::Tensor& ids = features[static_cast<std::size_t>(b)];
    if (ids.numel() == 0) continue;
    if (ids.numel() == in_) {
      y.narrow(0, b, 1).copy_(float_op_->forward(x.narrow(0, b, 1)));
      continue;
    }
    // One float GEMM per sequence over its outlier columns: [L, |O|] × [|O|, out].
    const at::Tensor part = at::matmul(x[b].index_select(1, ids), w.index_select(1, ids).t());
    y[b].add_(part);
  }
  return y;
}

at::Tensor QuantizedLinear::select_kept_positions(const at::Tensor& x) const {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == in_, "QuantizedLinear ", name_, ": expected [B, L, ", in_, "], got ",
              x.sizes());
  const std::int64_t B = x.size(0), L = x.size(1), k = std::min(keep_.count, L);
  const auto ids = at::TensorOptions().dtype(at::kLong).device(x.device());
  if (keep_.rule == KeepRule::first || k == L) return at::arange(k, ids).unsqueeze(0).expand({B, k}).contiguous();
  // top_norm: sums of squares in float64 (same order as ||x||_2), ranked per sequence with an
  // explicit tie rule so the choice never depends on a sort's stability.
  const at::Tensor norms = x.to(at::kDouble).square().sum(2).cpu().contiguous();  // [B, L]
  const auto n = norms.accessor<double, 2>();
  at::Tensor kept = at::empty({B, k}, at::kLong);
  auto out = kept.accessor<std::int64_t, 2>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(L));
  for (std::int64_t b = 0; b < B; ++b) {
    auto key = [&](std::int64_t l) { return std::isnan(n[b][l]) ? INFINITY : n[b][l]; };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t i, std::int64_t j) {
      return key(i) > key(j) || (key(i) == key(j) && i < j);
    });
    std::sort(order.begin(), order.begin() + k);
    for (std::int64_t i = 0; i < k; ++i) out[b][i] = order[static_cast<std::size_t>(i)];
  }
  return kept.to(x.device());
}

QuantizedLinear::KeptPositions QuantizedLinear::kept_positions() const {
  std::lock_guard<std::mutex> lock(log_->mutex);
  return log_->kept;
}

void QuantizedLinear::reset_kept_positions() const {
  std::lock_guard<std::mutex> lock(log_->mutex);
  log_->kept = {};
}

at::Tensor QuantizedLinear::forward_keeping(const at::Tensor& x) const {
  const std::int64_t B = x.size(0), L = x.size(1);
  const at::Tensor kept = select_kept_positions(x);  // [B, k]
  const std::int64_t k = kept.size(1);
  {
    const at::Tensor cpu = kept.cpu();
    const auto ids = cpu.accessor<std::int64_t, 2>();
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->kept.sequences += B;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < k; ++i) ++log_->kept.counts[ids[b][i]];
  }
  // The full-precision layer's own op on every row (see the header for why not on the kept rows
  // alone); the rows not kept are then overwritten with the quantised path's.
  at::Tensor y = float_op_->forward(x).contiguous();  // [B, L, out]
  if (k == L) return y;
  at::Tensor keep_mask = at::zeros({B, L}, kept.options().dtype(at::kBool));
  keep_mask.scatter_(1, kept, true);
  const at::Tensor positions = at::arange(L, kept.options()).unsqueeze(0).expand({B, L});
  const at::Tensor rest = positions.masked_select(keep_mask.logical_not()).reshape({B, L - k});  // ascending
  const at::Tensor x_rest = x.gather(1, rest.unsqueeze(2).expand({B, L - k, in_}));            // [B, L−k, in]
  y.scatter_(1, rest.unsqueeze(2).expand({B, L - k, out_}), forward_quantized(x_rest));
  return y;
}

at::Tensor QuantizedLinear::forward_quantized_device(const at::Tensor& x) const {
  QEVAL_CHECK(!ggml_activations_, "{}: \"activations\": \"gguf-q8\" (llama.cpp's CPU activation blocks) runs on "
              "the CPU only; on a GPU llama.cpp multiplies full-precision activations: use \"none\"", name_);
  const std::int64_t B = x.size(0), L = x.size(1);
  const at::ScalarType dtype = x.scalar_type();
  auto log_engine = [&](const std::string& engine) {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->engines_used.insert(engine);
  };
  if (path_ == ExecutionPath::kernel && int8_ && !static_input_scale_) {
    // One op over all B·L rows: exact integer sums, per-row or per-sequence scales.
    const std::int64_t out_rows = outputs_.kind == QuantKind::int8_absmax ? rows_per_scale(outputs_, L) : 0;
    log_engine(kernels::int8_linear_path(x.device(), B * L, out_, in_));
    return kernels::int8_linear(x.reshape({B * L, in_}), rows_per_scale(inputs_, L), int8_->q, int8_->scales, bias_, out_rows)
        .reshape({B, L, out_});
  }
  at::Tensor xq = inputs_.enabled() ? quantize_inputs(x.to(at::kFloat)).to(dtype) : x;
  at::Tensor y;
  if (!device_weight_.defined()) {  // 4-bit weights with a packed kernel for this dtype
    std::string chosen;
    y = kernels::w4_linear(xq.reshape({B * L, in_}), w4_->qweight, w4_->scales, w4_->zeros, w4_->group_size, bias_,
                           &chosen)
            .reshape({B, L, out_});
    log_engine(chosen);
  } else {
    y = device_bias_.defined() ? at::linear(xq, device_weight_, device_bias_) : at::linear(xq, device_weight_);
    log_engine(engine_);
  }
  return outputs_.enabled() ? fake_quantize_activations(y.to(at::kFloat), outputs_).to(dtype) : y;
}

at::Tensor QuantizedLinear::forward_quantized(const at::Tensor& x) const {
  if (!x.device().is_cpu()) return forward_quantized_device(x);
  if (x.scalar_type() == at::kDouble) return forward_float64(x);
  const std::int64_t B = x.size(0);
  at::Tensor y;  // [B, L, out]
  if (path_ == ExecutionPath::kernel && int8_) {
    // Integer sums are exact and every scale is per row or per sequence, so one GEMM over all
    // B·L rows gives bit-identical results to B separate ones.
    y = forward_int8_kernel(x);
  } else {
    // Float GEMMs (BLAS, or w4_gemm whose backend depends on the row count) may round
    // differently for other shapes: each sequence is its own GEMM, so results never depend on B.
    const at::Tensor w = path_ == ExecutionPath::reference ? dequantized_weight() : at::Tensor();  // [out, in]
    std::vector<at::Tensor> parts;
    parts.reserve(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      at::Tensor xb = x.narrow(0, b, 1);
      parts.push_back(path_ == ExecutionPath::kernel ? forward_w4_kernel(xb) : forward_reference(xb, w));
    }
    y = B == 1 ? parts[0] : at::cat(parts, 0);
  }
  if (path_ == ExecutionPath::kernel && outputs_.kind == QuantKind::int8_absmax) {
    // The fused round trip gives the reference maths' codes and scales bit for bit, in two
    // passes over y and in place (y is this call's own tensor).
    const std::int64_t L = y.size(1), N = y.size(2);
    y = y.contiguous();
    at::Tensor rows_view = y.view({B * L, N});
    kernels::fake_quantize_int8_rows_(rows_view, rows_per_scale(outputs_, L));
    return y;
  }
  return fake_quantize_activations(y, outputs_);
}

at::Tensor QuantizedLinear::float64_weight() const {
  // Integer codes times float32 scales are exact in float64, so the weights are exactly the
  // scheme's; every rounding left is float64's.
  return int8_ ? int8_->dequantize(at::kDouble) : dequantized_weight().to(at::kDouble);
}

at::Tensor QuantizedLinear::forward_float64(const at::Tensor& x) const {
  {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->engines_used.insert("float64 reference on cpu");
  }
  // A layer placed for --dtype fp64 made its weight and bias float64 once; one used as built
  // (tests) makes them here.
  const bool placed = device_weight_.defined() && device_weight_.scalar_type() == at::kDouble;
  const at::Tensor w = placed ? device_weight_ : float64_weight();
  const at::Tensor b = placed ? device_bias_ : bias_.defined() ? bias_.to(at::kDouble) : at::Tensor();
  // One GEMM per sequence, as the float32 paths run them: a GEMM's rounding may depend on its row
  // count, and the float64 band must not depend on the batch size either.
  const at::Tensor xq = quantize_inputs(x);
  std::vector<at::Tensor> parts;
  for (std::int64_t s = 0; s < x.size(0); ++s) parts.push_back(at::linear(xq.narrow(0, s, 1), w, b));
  at::Tensor y = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
  return fake_quantize_activations(y, outputs_);
}

at::Tensor QuantizedLinear::quantize_inputs(const at::Tensor& x) const {
  if (ggml_activations_) {
    // llama.cpp's blocks are defined in float32: under --dtype fp64 the activations are rounded
    // to float32 first, then to the blocks, and the product runs in float64.
    const std::string where = fmt::format("{} (\"activations\": \"gguf-q8\", {} blocks)", name_,
                                          to_string(*ggml_activations_));
    if (x.scalar_type() == at::kFloat) return ggml_activation_round_trip(x, *ggml_activations_, where);
    return ggml_activation_round_trip(x.to(at::kFloat), *ggml_activations_, where).to(x.scalar_type());
  }
  if (static_input_scale_) return fake_quantize_static(x, inputs_, *static_input_scale_);
  return fake_quantize_activations(x, inputs_);
}

at::Tensor QuantizedLinear::forward_reference(const at::Tensor& x, const at::Tensor& w) const {
  at::Tensor xq = quantize_inputs(x);
  return kernels::fp32_linear_rows(xq, w, bias_);
}

at::Tensor QuantizedLinear::forward_w4_kernel(const at::Tensor& x) const {
  const std::int64_t B = x.size(0), L = x.size(1);
  at::Tensor xq = quantize_inputs(x).reshape({B * L, in_});
  at::Tensor y = kernels::w4_gemm(xq, w4_->qweight, w4_->scales, w4_->zeros, w4_->group_size, bias_);
  return y.reshape({B, L, out_});
}

at::Tensor QuantizedLinear::forward_int8_kernel(const at::Tensor& x) const {
  const std::int64_t B = x.size(0), L = x.size(1);
  if (static_input_scale_) {
    // One calibrated scale for every row: the reference maths' codes, then the same GEMM.
    const at::Tensor s = at::full({1}, *static_input_scale_, x.options());
    const at::Tensor q = int8_quantize(x.reshape({B * L, in_}), s);
    return kernels::int8_gemm(q, int8_->q, s, int8_->scales, bias_).reshape({B, L, out_});
  }
  // Per-token scales, or one scale per sequence of L rows.
  const std::int64_t rows = rows_per_scale(inputs_, L);
  kernels::Int8Rows a = kernels::quantize_int8_rows(x.reshape({B * L, in_}), rows);
  at::Tensor y = kernels::int8_gemm(a.q, int8_->q, kernels::scales_per_row(a, rows), int8_->scales, bias_);
  return y.reshape({B, L, out_});
}

}  // namespace qeval
