//===- FileUtilTest.cpp - Atomic output files -----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "FileUtil.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace rondo::rt;

namespace {

std::string scratchDir() {
  std::string dir = ::testing::TempDir() + "rondo-fileutil-XXXXXX";
  if (!::mkdtemp(dir.data()))
    ADD_FAILURE() << "mkdtemp failed";
  return dir;
}

mode_t modeOf(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

TEST(AtomicFile, RegularFileAppearsWhole) {
  std::string dir = scratchDir(), path = dir + "/out.txt";
  writeFileAtomically(path, "first", 5);
  writeFileAtomically(path, "second", 6);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "second");
  EXPECT_TRUE(S_ISREG(modeOf(path)));
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

// A pipe given as the destination (as /dev/null or a terminal would be) is
// written through, not replaced by a regular file renamed over it.
TEST(AtomicFile, PipeIsWrittenInPlace) {
  std::string dir = scratchDir(), fifo = dir + "/pipe", alias = dir + "/alias";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A second name of the pipe: if the writer replaced `fifo`, the reader
  // (blocked opening it) is released through this one and the test fails
  // instead of hanging.
  ASSERT_EQ(::link(fifo.c_str(), alias.c_str()), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo);
    received.assign(std::istreambuf_iterator<char>(in), {});
  });
  checkCanWriteFile(fifo);
  writeFileAtomically(fifo, "through the pipe", 16);
  bool stillPipe = S_ISFIFO(modeOf(fifo));
  if (!stillPipe)
    std::ofstream(alias).put('!');
  reader.join();
  EXPECT_TRUE(stillPipe);
  EXPECT_EQ(received, "through the pipe");
  EXPECT_EQ(modeOf(fifo + ".tmp." + std::to_string(::getpid())), 0u);
  ::unlink(fifo.c_str());
  ::unlink(alias.c_str());
  ::rmdir(dir.c_str());
}

// /dev/null passes the up-front check without a file created beside it.
TEST(AtomicFile, DevNullIsWritable) {
  ASSERT_TRUE(S_ISCHR(modeOf("/dev/null")));
  checkCanWriteFile("/dev/null");
  EXPECT_TRUE(S_ISCHR(modeOf("/dev/null")));
}

} // namespace
