# Sanitizer and fuzzing builds (issue 8). Included before any target is made, so every
# library, test and tool of ours is instrumented; LibTorch and the other system libraries are
# not (they come prebuilt), which ASan and UBSan tolerate.
#
#   QEVAL_SANITIZE=address,undefined   ASan + UBSan; UBSan findings abort (-fno-sanitize-recover)
#   QEVAL_FUZZ=ON                      libFuzzer targets in fuzz/ (needs clang; implies the
#                                      fuzzer's coverage instrumentation on every library)
set(QEVAL_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list, e.g. address,undefined (empty: none)")
option(QEVAL_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(QEVAL_SANITIZE)
  # vptr checks need RTTI from every library a pointer passes through; LibTorch's is not
  # instrumented, so they would report its own classes. Everything else UBSan has stays on.
  set(_qeval_san_flags -fsanitize=${QEVAL_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  if(QEVAL_SANITIZE MATCHES "undefined")
    list(APPEND _qeval_san_flags -fno-sanitize=vptr)
  endif()
  # C and C++ only: nvcc (kernels/cuda) would not understand the flags.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_qeval_san_flags}>")
  add_link_options(-fsanitize=${QEVAL_SANITIZE})
  message(STATUS "qeval: sanitizers ${QEVAL_SANITIZE}")
endif()

if(QEVAL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "QEVAL_FUZZ=ON needs clang (libFuzzer); configure with -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 or the 'fuzz' preset")
  endif()
  # Coverage feedback for our libraries; fuzz/ links the fuzzer's main itself.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()
