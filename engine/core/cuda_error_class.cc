#include "engine/core/cuda_error_class.h"

#include "engine/core/device_health.h"

namespace framezip::engine {

// The numbers are cudaError_t values (driver_types.h, CUDA 12/13); cuda_status_cuda.cc checks
// each against the toolkit. The sticky set is exactly the codes driver_types.h documents as
// "leaves the process in an inconsistent state", plus uncorrectable ECC/NVLink errors, device
// asserts and leaked tensor memory, after which the context is equally dead.
CudaErrorClass ClassifyCudaError(int code) {
  switch (code) {
    case 0:  // cudaSuccess
      return CudaErrorClass::kSuccess;
    case 2:  // cudaErrorMemoryAllocation
      return CudaErrorClass::kOutOfMemory;
    case 214:  // cudaErrorECCUncorrectable
    case 220:  // cudaErrorNvlinkUncorrectable
    case 226:  // cudaErrorContained
    case 700:  // cudaErrorIllegalAddress
    case 702:  // cudaErrorLaunchTimeout
    case 710:  // cudaErrorAssert
    case 714:  // cudaErrorHardwareStackError
    case 715:  // cudaErrorIllegalInstruction
    case 716:  // cudaErrorMisalignedAddress
    case 717:  // cudaErrorInvalidAddressSpace
    case 718:  // cudaErrorInvalidPc
    case 719:  // cudaErrorLaunchFailure
    case 721:  // cudaErrorTensorMemoryLeak
    case 911:  // cudaErrorExternalDevice
    case 999:  // cudaErrorUnknown
      return CudaErrorClass::kSticky;
    case 3:    // cudaErrorInitializationError
    case 35:   // cudaErrorInsufficientDriver
    case 46:   // cudaErrorDevicesUnavailable
    case 100:  // cudaErrorNoDevice
    case 127:  // cudaErrorStartupFailure
    case 802:  // cudaErrorSystemNotReady
    case 803:  // cudaErrorSystemDriverMismatch
    case 804:  // cudaErrorCompatNotSupportedOnDevice
      return CudaErrorClass::kDeviceUnavailable;
    default:
      return CudaErrorClass::kRequestError;
  }
}

std::string_view CudaErrorClassName(CudaErrorClass error_class) {
  switch (error_class) {
    case CudaErrorClass::kSuccess:
      return "success";
    case CudaErrorClass::kOutOfMemory:
      return "out of memory";
    case CudaErrorClass::kRequestError:
      return "request error";
    case CudaErrorClass::kSticky:
      return "sticky";
    case CudaErrorClass::kDeviceUnavailable:
      return "device unavailable";
  }
  return "?";
}

Status CudaErrorCodeToStatus(int code, std::string_view error_name, std::string_view what) {
  const CudaErrorClass error_class = ClassifyCudaError(code);
  switch (error_class) {
    case CudaErrorClass::kSuccess:
      return absl::OkStatus();
    case CudaErrorClass::kOutOfMemory:
      return ResourceExhaustedError("{}: GPU out of memory ({})", what, error_name);
    case CudaErrorClass::kRequestError:
      return InternalError("{}: CUDA error {} ({})", what, error_name, code);
    case CudaErrorClass::kSticky:
      MarkDeviceUnhealthy(fmt::format("{}: sticky CUDA error {} ({})", what, error_name, code));
      return InternalError("{}: CUDA error {} ({}); the GPU is unusable until the server restarts",
                           what, error_name, code);
    case CudaErrorClass::kDeviceUnavailable:
      MarkDeviceUnhealthy(fmt::format("{}: no usable GPU: {} ({})", what, error_name, code));
      return UnavailableError("{}: no usable GPU: {} ({})", what, error_name, code);
  }
  return InternalError("{}: unclassified CUDA error {}", what, code);
}

}  // namespace framezip::engine
