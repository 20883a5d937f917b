#include "kernels/cpu/onednn_matmul.h"

#include <map>
#include <mutex>
#include <tuple>

namespace qeval::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// Bounded so an evaluation with many distinct window lengths cannot grow it without limit.
constexpr std::size_t kMaxCachedPrimitives = 512;

}  // namespace

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::shared_ptr<const OnednnMatmul> onednn_matmul(dt src_type, dt weights_type, std::int64_t M, std::int64_t K,
                                                  std::int64_t N, bool with_bias) {
  static std::mutex mutex;
  using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, bool>;
  static std::map<Key, std::shared_ptr<const OnednnMatmul>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const Key key{static_cast<int>(src_type), static_cast<int>(weights_type), M, K, N, with_bias};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  auto made = std::make_shared<OnednnMatmul>();
  OnednnMatmul& p = *made;
  p.src = dnnl::memory::desc({M, K}, src_type, tag::ab);
  p.weights = dnnl::memory::desc({K, N}, weights_type, tag::ba);
  p.dst = dnnl::memory::desc({M, N}, dt::f32, tag::ab);
  if (with_bias) p.bias = dnnl::memory::desc({1, N}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(with_bias ? dnnl::matmul::desc(p.src, p.weights, p.bias, p.dst)
                                            : dnnl::matmul::desc(p.src, p.weights, p.dst),
                                  onednn_engine());
  p.impl = pd.impl_info_str();
  p.matmul = dnnl::matmul(pd);
  cache.emplace(key, made);
  return made;
}

std::shared_ptr<const OnednnMatmul> onednn_batched_matmul(std::int64_t batch, std::int64_t M, std::int64_t K,
                                                          std::int64_t N, const std::array<std::int64_t, 3>& a_strides,
                                                          const std::array<std::int64_t, 3>& b_strides, float alpha) {
  static std::mutex mutex;
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::array<std::int64_t, 3>,
                         std::array<std::int64_t, 3>, float>;
  static std::map<Key, std::shared_ptr<const OnednnMatmul>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const Key key{batch, M, K, N, a_strides, b_strides, alpha};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  auto made = std::make_shared<OnednnMatmul>();
  OnednnMatmul& p = *made;
  auto strides = [](const std::array<std::int64_t, 3>& s) { return dnnl::memory::dims{s[0], s[1], s[2]}; };
  p.src = dnnl::memory::desc({batch, M, K}, dt::f32, strides(a_strides));
  p.weights = dnnl::memory::desc({batch, K, N}, dt::f32, strides(b_strides));
  p.dst = dnnl::memory::desc({batch, M, N}, dt::f32, tag::abc);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, p.weights, p.dst), attr, onednn_engine());
  p.impl = pd.impl_info_str();
  p.matmul = dnnl::matmul(pd);
  cache.emplace(key, made);
  return made;
}

void run_onednn_matmul(const OnednnMatmul& p, const void* a, const void* b, const void* bias, void* dst) {
  dnnl::engine& engine = onednn_engine();
  // oneDNN's memory objects take non-const handles; it never writes to the inputs.
  dnnl::memory src(p.src, engine, const_cast<void*>(a));
  dnnl::memory weights(p.weights, engine, const_cast<void*>(b));
  dnnl::memory out(p.dst, engine, dst);
  dnnl::stream stream(engine);
  if (bias != nullptr) {
    dnnl::memory bias_memory(p.bias, engine, const_cast<void*>(bias));
    p.matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias_memory}, {DNNL_ARG_DST, out}});
  } else {
    p.matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, out}});
  }
  stream.wait();
}

}  // namespace qeval::kernels::cpu
