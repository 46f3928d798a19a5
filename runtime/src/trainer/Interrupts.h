//===- Interrupts.h - SIGINT and SIGTERM as a request to stop ---*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The first SIGINT or SIGTERM asks the trainer to finish the step, write a
// checkpoint and exit; a second one means "exit now, no checkpoint". But
// `timeout`, Slurm and other managers signal the trainer and then its
// process group, so one stop arrives as two signals microseconds apart
// (issue 24, item 6b: 4 of 8 stops under GNU timeout lost the final
// checkpoint). Signals within a grace period of the first therefore count
// as the same request; only one after it, which a person sends on purpose,
// abandons the checkpoint.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_INTERRUPTS_H
#define RONDO_RUNTIME_SRC_TRAINER_INTERRUPTS_H

namespace rondo::rt {

/// Seconds after the first signal during which more signals are the same
/// request.
constexpr double kInterruptGraceSeconds = 2.0;

/// Handles SIGINT and SIGTERM for the lifetime of the object and restores
/// the previous handlers after, unless a request came: then they stay until
/// the process exits (a late copy of the same stop is no death by signal).
/// One at a time.
class InterruptHandlers {
public:
  explicit InterruptHandlers(double graceSeconds = kInterruptGraceSeconds);
  ~InterruptHandlers();
  InterruptHandlers(const InterruptHandlers &) = delete;
  InterruptHandlers &operator=(const InterruptHandlers &) = delete;

private:
  struct Saved;
  Saved *saved;
};

/// The first signal's number, 0 while none came.
int interruptSignal();

/// Stops the run as if `sig` had come (another replica saw a signal).
void requestInterrupt(int sig);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_INTERRUPTS_H
