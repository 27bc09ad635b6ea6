// Blocks SIGTERM and SIGINT in every thread and waits for one on a dedicated thread, so the
// server drains from ordinary code instead of a signal handler.
#pragma once

namespace framezip::server {

// Call first thing in main(), before any thread starts, so every thread inherits the mask.
void BlockTerminationSignals();

// Waits for SIGTERM or SIGINT; returns the signal number.
int WaitForTerminationSignal();

}  // namespace framezip::server
