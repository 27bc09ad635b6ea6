// The cuBLAS handle for the current thread and GPU (included only by x_cuda.cc files).
//
// One handle per (host thread, device), created on first use and destroyed when the thread
// exits: creating a handle costs milliseconds and allocates cuBLAS's workspace, so never per
// call; and a handle is never shared between threads, so two threads can queue GEMMs (and set
// streams) without a lock.
#pragma once

#include <cublas_v2.h>

#include <string_view>

#include "common/status.h"

namespace framezip::engine::ops {

// The calling thread's handle for the current CUDA device, bound to framezip's stream of it.
StatusOr<cublasHandle_t> CublasHandleForCurrentDevice();

// OK for CUBLAS_STATUS_SUCCESS; RESOURCE_EXHAUSTED for an allocation failure; INTERNAL otherwise.
Status CublasStatus(cublasStatus_t status, std::string_view what);

}  // namespace framezip::engine::ops
