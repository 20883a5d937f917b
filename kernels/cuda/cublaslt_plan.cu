// Plan cache behind kernels/cuda/cublaslt_plan.cuh: one cuBLASLt handle per device, one
// workspace per (device, stream), one plan (descriptor + layouts + algorithm) per key.
// Handles, workspaces and plans live until the process ends: destroying them from static
// destructors can run after the CUDA runtime has shut down.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cublaslt_plan.cuh"

namespace qeval::kernels::cuda::detail {

bool LtGemmKey::operator==(const LtGemmKey& o) const {
  return device == o.device && m == o.m && n == o.n && k == o.k && ab_type == o.ab_type && c_type == o.c_type &&
         compute == o.compute && scale_type == o.scale_type && align_x == o.align_x && align_w == o.align_w &&
         align_y == o.align_y;
}

namespace {

// 32 MiB: NVIDIA's recommended cuBLASLt workspace on Hopper; most int8 algorithms need none.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

struct KeyHash {
  std::size_t operator()(const LtGemmKey& k) const {
    std::size_t h = 0;
    auto mix = [&h](std::uint64_t v) { h ^= std::hash<std::uint64_t>{}(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    mix(static_cast<std::uint64_t>(k.device));
    mix(static_cast<std::uint64_t>(k.m));
    mix(static_cast<std::uint64_t>(k.n));
    mix(static_cast<std::uint64_t>(k.k));
    mix(static_cast<std::uint64_t>(k.ab_type) << 32 | static_cast<std::uint64_t>(k.c_type));
    mix(static_cast<std::uint64_t>(k.compute) << 32 | static_cast<std::uint64_t>(k.scale_type));
    mix(static_cast<std::uint64_t>(k.align_x) << 40 | static_cast<std::uint64_t>(k.align_w) << 20 | k.align_y);
    return h;
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
};

struct Cache {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, Stream>, void*> workspaces;
  std::unordered_map<LtGemmKey, std::unique_ptr<Plan>, KeyHash> plans;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed, see the file comment
  return *c;
}

std::string describe(const LtGemmKey& key) {
  return "x [" + std::to_string(key.m) + ", " + std::to_string(key.k) + "] · w [" + std::to_string(key.n) + ", " +
         std::to_string(key.k) + "]ᵀ, ab type " + std::to_string(key.ab_type) + ", c type " +
         std::to_string(key.c_type) + ", alignment x/w/y " + std::to_string(key.align_x) + "/" +
         std::to_string(key.align_w) + "/" + std::to_string(key.align_y) + " bytes";
}

std::unique_ptr<Plan> build_plan(cublasLtHandle_t handle, const LtGemmKey& key) {
  auto plan = std::make_unique<Plan>();
  const auto M = static_cast<std::uint64_t>(key.m), N = static_cast<std::uint64_t>(key.n),
             K = static_cast<std::uint64_t>(key.k);
  QEVAL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, key.compute, key.scale_type));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  QEVAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
  QEVAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
  QEVAL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, key.ab_type, K, N, static_cast<std::int64_t>(K)));
  QEVAL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, key.ab_type, K, M, static_cast<std::int64_t>(K)));
  QEVAL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, key.c_type, N, M, static_cast<std::int64_t>(N)));

  cublasLtMatmulPreference_t pref = nullptr;
  QEVAL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::uint64_t max_ws = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &max_ws, sizeof max_ws);
  // cuBLASLt's A is w, B is x, C and D are y (see the header).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y}};
  for (const auto& [attr, value] : aligns)
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result,
                                            &found);
  cublasLtMatmulPreferenceDestroy(pref);
  QEVAL_CUBLAS_CHECK(status);
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)
    throw CudaError("cuBLASLt: no algorithm for " + describe(key) +
                    " (int8 IMMA needs K and N multiples of 4 and 4-byte aligned pointers)");
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  return plan;
}

}  // namespace

std::uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

void lt_matmul(const LtGemmKey& key, const void* alpha, const void* x, const void* w, const void* beta, void* y,
               Stream stream) {
  Cache& c = cache();
  cublasLtHandle_t handle = nullptr;
  const Plan* plan = nullptr;
  void* workspace = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto h = c.handles.find(key.device);
    if (h == c.handles.end()) {
      cublasLtHandle_t created = nullptr;
      QEVAL_CUBLAS_CHECK(cublasLtCreate(&created));
      h = c.handles.emplace(key.device, created).first;
    }
    handle = h->second;
    auto p = c.plans.find(key);
    if (p == c.plans.end()) p = c.plans.emplace(key, build_plan(handle, key)).first;
    plan = p->second.get();
    if (plan->workspace_bytes > 0) {
      auto ws = c.workspaces.find({key.device, stream});
      if (ws == c.workspaces.end()) {
        void* buffer = nullptr;
        QEVAL_CUDA_CHECK(cudaMalloc(&buffer, kWorkspaceBytes));
        ws = c.workspaces.emplace(std::make_pair(key.device, stream), buffer).first;
      }
      workspace = ws->second;
    }
  }
  // Plans are immutable once built, so the call itself runs outside the lock.
  QEVAL_CUBLAS_CHECK(cublasLtMatmul(handle, plan->desc, alpha, w, plan->a, x, plan->b, beta, y, plan->c, y, plan->c,
                                    &plan->algo, workspace, plan->workspace_bytes, stream));
}

std::size_t lt_plan_count() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.plans.size();
}

}  // namespace qeval::kernels::cuda::detail
