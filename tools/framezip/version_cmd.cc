#include <cstdio>

#include "engine/core/device.h"
#include "engine/ops/blas_core.h"
#include "engine/ops/cpu_isa.h"
#include "engine/ops/gemm_amx.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {

int RunVersion(const std::vector<std::string>& args) {
  FlagSet flags("framezip version", "Prints the version and the build's backends.");
  if (auto code = ParseOrExit(flags, args)) return *code;
  std::printf("framezip %s (CUDA backend: %s)\n", FRAMEZIP_VERSION,
              engine::BuiltWithCuda() ? "compiled" : "not compiled");
  // Chosen at run time (never -march=native): what this machine's CPU offers, and what the
  // engine's hand-written kernels dispatch to on it.
  std::printf("CPU ISA: %s; kernels: %s\n",
              engine::ops::cpu::IsaFeatures(engine::ops::cpu::DetectedIsa()).c_str(),
              engine::ops::cpu::KernelIsa().c_str());
  std::printf("BLAS: OpenBLAS, %s kernels\n", engine::ops::cpu::BlasCoreName().c_str());
  // Linear's many-row GEMM for bf16 weights: AMX tiles (x rounded to bf16) or f32 sgemm.
  std::printf("bf16 GEMM: %s\n", engine::ops::cpu::Bf16GemmPath().c_str());
  return 0;
}

int RunDevices(const std::vector<std::string>& args) {
  bool json = false;
  FlagSet flags("framezip devices", "Lists the devices the engine can run on.");
  flags.Bool("json", &json, "print one JSON object");
  if (auto code = ParseOrExit(flags, args)) return *code;
  const auto devices = engine::AvailableDevices();
  if (json) {
    std::printf("{\"cuda_built\": %s, \"cuda_devices\": %d, \"devices\": [",
                engine::BuiltWithCuda() ? "true" : "false", engine::CudaDeviceCount());
    for (size_t i = 0; i < devices.size(); ++i) {
      std::printf("%s\"%s\"", i ? ", " : "", engine::DeviceName(devices[i]).c_str());
    }
    std::printf("]}\n");
    return 0;
  }
  for (const auto& d : devices) std::printf("%s\n", engine::DeviceName(d).c_str());
  if (engine::CudaDeviceCount() == 0) {
    std::printf("(no GPU: %s)\n", engine::CudaUnavailableReason().c_str());
  }
  return 0;
}

}  // namespace framezip::cli
