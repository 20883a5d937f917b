// How many CPU threads a command computes with. at::set_num_threads sizes LibTorch's own pool
// (and oneDNN's, which runs on it), but not the BLAS library LibTorch calls for float matmul:
// Debian's OpenBLAS (the pthreads build, scripts/setup) keeps its own pool of one thread per
// core. Without this, `qeval train --threads 1` still ran every sgemm on two threads, and two
// "one-thread" runs side by side fought over two cores (d 256 on an AVX2 EPYC: about 2.2k tokens/s
// a run instead of 2.7k).
#pragma once

#include <optional>

namespace qeval::kernels {

// Sets LibTorch's intra-op threads and, when the BLAS in this process is OpenBLAS, its threads.
// For training (`qeval train --threads`), whose results are reproducible per thread count. The
// evaluator sets only LibTorch's: OpenBLAS's bits depend on its thread count, and evaluation
// results must not depend on --threads (cli/eval_setup.cpp).
void set_compute_threads(int threads);

// OpenBLAS's current thread count; nullopt when the process's BLAS is not OpenBLAS.
std::optional<int> blas_threads();

}  // namespace qeval::kernels
