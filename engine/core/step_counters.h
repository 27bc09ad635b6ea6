// Counters of the work a step hands to its device: kernel launches, host synchronisations and
// copies between host and device memory. A GPU step is bound by these (each pageable copy drains
// the device; each launch costs microseconds of host time), so they are counted where they happen
// (device_memory's copies, the ops' launch sites, the step plan's upload) and read per step as the
// difference of two snapshots: `framezip bench gpu` reports them, and tests assert how they grow
// with the number of layers and sequences.
//
// Process-wide relaxed atomics: an op's launches may come from pool threads, and a snapshot
// difference is exact whenever one step runs at a time (benchmarks and tests; the server's step
// loop runs its steps one after another).
#pragma once

#include <cstdint>

namespace framezip::engine {

struct StepCounts {
  int64_t launches = 0;        // device kernels (and cuBLAS calls) enqueued
  int64_t host_syncs = 0;      // the host waited for the device (a synchronous copy, a stream wait)
  int64_t host_to_device = 0;  // copies from host to device memory
  int64_t device_to_host = 0;  // copies from device to host memory
  int64_t device_to_device = 0;
  int64_t plan_uploads = 0;  // step plans sent to their device (one copy each, counted above too)

  int64_t copies() const { return host_to_device + device_to_host; }
  StepCounts operator-(const StepCounts& earlier) const;
};

// The totals since the process started.
StepCounts ReadStepCounts();

void CountLaunches(int64_t n = 1);
void CountHostSync();
enum class CopyDirection { kHostToDevice, kDeviceToHost, kDeviceToDevice };
void CountCopy(CopyDirection direction);
void CountPlanUpload();

// The counts of one scope: construct before the step, read Elapsed() after it.
class StepCountScope {
 public:
  StepCountScope() : start_(ReadStepCounts()) {}
  StepCounts Elapsed() const { return ReadStepCounts() - start_; }

 private:
  StepCounts start_;
};

}  // namespace framezip::engine
