#include "tools/bench/bench_report.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/ops/blas_core.h"
#include "engine/ops/cpu_isa.h"
#include "engine/ops/gemm_amx.h"

namespace framezip::bench {

Machine DetectMachine() {
  Machine m;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) m.cpu = line.substr(colon + 2);
      break;
    }
  }
  if (m.cpu.empty()) m.cpu = "unknown";
  const int gpus = engine::CudaDeviceCount();
  m.gpu = gpus == 0 ? "none" : fmt::format("{} CUDA device(s)", gpus);
  m.isa = engine::ops::cpu::IsaFeatures(engine::ops::cpu::DetectedIsa());
  m.kernels = engine::ops::cpu::KernelIsa();
  m.blas_core = engine::ops::cpu::BlasCoreName();
  m.bf16_gemm = engine::ops::cpu::Bf16GemmPath();
  return m;
}

void Report::Add(Result r) {
  std::string line = fmt::format("{}: {:.4g} {}", r.name, r.value, r.unit);
  if (r.target) {
    const bool ok = r.lower_is_better ? r.value <= *r.target : r.value >= *r.target;
    line += fmt::format(" (target {} {:.4g}: {})", r.lower_is_better ? "<=" : ">=", *r.target,
                        ok ? "ok" : "MISSED");
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  results_.push_back(std::move(r));
}

std::string Report::Json() const {
  nlohmann::json results = nlohmann::json::array();
  for (const Result& r : results_) {
    nlohmann::json j = {{"name", r.name}, {"value", r.value}, {"unit", r.unit}};
    if (r.target) {
      j["target"] = *r.target;
      j["ok"] = r.lower_is_better ? r.value <= *r.target : r.value >= *r.target;
    }
    results.push_back(j);
  }
  nlohmann::json out = {{"suite", suite_},
                        {"machine",
                         {{"cpu", machine_.cpu},
                          {"isa", machine_.isa},
                          {"kernels", machine_.kernels},
                          {"blas_core", machine_.blas_core},
                          {"bf16_gemm", machine_.bf16_gemm},
                          {"threads", machine_.threads},
                          {"gpu", machine_.gpu}}},
                        {"results", results}};
  return out.dump();
}

double Report::PeakRssMiB() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

double Report::ResidentMiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // in kB
  }
  return 0;
}

}  // namespace framezip::bench
