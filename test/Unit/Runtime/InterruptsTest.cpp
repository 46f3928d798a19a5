//===- InterruptsTest.cpp - Signals that arrive together are one ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `timeout` and Slurm signal the trainer and then its process group: one
// stop, two SIGTERMs microseconds apart. They must not abandon the final
// checkpoint; a second signal after the grace period still exits at once.
//
//===----------------------------------------------------------------------===//

#include "trainer/Interrupts.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

using namespace rondo::rt;

TEST(InterruptsTest, SignalsThatArriveTogetherAreOneRequest) {
  InterruptHandlers handlers;
  EXPECT_EQ(interruptSignal(), 0);
  std::raise(SIGTERM);
  std::raise(SIGTERM);
  std::raise(SIGINT);
  // Still here: the first signal's request stands, to finish the step.
  EXPECT_EQ(interruptSignal(), SIGTERM);
}

TEST(InterruptsTest, ASecondSignalAfterTheGracePeriodExitsAtOnce) {
  EXPECT_EXIT(
      {
        InterruptHandlers handlers(/*graceSeconds=*/0.05);
        std::raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::raise(SIGTERM);
      },
      testing::ExitedWithCode(128 + SIGTERM), "");
}

TEST(InterruptsTest, HandlersAreRestoredAndTheRequestClearedAfter) {
  { InterruptHandlers handlers; }
  EXPECT_EQ(interruptSignal(), 0);
  struct sigaction current;
  ::sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

// A stop's second signal that arrives only after the trainer has finished
// (the checkpoint written, the handlers' scope left) is still the same
// request: the process ends with its own status, not killed by the signal
// (signal-twice.test once saw exit -15 on a loaded machine).
TEST(InterruptsTest, ALateSignalOfTheSameStopIsStillOneRequest) {
  EXPECT_EXIT(
      {
        {
          InterruptHandlers handlers;
          std::raise(SIGTERM);
        }
        std::raise(SIGTERM);
        std::exit(7);
      },
      testing::ExitedWithCode(7), "");
}
