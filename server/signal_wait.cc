#include "server/signal_wait.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace framezip::server {
namespace {

int g_pipe[2] = {-1, -1};

// Async-signal-safe: only write(2), errno saved and restored.
void OnTerminationSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  (void)!write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void BlockTerminationSignals() {
  if (g_pipe[0] >= 0) return;
  if (pipe2(g_pipe, O_CLOEXEC) != 0) return;
  // A full pipe (a burst of signals) must not block the handler.
  fcntl(g_pipe[1], F_SETFL, fcntl(g_pipe[1], F_GETFL) | O_NONBLOCK);
  struct sigaction action {};
  action.sa_handler = OnTerminationSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int WaitForTerminationSignal() {
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = read(g_pipe[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return SIGTERM;  // the pipe broke: treat it as a request to stop
  }
}

}  // namespace framezip::server
