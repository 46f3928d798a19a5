//===- Interrupts.cpp - SIGINT and SIGTERM as a request to stop -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/Interrupts.h"

#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <unistd.h>

namespace rondo::rt {

namespace {

/// The first SIGINT/SIGTERM (its number), 0 while none came. The handler
/// only sets it; the step loop finishes the step and stops.
volatile std::sig_atomic_t gInterrupt = 0;
/// When the first came (CLOCK_MONOTONIC, ns) and the grace period. Only the
/// handler reads and writes them while the handlers are installed, and it
/// never runs nested (both signals are blocked while it runs).
int64_t gFirstNs = 0;
int64_t gGraceNs = 0;

int64_t monotonicNs() {
  // clock_gettime is async-signal-safe.
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
}

extern "C" void onInterruptSignal(int sig) {
  const int64_t now = monotonicNs();
  if (!gInterrupt) {
    gFirstNs = now;
    gInterrupt = sig;
    return;
  }
  // A second request, past the grace period: the user does not want to
  // wait for the step. _exit is async-signal-safe.
  if (now - gFirstNs >= gGraceNs)
    ::_exit(128 + sig);
}

} // namespace

struct InterruptHandlers::Saved {
  struct sigaction interrupt, terminate;
};

InterruptHandlers::InterruptHandlers(double graceSeconds) : saved(new Saved) {
  gInterrupt = 0;
  gGraceNs = int64_t(graceSeconds * 1e9);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onInterruptSignal;
  // Restart interrupted system calls: a checkpoint being written when the
  // signal comes must not fail with EINTR.
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  ::sigaction(SIGINT, &sa, &saved->interrupt);
  ::sigaction(SIGTERM, &sa, &saved->terminate);
}

InterruptHandlers::~InterruptHandlers() {
  // After a request the process is on its way out with 128 + signal: the
  // handlers stay, so that a signal of the same stop arriving late (a
  // process group's copy delayed past the checkpoint) is still the same
  // request rather than the default action's death by signal, and a
  // deliberate one after the grace period still exits at once.
  if (!gInterrupt) {
    ::sigaction(SIGINT, &saved->interrupt, nullptr);
    ::sigaction(SIGTERM, &saved->terminate, nullptr);
  }
  delete saved;
}

int interruptSignal() { return int(gInterrupt); }

void requestInterrupt(int sig) {
  if (!gInterrupt)
    gInterrupt = sig;
}

} // namespace rondo::rt
