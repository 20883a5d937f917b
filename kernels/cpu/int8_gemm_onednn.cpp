// int8 GEMM through oneDNN's matmul primitive: a [M, K] s8 × b [N, K] s8 → [M, N] f32, the
// int32 accumulator rounded once to float32 (oneDNN converts through f32 in any case).
// b is handed to oneDNN as a [K, N] matrix in `ba` order (its nn.Linear rows are the columns),
// so no copy is made. oneDNN picks its fastest implementation for the CPU (AMX-int8 or
// AVX-512 VNNI brgemm on Sapphire Rapids); building a primitive costs far more than a small
// GEMM, so primitives are cached by shape. oneDNN runs on its own OpenMP threads.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cpu/int8_gemm_cpu.h"

namespace qeval::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc src, weights, dst;
  std::string impl;  // oneDNN's name for the implementation it chose ("brg:avx512_core_amx", ...)
};

// Bounded so an evaluation with many distinct window lengths cannot grow it without limit.
constexpr std::size_t kMaxCachedPrimitives = 256;

// Shared so a primitive stays alive for a caller even if another thread clears the cache.
std::shared_ptr<const Primitive> primitive_for(std::int64_t M, std::int64_t K, std::int64_t N) {
  static std::mutex mutex;
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::shared_ptr<const Primitive>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_tuple(M, K, N);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  auto made = std::make_shared<Primitive>();
  Primitive& p = *made;
  p.src = dnnl::memory::desc({M, K}, dt::s8, tag::ab);
  p.weights = dnnl::memory::desc({K, N}, dt::s8, tag::ba);
  p.dst = dnnl::memory::desc({M, N}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, p.weights, p.dst), cpu_engine());
  p.impl = pd.impl_info_str();
  p.matmul = dnnl::matmul(pd);
  cache.emplace(key, made);
  return made;
}

}  // namespace

at::Tensor int8_matmul_acc_onednn(const at::Tensor& a, const at::Tensor& b) {
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  at::Tensor acc = at::empty({M, N}, at::TensorOptions().dtype(at::kFloat));  // [M, N]
  if (M == 0 || N == 0) return acc;
  if (K == 0) return acc.zero_();
  std::shared_ptr<const Primitive> cached = primitive_for(M, K, N);
  const Primitive& p = *cached;
  dnnl::memory src(p.src, cpu_engine(), a.data_ptr());
  dnnl::memory weights(p.weights, cpu_engine(), b.data_ptr());
  dnnl::memory dst(p.dst, cpu_engine(), acc.data_ptr());
  dnnl::stream stream(cpu_engine());
  p.matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
  stream.wait();
  return acc;
}

std::string onednn_int8_impl(std::int64_t M, std::int64_t K, std::int64_t N) { return primitive_for(M, K, N)->impl; }

bool onednn_int8_available() {
  // oneDNN always has a reference implementation ("ref:any"); only a JIT one is worth dispatching to.
  static const bool available = [] {
    try {
      return primitive_for(16, 64, 16)->impl.rfind("ref", 0) != 0;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace qeval::kernels::cpu
