// What a CUDA runtime error means for the server: fail this one request, or stop serving.
//
// The table works on the numeric value of cudaError_t (a stable ABI enum) so that it compiles and
// is unit-tested without the CUDA headers; cuda_status_cuda.cc static_asserts every number in it
// against the toolkit's driver_types.h, so a renumbering breaks the CUDA build, not production.
//
//   kOutOfMemory        cudaErrorMemoryAllocation: RESOURCE_EXHAUSTED for that request only.
//   kRequestError       a bad argument, unsupported configuration, missing kernel image, ...:
//                       INTERNAL for that request; the context is still usable.
//   kSticky             the context is corrupted (illegal address, launch failure, uncorrectable
//                       ECC/NVLink, device assert, ...): INTERNAL and the device is marked
//                       unhealthy (device_health.h), because every later CUDA call fails too.
//   kDeviceUnavailable  no usable device or driver at all (no device, driver too old, system not
//                       ready): UNAVAILABLE and the device is marked unhealthy.
//
// Codes not in the table are request errors, except cudaErrorUnknown, which is sticky: the
// runtime uses it when it cannot tell what went wrong, and serving on from an unknown state is
// the worse risk.
#pragma once

#include <string_view>

#include "common/status.h"

namespace framezip::engine {

enum class CudaErrorClass { kSuccess, kOutOfMemory, kRequestError, kSticky, kDeviceUnavailable };

// Classifies a cudaError_t by its numeric value. Pure; thread-safe.
CudaErrorClass ClassifyCudaError(int cuda_error_code);

// "success", "out of memory", "request error", "sticky", "device unavailable".
std::string_view CudaErrorClassName(CudaErrorClass error_class);

// Turns a CUDA error into the status for the caller and, for kSticky and kDeviceUnavailable,
// marks the device unhealthy. `error_name` is cudaGetErrorName()'s text, `what` names the
// operation ("cudaMalloc", "attention launch"). OK for cudaSuccess (0). The status message names
// the operation and the CUDA error, never pointers.
Status CudaErrorCodeToStatus(int cuda_error_code, std::string_view error_name,
                             std::string_view what);

}  // namespace framezip::engine
