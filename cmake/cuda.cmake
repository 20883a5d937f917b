# CUDA kernels (kernels/cuda/) use raw pointers and streams only, so they build with any
# CUDA toolkit, with or without a CUDA LibTorch. QEVAL_WITH_CUDA=auto builds them when nvcc
# is found; the tensor adapter that hands them LibTorch tensors needs a CUDA LibTorch too.
#
# qeval_cuda_kernels always exists and qeval_kernels always links it. Without nvcc it holds
# kernels/cuda/no_cuda.cpp instead of the .cu files: the same entry points, a device count of 0
# and CudaError from everything else, so the CUDA tests build everywhere and report skipped.
set(QEVAL_CUDA_ENABLED OFF)
set(QEVAL_TORCH_HAS_CUDA OFF)
if(NOT QEVAL_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(QEVAL_CUDA_ENABLED ON)
  elseif(QEVAL_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QEVAL_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
if(QEVAL_CUDA_ENABLED)
  # Hopper only by default: CI compiles on 2 cores, and every extra architecture is another full
  # device compile of every kernel. The mma.sync kernels need sm_80 or newer. "90" embeds sm_90
  # machine code and compute_90 PTX, which newer GPUs can JIT.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  file(GLOB cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
  if(cuda_srcs)
    add_library(qeval_cuda_kernels STATIC ${cuda_srcs} ${CMAKE_SOURCE_DIR}/kernels/cuda/limits.cpp)
    target_include_directories(qeval_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR})
    # The static runtime keeps our CUDA calls on this toolkit's cudart even when a PyTorch with
    # another CUDA version has loaded its own libcudart into the process.
    target_link_libraries(qeval_cuda_kernels PUBLIC CUDA::cudart_static CUDA::cublasLt)
    target_compile_options(qeval_cuda_kernels PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
      $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
    set_target_properties(qeval_cuda_kernels PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    include(${CMAKE_SOURCE_DIR}/cmake/cutlass.cmake)
  else()
    set(QEVAL_CUDA_ENABLED OFF)
  endif()
  if(QEVAL_CUDA_ENABLED AND (TORCH_CUDA_LIBRARIES OR TARGET torch_cuda))
    set(QEVAL_TORCH_HAS_CUDA ON)
    # The tensor adapter: at::Tensor in, raw pointers and the current stream out.
    target_sources(qeval_cuda_kernels PRIVATE ${CMAKE_SOURCE_DIR}/kernels/cuda/adapter_torch.cpp)
    target_link_libraries(qeval_cuda_kernels PUBLIC ${TORCH_LIBRARIES})
    target_compile_definitions(qeval_cuda_kernels PUBLIC QEVAL_TORCH_HAS_CUDA=1)
  endif()
endif()
if(NOT QEVAL_CUDA_ENABLED)
  add_library(qeval_cuda_kernels STATIC ${CMAKE_SOURCE_DIR}/kernels/cuda/no_cuda.cpp
                                        ${CMAKE_SOURCE_DIR}/kernels/cuda/limits.cpp)
  target_include_directories(qeval_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR})
  target_compile_options(qeval_cuda_kernels PRIVATE -Wall -Wextra -Wno-unused-parameter)
endif()
if(NOT DEFINED QEVAL_CUTLASS_ENABLED)
  set(QEVAL_CUTLASS_ENABLED OFF)
endif()
message(STATUS "qeval: CUDA kernels ${QEVAL_CUDA_ENABLED}, CUTLASS sm90 kernels ${QEVAL_CUTLASS_ENABLED}, "
               "CUDA LibTorch ${QEVAL_TORCH_HAS_CUDA}")

