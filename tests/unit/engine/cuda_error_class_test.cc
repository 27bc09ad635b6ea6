// The CUDA error classification table and the process-wide health flag, without CUDA: the table
// works on cudaError_t's numeric values (cuda_status_cuda.cc pins them to the toolkit's enum).
#include "engine/core/cuda_error_class.h"

#include <catch2/catch.hpp>

#include "engine/core/device_health.h"

namespace framezip::engine {
namespace {

struct Row {
  int code;
  const char* name;
  CudaErrorClass want;
};

// cudaError_t values from CUDA 13's driver_types.h.
const Row kTable[] = {
    {0, "cudaSuccess", CudaErrorClass::kSuccess},
    {2, "cudaErrorMemoryAllocation", CudaErrorClass::kOutOfMemory},
    {1, "cudaErrorInvalidValue", CudaErrorClass::kRequestError},
    {9, "cudaErrorInvalidConfiguration", CudaErrorClass::kRequestError},
    {209, "cudaErrorNoKernelImageForDevice", CudaErrorClass::kRequestError},
    {400, "cudaErrorInvalidResourceHandle", CudaErrorClass::kRequestError},
    {600, "cudaErrorNotReady", CudaErrorClass::kRequestError},
    {701, "cudaErrorLaunchOutOfResources", CudaErrorClass::kRequestError},
    {801, "cudaErrorNotSupported", CudaErrorClass::kRequestError},
    {214, "cudaErrorECCUncorrectable", CudaErrorClass::kSticky},
    {220, "cudaErrorNvlinkUncorrectable", CudaErrorClass::kSticky},
    {226, "cudaErrorContained", CudaErrorClass::kSticky},
    {700, "cudaErrorIllegalAddress", CudaErrorClass::kSticky},
    {702, "cudaErrorLaunchTimeout", CudaErrorClass::kSticky},
    {710, "cudaErrorAssert", CudaErrorClass::kSticky},
    {714, "cudaErrorHardwareStackError", CudaErrorClass::kSticky},
    {715, "cudaErrorIllegalInstruction", CudaErrorClass::kSticky},
    {716, "cudaErrorMisalignedAddress", CudaErrorClass::kSticky},
    {717, "cudaErrorInvalidAddressSpace", CudaErrorClass::kSticky},
    {718, "cudaErrorInvalidPc", CudaErrorClass::kSticky},
    {719, "cudaErrorLaunchFailure", CudaErrorClass::kSticky},
    {721, "cudaErrorTensorMemoryLeak", CudaErrorClass::kSticky},
    {911, "cudaErrorExternalDevice", CudaErrorClass::kSticky},
    {999, "cudaErrorUnknown", CudaErrorClass::kSticky},
    {3, "cudaErrorInitializationError", CudaErrorClass::kDeviceUnavailable},
    {35, "cudaErrorInsufficientDriver", CudaErrorClass::kDeviceUnavailable},
    {46, "cudaErrorDevicesUnavailable", CudaErrorClass::kDeviceUnavailable},
    {100, "cudaErrorNoDevice", CudaErrorClass::kDeviceUnavailable},
    {127, "cudaErrorStartupFailure", CudaErrorClass::kDeviceUnavailable},
    {802, "cudaErrorSystemNotReady", CudaErrorClass::kDeviceUnavailable},
    {803, "cudaErrorSystemDriverMismatch", CudaErrorClass::kDeviceUnavailable},
    {804, "cudaErrorCompatNotSupportedOnDevice", CudaErrorClass::kDeviceUnavailable},
    {12345, "(a code this build does not know)", CudaErrorClass::kRequestError},
};

TEST_CASE("CUDA errors are classified as request, sticky or device-unavailable errors",
          "[unit][engine]") {
  for (const Row& row : kTable) {
    INFO(row.name << " (" << row.code << ")");
    CHECK(ClassifyCudaError(row.code) == row.want);
  }
}

TEST_CASE("CUDA errors become statuses, and only sticky or fatal ones mark the device unhealthy",
          "[unit][engine]") {
  for (const Row& row : kTable) {
    INFO(row.name << " (" << row.code << ")");
    ResetDeviceHealthForTesting();
    const Status status = CudaErrorCodeToStatus(row.code, row.name, "test op");
    switch (row.want) {
      case CudaErrorClass::kSuccess:
        CHECK(status.ok());
        CHECK(DeviceHealthy());
        break;
      case CudaErrorClass::kOutOfMemory:
        CHECK(status.code() == absl::StatusCode::kResourceExhausted);
        CHECK(DeviceHealthy());
        break;
      case CudaErrorClass::kRequestError:
        CHECK(status.code() == absl::StatusCode::kInternal);
        CHECK(DeviceHealthy());
        break;
      case CudaErrorClass::kSticky:
        CHECK(status.code() == absl::StatusCode::kInternal);
        CHECK_FALSE(DeviceHealthy());
        break;
      case CudaErrorClass::kDeviceUnavailable:
        CHECK(status.code() == absl::StatusCode::kUnavailable);
        CHECK_FALSE(DeviceHealthy());
        break;
    }
    if (!status.ok()) {
      CHECK(MessageOf(status).find("test op") != std::string::npos);
      CHECK(MessageOf(status).find(row.name) != std::string::npos);
    }
  }
  ResetDeviceHealthForTesting();
}

TEST_CASE("the device health flag keeps the first reason and never heals by itself",
          "[unit][engine]") {
  ResetDeviceHealthForTesting();
  CHECK(DeviceHealthy());
  CHECK(DeviceUnhealthyReason().empty());
  (void)CudaErrorCodeToStatus(700, "cudaErrorIllegalAddress", "paged attention");
  CHECK_FALSE(DeviceHealthy());
  (void)CudaErrorCodeToStatus(719, "cudaErrorLaunchFailure", "rms norm");
  (void)CudaErrorCodeToStatus(0, "cudaSuccess", "a later success");
  (void)CudaErrorCodeToStatus(2, "cudaErrorMemoryAllocation", "a later OOM");
  CHECK_FALSE(DeviceHealthy());
  CHECK(DeviceUnhealthyReason().find("paged attention") != std::string::npos);
  CHECK(DeviceUnhealthyReason().find("cudaErrorIllegalAddress") != std::string::npos);
  MarkDeviceUnhealthy("");  // a later, empty reason changes nothing
  CHECK(DeviceUnhealthyReason().find("paged attention") != std::string::npos);
  ResetDeviceHealthForTesting();
  MarkDeviceUnhealthy("");
  CHECK_FALSE(DeviceHealthy());  // even without a reason the flag flips
  CHECK_FALSE(DeviceUnhealthyReason().empty());
  ResetDeviceHealthForTesting();
  CHECK(CudaErrorClassName(CudaErrorClass::kSticky) == "sticky");
}

}  // namespace
}  // namespace framezip::engine
