# The fused int8 GEMM for Hopper (kernels/cuda/sm90/) is built on CUTLASS 3.x/4.x headers when
# they are found; without them the int8 linear runs cuBLASLt + the separate epilogue kernel and
# everything else is unchanged. Included by cmake/cuda.cmake once the CUDA kernels are on.
#
#   QEVAL_WITH_CUTLASS  auto (default) | ON | OFF
#   QEVAL_CUTLASS_DIR   a folder holding include/cutlass/cutlass.h and
#                       tools/util/include/cutlass/util/packed_stride.hpp (a CUTLASS checkout, the
#                       pip wheel's cutlass_library/source, or .gpu-bundle/cutlass); empty: look in
#                       .gpu-bundle/cutlass, then in python3's nvidia-cutlass wheel (scripts/setup
#                       installs it: `pip install --no-deps nvidia-cutlass==4.2.0.0`).
#
# wgmma (Hopper's warpgroup MMA) exists only in the sm_90a target, so these files get
# -gencode=arch=compute_90a,code=sm_90a and no CMAKE_CUDA_ARCHITECTURES flags of their own (an
# OBJECT library with CUDA_ARCHITECTURES OFF): sm_90a code runs on compute capability 9.0 only,
# and the dispatcher checks the device before using it.
set(QEVAL_WITH_CUTLASS "auto" CACHE STRING "Build the CUTLASS sm90 int8 kernels: auto | ON | OFF")
set(QEVAL_CUTLASS_DIR "" CACHE PATH "CUTLASS source folder (include/ and tools/util/include/ below it)")
set(QEVAL_CUTLASS_ENABLED OFF)

function(qeval_cutlass_usable dir out)
  if(dir AND EXISTS "${dir}/include/cutlass/cutlass.h" AND
     EXISTS "${dir}/tools/util/include/cutlass/util/packed_stride.hpp")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

if(NOT QEVAL_WITH_CUTLASS STREQUAL "OFF")
  set(cutlass_dir "${QEVAL_CUTLASS_DIR}")
  if(NOT cutlass_dir)
    qeval_cutlass_usable("${CMAKE_SOURCE_DIR}/.gpu-bundle/cutlass" bundled)
    if(bundled)
      set(cutlass_dir "${CMAKE_SOURCE_DIR}/.gpu-bundle/cutlass")
    else()
      # find_spec locates the wheel without importing it (its __init__ wants its Python deps).
      find_package(Python3 COMPONENTS Interpreter QUIET)
      if(Python3_Interpreter_FOUND)
        execute_process(
          COMMAND ${Python3_EXECUTABLE} -c
            "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(os.path.dirname(s.origin), 'source') if s else '')"
          OUTPUT_VARIABLE cutlass_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      endif()
    endif()
  endif()
  qeval_cutlass_usable("${cutlass_dir}" usable)
  # sm_90a needs nvcc 12.0 or newer.
  if(usable AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(QEVAL_CUTLASS_ENABLED ON)
  elseif(QEVAL_WITH_CUTLASS STREQUAL "ON")
    message(FATAL_ERROR "QEVAL_WITH_CUTLASS=ON but no usable CUTLASS (QEVAL_CUTLASS_DIR='${QEVAL_CUTLASS_DIR}', "
                        "found '${cutlass_dir}') or nvcc older than 12.0")
  endif()
endif()

if(QEVAL_CUTLASS_ENABLED)
  file(GLOB sm90_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/sm90/*.cu)
  add_library(qeval_cuda_sm90 OBJECT ${sm90_srcs})
  target_include_directories(qeval_cuda_sm90 PRIVATE ${CMAKE_SOURCE_DIR})
  target_include_directories(qeval_cuda_sm90 SYSTEM PRIVATE "${cutlass_dir}/include"
                                                            "${cutlass_dir}/tools/util/include")
  set_target_properties(qeval_cuda_sm90 PROPERTIES CUDA_ARCHITECTURES OFF CUDA_SEPARABLE_COMPILATION OFF
                                                   POSITION_INDEPENDENT_CODE ON)
  # NDEBUG always: CUTLASS's device asserts are function calls, and a call inside the mainloop
  # makes ptxas serialise every wgmma (warning C7510), whatever the build type.
  # (The 128×256 files define CUTLASS_ENABLE_GDC_FOR_SM90 themselves, for programmatic dependent
  # launch; CUTLASS 4.2's stream-K scheduler does not compile with it.)
  target_compile_options(qeval_cuda_sm90 PRIVATE -gencode=arch=compute_90a,code=sm_90a
                         --expt-relaxed-constexpr -DNDEBUG -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter)
  target_link_libraries(qeval_cuda_sm90 PRIVATE CUDA::cudart_static)
  # Each CUTLASS file takes ~100 s of one core and ~3.8 GB of memory (nvcc 13.0, measured): with
  # Ninja they compile QEVAL_CUTLASS_JOBS at a time (default 1) while other files use the other
  # cores, so a 2-core CI machine never holds two of them in memory at once.
  set(QEVAL_CUTLASS_JOBS 1 CACHE STRING "CUTLASS files compiled at once (Ninja job pool)")
  set_property(GLOBAL APPEND PROPERTY JOB_POOLS qeval_cutlass_pool=${QEVAL_CUTLASS_JOBS})
  set_target_properties(qeval_cuda_sm90 PROPERTIES JOB_POOL_COMPILE qeval_cutlass_pool)
  target_sources(qeval_cuda_kernels PRIVATE $<TARGET_OBJECTS:qeval_cuda_sm90>)
  target_compile_definitions(qeval_cuda_kernels PRIVATE QEVAL_WITH_CUTLASS=1)
  message(STATUS "qeval: CUTLASS from ${cutlass_dir}")
endif()
