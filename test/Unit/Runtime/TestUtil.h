//===- TestUtil.h - Shared helpers of the runtime unit tests ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_RUNTIME_TESTUTIL_H
#define RONDO_TEST_UNIT_RUNTIME_TESTUTIL_H

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace rondo::test {

/// A fresh directory per test, under gtest's temporary directory.
inline std::string makeTempDir() {
  const ::testing::TestInfo *info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char &c : name)
    if (c == '/')
      c = '_';
  std::string dir =
      ::testing::TempDir() + "rondo-" + std::to_string(::getpid()) + "-" + name;
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(command.c_str()) != 0)
    ADD_FAILURE() << "cannot create " << dir;
  return dir;
}

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// What a trainer run returned and printed.
struct RunResult {
  int rc;
  std::string out, err;
};

/// The argv of a process started with `args` (which must outlive it).
inline std::vector<char *> argvOf(std::vector<std::string> &args) {
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

/// Runs `body`, a trainer's main, with stdout and stderr captured.
template <typename F> RunResult captureRun(F &&body) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int rc = body();
  RunResult r;
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  r.rc = rc;
  return r;
}

/// Runs `body` and returns the message of the rt::Error it throws ("" when
/// it does not throw).
template <typename F> std::string errorOf(F &&body) {
  try {
    body();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

} // namespace rondo::test

#endif // RONDO_TEST_UNIT_RUNTIME_TESTUTIL_H
