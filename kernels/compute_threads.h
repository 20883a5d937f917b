// How many CPU threads a command computes with. at::set_num_threads sizes LibTorch's own pool
// (and oneDNN's, which runs on it), but not the BLAS library LibTorch calls for float matmul:
// Debian's OpenBLAS (the pthreads build, scripts/setup) keeps its own pool of one thread per
// core. Two pools of N threads each put 2N busy threads on N cores: `qeval eval --threads 2` on
// a 2-core AVX2 EPYC ran at half the speed of the default (issue 34), and two "one-thread"
// training runs side by side fought over two cores.
//
// Two policies, one per kind of command:
//   set_compute_threads(n)   training: LibTorch's pool and OpenBLAS's pool both n (OpenBLAS
//                            splits each GEMM itself; training results are reproducible per
//                            thread count, not across thread counts).
//   set_inference_threads(n) evaluation: LibTorch's pool n, OpenBLAS 1; the fp32 GEMMs that
//                            would have gone to a threaded BLAS are cut into pieces whose shapes
//                            depend only on the operands (kernels/fp32_gemm.cpp), and the pieces
//                            run on LibTorch's pool, one single-threaded BLAS call each. The
//                            same BLAS calls happen whatever n is, so results do not depend on
//                            it (OpenBLAS's own splitting changes bits with its thread count),
//                            and at most n threads are busy.
// LibTorch builds whose BLAS is MKL (PyPI's wheel, scripts/cuda-build) size MKL's pool with
// at::set_num_threads; there each piece runs under OneBlasThreadHere, MKL's thread-local count 1.
#pragma once

#include <optional>

namespace qeval::kernels {

// The cores this process may run on (sched_getaffinity; hardware_concurrency where that fails):
// the default for --threads.
int available_cores();

void set_compute_threads(int threads);
void set_inference_threads(int threads);

// Whether set_inference_threads is in force (fp32_gemm.cpp then splits BLAS calls itself).
bool inference_threading();

// OpenBLAS's current thread count; nullopt when the process's BLAS is not OpenBLAS.
std::optional<int> blas_threads();

// While alive, BLAS calls from this thread run on this thread alone: MKL's per-thread count
// (MKL_Set_Num_Threads_Local) is 1, restored on destruction. A no-op where the BLAS is not MKL
// (OpenBLAS's count is process-wide and set_inference_threads already made it 1). Why MKL needs
// it: at::set_num_threads sets MKL's count for the calling thread only and turns MKL's dynamic
// adjustment off, so a slice's sgemm on one of LibTorch's pool workers ran on MKL's default
// team (every core) and split its own work: 1 and 2 --threads gave different last bits on the
// H100 machine's 16-core Xeon (issue 34, 512 × 576 × 1536).
class OneBlasThreadHere {
 public:
  OneBlasThreadHere();
  ~OneBlasThreadHere();
  OneBlasThreadHere(const OneBlasThreadHere&) = delete;
  OneBlasThreadHere& operator=(const OneBlasThreadHere&) = delete;

 private:
  int previous_ = -1;  // MKL's earlier per-thread count (0: none set); -1: no MKL
};

}  // namespace qeval::kernels
