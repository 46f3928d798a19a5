//===- Launch.cpp - Starting a layout's replicas on this machine ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/Launch.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace rondo::rt {

namespace {

std::vector<pid_t> gChildren;

void forwardSignal(int signal) {
  for (pid_t child : gChildren)
    if (child > 0)
      ::kill(child, signal);
}

/// A TCP port no one listens on now, for rank 0's rendezvous.
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return 29500;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) ==
          0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) == 0)
    port = ntohs(address.sin_port);
  ::close(fd);
  return port;
}

} // namespace

int launchLocalReplicas(int argc, char **argv, int replicas,
                        const char *argv0) {
  const std::string port = std::to_string(freePort());
  std::fprintf(stderr,
               "%s: the compiled layout runs %d replicas: starting them on "
               "this machine (rendezvous on 127.0.0.1:%s)\n",
               argv0, replicas, port.c_str());
  std::fflush(stderr);
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--replicas");
  args.push_back(std::to_string(replicas));
  std::vector<char *> childArgv;
  for (std::string &a : args)
    childArgv.push_back(a.data());
  childArgv.push_back(nullptr);
  struct sigaction forward {};
  forward.sa_handler = forwardSignal;
  sigemptyset(&forward.sa_mask);
  ::sigaction(SIGINT, &forward, nullptr);
  ::sigaction(SIGTERM, &forward, nullptr);
  gChildren.assign(size_t(replicas), -1);
  for (int r = 0; r < replicas; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "%s: error: cannot start replica %d: %s\n", argv0, r,
                   std::strerror(errno));
      forwardSignal(SIGTERM);
      break;
    }
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(replicas).c_str(), 1);
      // All on this machine: each takes its share of the cores for the
      // host's tasks (ThreadPools.h, hostTaskThreadsBesideGpus).
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(replicas).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("NCCL_NVLS_ENABLE", "0", 0);
      ::execv("/proc/self/exe", childArgv.data());
      std::fprintf(stderr, "%s: error: cannot start replica %d: %s\n", argv0, r,
                   std::strerror(errno));
      std::_Exit(127);
    }
    gChildren[size_t(r)] = pid;
  }
  int status = 0;
  for (size_t left = 0; left < gChildren.size(); ++left) {
    int raw = 0;
    pid_t done = ::waitpid(-1, &raw, 0);
    if (done < 0) {
      if (errno == EINTR) {
        --left;
        continue;
      }
      break;
    }
    const int code = WIFEXITED(raw)     ? WEXITSTATUS(raw)
                     : WIFSIGNALED(raw) ? 128 + WTERMSIG(raw)
                                        : 1;
    if (code != 0 && status == 0)
      status = code;
  }
  return status;
}

} // namespace rondo::rt
