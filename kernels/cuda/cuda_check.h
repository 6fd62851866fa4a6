// Error checks for CUDA runtime calls. A failing CUDA call leaves the device context unusable,
// so the rank logs where it happened and exits; the coordinator sees the worker die and fails
// the request (docs/design.md §1) rather than serving from a broken context.
#pragma once

#include <cuda_runtime.h>

#include "glog/logging.h"

#define Q38_CUDA_CHECK(expr)                                                                   \
  do {                                                                                         \
    const cudaError_t q38_err = (expr);                                                        \
    LOG_IF(FATAL, q38_err != cudaSuccess) << #expr << ": " << cudaGetErrorString(q38_err);     \
  } while (0)

// After a kernel launch: reports a bad launch configuration at the call site.
#define Q38_CUDA_LAUNCHED() Q38_CUDA_CHECK(cudaGetLastError())
