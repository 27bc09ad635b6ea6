// The common output of `framezip bench SUITE` (docs/architecture.md §6): human-readable lines
// while running, then — with --json — one JSON object as the last line of stdout:
//   {"suite", "machine": {"cpu", "isa", "kernels", "blas_core", "bf16_gemm", "threads", "gpu"},
//    "results": [{"name", "value", "unit", "target"?, "ok"?}]}
// A result that has a target (docs/architecture.md §8) carries it, and "ok" says whether it was met
// (value >= target for higher-is-better figures, value <= target for lower-is-better ones).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace framezip::bench {

struct Machine {
  std::string cpu;        // /proc/cpuinfo model name
  int threads = 0;        // threads the benchmark used
  std::string gpu;        // "none" or the CUDA device description
  std::string isa;        // the CPU's vector features (engine/ops/cpu_isa.h)
  std::string kernels;    // the ISA the engine's CPU kernels dispatch to on it
  std::string blas_core;  // the OpenBLAS kernel set its sgemm runs (engine/ops/blas_core.h)
  std::string bf16_gemm;  // Linear's many-row path for bf16 weights (engine/ops/gemm_amx.h)
};

// The CPU model name and the GPU summary of this machine (threads left 0 for the caller).
Machine DetectMachine();

struct Result {
  std::string name;
  double value = 0;
  std::string unit;
  std::optional<double> target;
  bool lower_is_better = false;
};

class Report {
 public:
  Report(std::string suite, Machine machine)
      : suite_(std::move(suite)), machine_(std::move(machine)) {}

  // Records a result and prints "name: value unit (target ..., ok)" to stdout.
  void Add(Result result);
  void Add(std::string name, double value, std::string unit,
           std::optional<double> target = std::nullopt, bool lower_is_better = false) {
    Add(Result{std::move(name), value, std::move(unit), target, lower_is_better});
  }

  // The JSON object described above (one line, no trailing newline).
  std::string Json() const;

  // Peak resident set size of this process so far, in MiB (getrusage).
  static double PeakRssMiB();
  // Resident set size of this process now, in MiB (/proc/self/status VmRSS; 0 where unreadable).
  static double ResidentMiB();

 private:
  std::string suite_;
  Machine machine_;
  std::vector<Result> results_;
};

}  // namespace framezip::bench
