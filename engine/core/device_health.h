// Process-wide GPU health flag. A sticky CUDA error (illegal address, launch failure, uncorrectable
// ECC, ...) leaves the CUDA context unusable until the process restarts (the runtime's own
// documentation: "any further CUDA work will return the same error"), so the first one flips
// this flag; the server's health check reads it, reports NOT_SERVING, stops admitting requests and
// lets the orchestrator restart the pod (docs/DEVELOPING.md §3 item 5).
//
// The flag only ever goes from healthy to unhealthy: nothing in a process can make a poisoned CUDA
// context usable again. Thread-safe: any thread may mark, any thread may read.
#pragma once

#include <string>

namespace framezip::engine {

// True until MarkDeviceUnhealthy() is called. Lock-free; cheap enough for every admission check.
bool DeviceHealthy();

// The first reason given to MarkDeviceUnhealthy() ("cudaErrorIllegalAddress in attention: ...");
// empty while healthy. For logs and the health check's detail, never for client messages.
std::string DeviceUnhealthyReason();

// Marks the device unhealthy for the rest of the process. The first reason wins; later calls only
// count (a poisoned context makes every subsequent call fail the same way).
void MarkDeviceUnhealthy(const std::string& reason);

// Tests only: makes the flag healthy again so one test binary can check the transition twice.
void ResetDeviceHealthForTesting();

}  // namespace framezip::engine
