#include "quant/kv_cache.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/types.h"
#include "quant/kv_cache_tensor.h"
#include "quant/formats/minifloat.h"

namespace qeval {
namespace {

float kv_row_absmax(const float* x, std::int64_t n) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// quant/quantize.h's int8 absmax on one row.
void int8_row(const float* x, float* y, std::int64_t n) {
  const float amax = kv_row_absmax(x, n);
  const float s = amax == 0.0f ? 1.0f : amax / 127.0f;
  // + 0 turns a −0 code into +0, as the reference's int8 codes do.
  for (std::int64_t i = 0; i < n; ++i) y[i] = (std::clamp(std::nearbyint(x[i] / s), -127.0f, 127.0f) + 0.0f) * s;
}

// quant/quantize.h's 4-bit zero-point on one group (constant groups exact).
void int4_group(const float* x, float* y, std::int64_t n) {
  float mn = x[0], mx = x[0];
  for (std::int64_t i = 1; i < n; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  float s, z;
  if (mx == mn) {
    s = mn == 0.0f ? 1.0f : std::fabs(mn);
    z = mn < 0.0f ? 1.0f : 0.0f;
  } else {
    s = (mx - mn) / 15.0f;
    z = std::nearbyint(-mn / s) + 0.0f;
  }
  for (std::int64_t i = 0; i < n; ++i) y[i] = (std::clamp(std::nearbyint(x[i] / s) + z, 0.0f, 15.0f) - z) * s;
}

template <typename BlockT>
void ggml_row(const float* x, float* y, std::int64_t n, void (*quantize)(const float*, void*, std::int64_t),
              void (*dequantize)(const void*, float*, std::int64_t)) {
  BlockT blocks[64];  // head_dim ≤ 2048
  QEVAL_CHECK(n % kKvGgmlBlock == 0 && n / kKvGgmlBlock <= 64, "kv_cache: a row of {} values is not whole blocks of 32 "
              "(at most 2048 values)", n);
  quantize(x, blocks, n);
  dequantize(blocks, y, n);
}

}  // namespace

void kv_round_trip_row(const KvCacheSpec& spec, const float* x, float* y, std::int64_t n) {
  switch (spec.format) {
    case KvCacheFormat::none:
      if (y != x) std::copy(x, x + n, y);
      return;
    case KvCacheFormat::int8: int8_row(x, y, n); return;
    case KvCacheFormat::fp8_e4m3: {
      const float amax = kv_row_absmax(x, n);
      const ElementFormat& f = element_format(ElementType::e4m3);
      element_round_trip(x, y, n, amax == 0.0f ? 1.0f : amax / f.max_finite, f);
      return;
    }
    case KvCacheFormat::q8_0: ggml_row<block_q8_0>(x, y, n, quantize_row_q8_0, dequantize_row_q8_0); return;
    case KvCacheFormat::q4_0: ggml_row<block_q4_0>(x, y, n, quantize_row_q4_0, dequantize_row_q4_0); return;
    case KvCacheFormat::int4:
      for (std::int64_t g0 = 0; g0 < n; g0 += spec.group_size)
        int4_group(x + g0, y + g0, std::min(spec.group_size, n - g0));
      return;
  }
}

void hadamard_blocks(float* x, std::int64_t n, std::int64_t b) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(b));  // ggml_gen_hadamard's 1/sqrtf(n)
  for (std::int64_t b0 = 0; b0 < n; b0 += b) {
    float* v = x + b0;
    for (std::int64_t h = 1; h < b; h *= 2)
      for (std::int64_t i = 0; i < b; i += 2 * h)
        for (std::int64_t j = i; j < i + h; ++j) {
          const float a = v[j], c = v[j + h];
          v[j] = a + c, v[j + h] = a - c;
        }
    for (std::int64_t i = 0; i < b; ++i) v[i] *= norm;
  }
}

namespace {

// One row in the spec's basis: rotated (rotation_block > 0), quantised, rotated back.
void kv_row(const KvCacheSpec& spec, const float* x, float* y, std::int64_t n, std::int64_t rotation_block,
            std::vector<float>& scratch) {
  if (rotation_block == 0) return kv_round_trip_row(spec, x, y, n);
  scratch.assign(x, x + n);
  hadamard_blocks(scratch.data(), n, rotation_block);
  kv_round_trip_row(spec, scratch.data(), y, n);
  hadamard_blocks(y, n, rotation_block);
}

std::int64_t rotation_block_for(const KvCacheSpec& spec, std::int64_t head_dim, bool is_key) {
  return spec.rotation == KvCacheRotation::hadamard ? kv_rotation_block(head_dim, is_key) : 0;
}

}  // namespace

at::Tensor kv_round_trip_rows(const at::Tensor& x, const KvCacheSpec& spec, bool is_key) {
  QEVAL_CHECK(x.scalar_type() == at::kFloat && x.device().is_cpu() && x.dim() >= 1,
              "kv_round_trip_rows: expected float32 CPU values [..., hd]");
  at::Tensor in = x.contiguous(), out = at::empty_like(in);
  const std::int64_t n = in.size(-1), rows = n > 0 ? in.numel() / n : 0;
  const std::int64_t block = rows > 0 ? rotation_block_for(spec, n, is_key) : 0;
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, 64, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> scratch;
    for (std::int64_t r = b; r < e; ++r) kv_row(spec, src + r * n, dst + r * n, n, block, scratch);
  });
  return out;
}

void check_kv_cache_fits(const KvCacheSpec& spec, const ModelConfig& config, const std::string& model,
                         const std::string& scheme) {
  if (!spec.enabled()) return;
  std::int64_t first = -1;
  for (std::int64_t l = 0; l < config.n_layers && first < 0; ++l)
    if (config.mixer(l) == MixerKind::attention) first = l;
  QEVAL_CHECK(first >= 0, "scheme {}: kv_cache (format {}) quantises the key/value cache of attention layers, but model "
              "{} has none (its {} layers are all state-space mixers); use a scheme without kv_cache",
              scheme, to_string(spec.format), model, config.n_layers);
  const std::int64_t hd = config.head_dim();
  QEVAL_CHECK(!((spec.format == KvCacheFormat::q8_0 || spec.format == KvCacheFormat::q4_0) && hd % kKvGgmlBlock != 0),
              "scheme {}: kv_cache.format {} quantises blocks of 32 along head_dim, but layer {} (layers.{}.attn) of "
              "model {} has head_dim {}, not a multiple of 32 (llama.cpp refuses such a cache too); use int8, "
              "fp8-e4m3 or int4", scheme, to_string(spec.format), first, first, model, hd);
  QEVAL_CHECK(spec.rotation == KvCacheRotation::none || hd % 64 == 0,
              "scheme {}: kv_cache.rotation hadamard rotates blocks of 64 or more along head_dim, but layer {} "
              "(layers.{}.attn) of model {} has head_dim {}, not a multiple of 64 (llama.cpp does not rotate such a "
              "cache either); drop \"rotation\"", scheme, first, first, model, hd);
}

QuantizedKvCache::QuantizedKvCache(KvCacheSpec spec) : spec_(spec) {
  QEVAL_CHECK(spec_.enabled() && spec_.group_size >= 1 && spec_.keep_first >= 0,
              "QuantizedKvCache: needs a format, group_size >= 1 and keep_first >= 0");
}

at::Tensor QuantizedKvCache::round_trip(std::int64_t layer, const at::Tensor& x, const char* what,
                                        std::vector<Window>& sums, int offset) const {
  QEVAL_CHECK(x.dim() == 4 && at::isFloatingType(x.scalar_type()),
              "kv_cache ({}): layer {}: {} is {} with {} dims; expected floating-point [windows, kv heads, positions, "
              "head_dim]", to_string(spec_.format), layer, what, c10::toString(x.scalar_type()), x.dim());
  if (x.scalar_type() == at::kFloat && x.device().is_cpu()) return round_trip_rows(x, sums, offset);
  return round_trip_tensor(x, sums, offset);
}

at::Tensor QuantizedKvCache::round_trip_rows(const at::Tensor& x, std::vector<Window>& sums, int offset) const {
  at::Tensor in = x.contiguous(), out = at::empty_like(in);
  const std::int64_t L = in.size(2), n = in.size(3), rows = in.numel() / std::max<std::int64_t>(n, 1);
  const std::int64_t rows_per_window = in.size(1) * L;
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const std::int64_t block = rotation_block_for(spec_, n, /*is_key=*/offset == 0);
  std::vector<double> err(static_cast<std::size_t>(rows)), norm(static_cast<std::size_t>(rows));
  at::parallel_for(0, rows, 16, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> scratch;
    for (std::int64_t r = b; r < e; ++r) {
      const float* xr = src + r * n;
      float* yr = dst + r * n;
      if (r % L < spec_.keep_first)
        std::copy(xr, xr + n, yr);
      else
        kv_row(spec_, xr, yr, n, block, scratch);
      double e2 = 0, x2 = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(xr[i]) - yr[i];
        e2 += d * d, x2 += static_cast<double>(xr[i]) * xr[i];
      }
      err[static_cast<std::size_t>(r)] = e2, norm[static_cast<std::size_t>(r)] = x2;
    }
  });
  // Each window's rows in row order, from zero: the window's sums whatever else shares its batch.
  for (std::int64_t r = 0; r < rows; ++r) {
    const int slot = offset + (r % L == 0 ? 0 : 1);
    Window& w = sums[static_cast<std::size_t>(r / std::max<std::int64_t>(rows_per_window, 1))];
    w.err[slot] += err[static_cast<std::size_t>(r)];
    w.norm[slot] += norm[static_cast<std::size_t>(r)];
  }
  return out;
}

at::Tensor QuantizedKvCache::round_trip_tensor(const at::Tensor& x, std::vector<Window>& sums, int offset) const {
  at::Tensor out = kv_round_trip_tensor(x, spec_, /*is_key=*/offset == 0);
  const std::int64_t L = x.size(2), kept = std::min(spec_.keep_first, L);
  if (kept > 0) out.narrow(2, 0, kept).copy_(x.narrow(2, 0, kept));
  if (L == 0) return out;
  // The error of what the attention reads, per window in float64 on the device (ATen's summation
  // order), brought to the host in one transfer: [4, B].
  const at::Tensor x64 = x.to(at::kDouble), d2 = (x64 - out.to(at::kDouble)).square(), x2 = x64.square();
  const std::vector<std::int64_t> dims = {1, 2, 3};
  const at::Tensor totals =
      at::stack({d2.narrow(2, 0, 1).sum(dims), x2.narrow(2, 0, 1).sum(dims), d2.narrow(2, 1, L - 1).sum(dims),
                 x2.narrow(2, 1, L - 1).sum(dims)})
          .cpu()
          .contiguous();
  const std::int64_t B = x.size(0);
  const double* t = totals.data_ptr<double>();
  for (std::int64_t b = 0; b < B; ++b) {
    Window& w = sums[static_cast<std::size_t>(b)];
    w.err[offset] += t[b], w.norm[offset] += t[B + b];
    w.err[offset + 1] += t[2 * B + b], w.norm[offset + 1] += t[3 * B + b];
  }
  return out;
}

void QuantizedKvCache::apply(std::int64_t layer, at::Tensor& k, at::Tensor& v) const {
  QEVAL_CHECK(k.dim() == 4 && v.dim() == 4 && k.size(0) == v.size(0),
              "kv_cache ({}): layer {}: K and V should be [windows, kv heads, positions, head_dim] with the same windows",
              to_string(spec_.format), layer);
  std::vector<Window> sums(static_cast<std::size_t>(k.size(0)));
  k = round_trip(layer, k, "K", sums, 0);
  v = round_trip(layer, v, "V", sums, 2);
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::int64_t, Window>& windows = sums_.layers[layer];
  for (std::size_t b = 0; b < sums.size(); ++b) {
    std::int64_t index;
    if (batch_windows_.empty()) {
      index = windows.empty() ? 0 : windows.rbegin()->first + 1;
    } else {
      QEVAL_CHECK(batch_windows_.size() == sums.size(), "kv_cache ({}): layer {}: a batch of {} windows, but {} were "
                  "announced (begin_windows)", to_string(spec_.format), layer, sums.size(), batch_windows_.size());
      index = batch_windows_[b];
    }
    QEVAL_CHECK(windows.emplace(index, sums[b]).second,
                "kv_cache ({}): layer {} quantised window {} twice; its error would count twice", to_string(spec_.format),
                layer, index);
  }
}

void QuantizedKvCache::begin_windows(std::vector<std::int64_t> windows) const {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_windows_ = std::move(windows);
}

void KvErrorSums::merge(const KvErrorSums& other, const std::string& source) {
  for (const auto& [layer, windows] : other.layers) {
    std::map<std::int64_t, Window>& into = layers[layer];
    for (const auto& [index, w] : windows)
      QEVAL_CHECK(into.emplace(index, w).second, "{}: the KV cache's error of layer {}, window {} is already counted",
                  source, layer, index);
  }
}

nlohmann::json kv_error_report(const KvErrorSums& sums, nlohmann::json head) {
  static const char* kNames[] = {"k_first", "k_rest", "v_first", "v_rest"};
  nlohmann::json layers = nlohmann::json::array(), mean = nlohmann::json::object();
  double total[4] = {0, 0, 0, 0};
  for (const auto& [layer, windows] : sums.layers) {
    KvErrorSums::Window s;
    for (const auto& [index, w] : windows)  // window order
      for (int i = 0; i < 4; ++i) s.err[i] += w.err[i], s.norm[i] += w.norm[i];
    nlohmann::json entry = {{"layer", layer}, {"windows", static_cast<std::int64_t>(windows.size())}};
    for (int i = 0; i < 4; ++i) {
      const double rel = s.norm[i] > 0 ? std::sqrt(s.err[i] / s.norm[i]) : 0.0;
      entry[kNames[i]] = rel;
      total[i] += rel;
    }
    layers.push_back(std::move(entry));
  }
  for (int i = 0; i < 4; ++i)
    mean[kNames[i]] =
        sums.layers.empty() ? nlohmann::json(nullptr) : nlohmann::json(total[i] / static_cast<double>(sums.layers.size()));
  head["layers"] = std::move(layers);
  head["mean"] = std::move(mean);
  return head;
}

nlohmann::json QuantizedKvCache::report_head() const {
  nlohmann::json head = {{"format", to_string(spec_.format)}, {"keep_first", spec_.keep_first}};
  if (spec_.rotation == KvCacheRotation::hadamard) head["rotation"] = "hadamard";  // errors in the original basis
  return head;
}

nlohmann::json QuantizedKvCache::error_report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kv_error_report(sums_, report_head());
}

KvErrorSums QuantizedKvCache::error_sums() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sums_;
}

void QuantizedKvCache::add_error_sums(const KvErrorSums& sums, const std::string& source) const {
  std::lock_guard<std::mutex> lock(mutex_);
  sums_.merge(sums, source);
}

void QuantizedKvCache::reset_errors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  sums_.layers.clear();
  batch_windows_.clear();
}

}  // namespace qeval
