// File: kernels/testing/cuda_bench_check.h — CK(call): the standalone CUDA
// benches' check of a CUDA runtime call (built by nvcc alone, scripts/gpu/):
// on failure it prints the call, where, and CUDA's message, and exits 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
