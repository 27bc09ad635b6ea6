// SIGTERM / SIGINT handling for the server's drain: the signal is turned into a byte on a
// self-pipe that the main thread waits on, so the drain runs as ordinary code, not in a handler.
//
// A handler (rather than blocking the signals and calling sigwait) is needed because libraries
// start threads before main() (OpenBLAS does, in its load-time constructor); those threads do
// not have the signals blocked, the kernel may deliver a process-directed SIGTERM to one of
// them, and its default action would kill the process without a drain.
#pragma once

namespace framezip::server {

// Call first thing in main(): installs the handlers (idempotent).
void BlockTerminationSignals();

// Waits for SIGTERM or SIGINT (delivered after BlockTerminationSignals); returns its number.
int WaitForTerminationSignal();

}  // namespace framezip::server
