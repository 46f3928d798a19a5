//===- NcclReplicas.cpp - Replica sums over NCCL (GPU trainers) -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// GPU trainers' replicas sum over NCCL, started the way torchrun or Slurm
// start processes: RANK and WORLD_SIZE (or OMPI_COMM_WORLD_*, SLURM_PROCID /
// SLURM_NTASKS), MASTER_ADDR and MASTER_PORT. The GPU machines have no
// mpirun, so nothing else is needed: rank 0 makes the NCCL ids and hands
// them out over one TCP connection per rank (the rendezvous every NCCL
// launcher does), then NCCL does the sums.
//
// The gradients are in pinned host memory (the optimizer runs on the host),
// so a sum copies a chunk to the replica's GPU, all-reduces it there
// (NVLink or the network, whatever NCCL finds) and copies it back.
// Every wait polls the stream, NCCL's asynchronous error and a deadline (RONDO_REPLICA_TIMEOUT seconds, default 60): a
// replica that died makes the others stop with a message instead of
// hanging.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Replicas.h"

#include "rondo/runtime/Error.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace rondo::rt {
namespace {

using Clock = std::chrono::steady_clock;

const char *env(std::initializer_list<const char *> names) {
  for (const char *n : names)
    if (const char *v = std::getenv(n); v && *v)
      return v;
  return nullptr;
}

void checkCuda(cudaError_t status, const char *call, int device) {
  if (status != cudaSuccess)
    throw Error(std::string(call) + " failed on GPU " +
                std::to_string(device) + ": " + cudaGetErrorString(status));
}

/// Closes the socket on every path.
struct Socket {
  int fd = -1;
  explicit Socket(int fd) : fd(fd) {}
  ~Socket() {
    if (fd >= 0)
      ::close(fd);
  }
};

void sendAll(int fd, const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n <= 0)
      throw Error("replica rendezvous: send failed: " +
                  std::string(std::strerror(errno)));
    p += n;
    bytes -= size_t(n);
  }
}

void recvAll(int fd, void *data, size_t bytes, double timeout) {
  char *p = static_cast<char *>(data);
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  while (bytes) {
    pollfd pfd{fd, POLLIN, 0};
    int left = int(std::chrono::duration<double, std::milli>(deadline -
                                                            Clock::now())
                       .count());
    if (left <= 0 || ::poll(&pfd, 1, left) <= 0)
      throw Error("replica rendezvous: no answer from rank 0 within " +
                  std::to_string(int(timeout)) + " s");
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n <= 0)
      throw Error("replica rendezvous: rank 0 closed the connection");
    p += n;
    bytes -= size_t(n);
  }
}

/// Two NCCL ids (gradients, trainer thread) from rank 0 to every rank.
void rendezvous(int rank, int size, const std::string &addr, int port,
                double timeout, ncclUniqueId ids[2]) {
  if (rank == 0) {
    for (int i = 0; i < 2; ++i)
      if (ncclResult_t r = ncclGetUniqueId(&ids[i]); r != ncclSuccess)
        throw Error(std::string("ncclGetUniqueId failed: ") +
                    ncclGetErrorString(r));
    Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
    int one = 1;
    ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons(uint16_t(port));
    if (::bind(listener.fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) ||
        ::listen(listener.fd, size))
      throw Error("replica rendezvous: cannot listen on MASTER_PORT " +
                  std::to_string(port) + ": " + std::strerror(errno));
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
    for (int joined = 1; joined < size; ++joined) {
      pollfd pfd{listener.fd, POLLIN, 0};
      int left = int(std::chrono::duration<double, std::milli>(deadline -
                                                              Clock::now())
                         .count());
      if (left <= 0 || ::poll(&pfd, 1, left) <= 0)
        throw Error("replica rendezvous: " + std::to_string(joined) + " of " +
                    std::to_string(size) + " replicas joined within " +
                    std::to_string(int(timeout)) + " s");
      Socket peer(::accept(listener.fd, nullptr, nullptr));
      if (peer.fd < 0)
        throw Error("replica rendezvous: accept failed");
      sendAll(peer.fd, ids, 2 * sizeof(ncclUniqueId));
    }
    return;
  }
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints,
                    &found) != 0 ||
      !found)
    throw Error("replica rendezvous: cannot resolve MASTER_ADDR '" + addr +
                "'");
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.fd, found->ai_addr, found->ai_addrlen) == 0) {
      ::freeaddrinfo(found);
      recvAll(s.fd, ids, 2 * sizeof(ncclUniqueId), timeout);
      return;
    }
    if (Clock::now() > deadline) {
      ::freeaddrinfo(found);
      throw Error("replica rendezvous: rank 0 at " + addr + ":" +
                  std::to_string(port) + " did not answer within " +
                  std::to_string(int(timeout)) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

class NcclReplicaGroup final : public ReplicaGroup {
public:
  NcclReplicaGroup(int replicas, int device) : device_(device) {
    const char *r = env({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"});
    const char *w = env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
    if (!r || !w)
      throw Error("--replicas " + std::to_string(replicas) +
                  " on GPUs: set RANK and WORLD_SIZE (as torchrun does; "
                  "MASTER_ADDR and MASTER_PORT too when not 127.0.0.1:29500)"
                  " or start under srun/mpirun");
    rank_ = std::atoi(r);
    size_ = std::atoi(w);
    if (size_ != replicas || rank_ < 0 || rank_ >= size_)
      throw Error("--replicas " + std::to_string(replicas) + ": this process "
                  "is rank " + std::string(r) + " of " + std::string(w) +
                  " (RANK / WORLD_SIZE)");
    if (const char *t = std::getenv("RONDO_REPLICA_TIMEOUT"))
      timeout_ = std::max(1.0, std::atof(t));
    const char *a = env({"MASTER_ADDR"});
    const char *p = env({"MASTER_PORT"});
    ncclUniqueId ids[2];
    rendezvous(rank_, size_, a ? a : "127.0.0.1", p ? std::atoi(p) : 29500,
               std::max(timeout_, 120.0), ids);
    checkCuda(cudaSetDevice(device_), "cudaSetDevice", device_);
    for (int i = 0; i < 2; ++i) {
      checkCuda(cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags", device_);
      // Blocking communicators: a collective returns once it is enqueued,
      // and wait() bounds its completion. (Non-blocking ones would make
      // every later call wait for the previous one's ncclInProgress.)
      ncclResult_t res = ncclCommInitRank(&comms_[i], size_, ids[i], rank_);
      if (res != ncclSuccess)
        fail("ncclCommInitRank", res);
    }
    int version = 0;
    ncclGetVersion(&version);
    engine_ = "NCCL " + std::to_string(version / 10000) + "." +
              std::to_string(version / 100 % 100) + "." +
              std::to_string(version % 100) + " on GPU " +
              std::to_string(device_);
  }
  ~NcclReplicaGroup() override {
    cudaSetDevice(device_);
    for (int i = 0; i < 2; ++i) {
      if (comms_[i])
        ncclCommDestroy(comms_[i]);
      if (streams_[i])
        cudaStreamDestroy(streams_[i]);
      if (scratch_[i])
        cudaFree(scratch_[i]);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return engine_; }

  void sumGradients(float *data, int64_t n) override {
    allReduce(0, data, n, sizeof(float), ncclFloat);
  }
  void sum(double *data, int n) override {
    allReduce(1, data, n, sizeof(double), ncclDouble);
  }
  std::vector<uint64_t> gather(uint64_t value) override {
    cudaSetDevice(device_);
    void *buf = scratchOf(1, size_t(size_ + 1) * sizeof(uint64_t));
    char *dev = static_cast<char *>(buf);
    check(cudaMemcpyAsync(dev, &value, sizeof(value), cudaMemcpyHostToDevice,
                          streams_[1]),
          "cudaMemcpyAsync");
    enqueue(ncclAllGather(dev, dev + sizeof(uint64_t), 1, ncclUint64,
                          comms_[1], streams_[1]),
            1, "ncclAllGather");
    std::vector<uint64_t> all(size_t(size_), 0);
    check(cudaMemcpyAsync(all.data(), dev + sizeof(uint64_t),
                          all.size() * sizeof(uint64_t),
                          cudaMemcpyDeviceToHost, streams_[1]),
          "cudaMemcpyAsync");
    wait(1, "the weight checksums");
    return all;
  }
  [[noreturn]] void abortAll(int status) override {
    // NCCL cannot end the other processes; aborting the communicators
    // makes their pending sums fail, and their deadlines cover the rest.
    for (ncclComm_t c : comms_)
      if (c)
        ncclCommAbort(c);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(status);
  }

private:
  [[noreturn]] void fail(const char *call, ncclResult_t r) {
    throw Error(std::string(call) + " failed (replica " +
                std::to_string(rank_) + " of " + std::to_string(size_) +
                "): " + ncclGetErrorString(r) +
                (r == ncclRemoteError || r == ncclSystemError
                     ? " (another replica stopped?)"
                     : ""));
  }
  void check(cudaError_t status, const char *call) {
    checkCuda(status, call, device_);
  }
  void *scratchOf(int i, size_t bytes) {
    if (bytes > scratchBytes_[i]) {
      if (scratch_[i])
        cudaFree(scratch_[i]);
      scratch_[i] = nullptr;
      check(cudaMalloc(&scratch_[i], bytes), "cudaMalloc of the sum buffer");
      scratchBytes_[i] = bytes;
    }
    return scratch_[i];
  }
  void enqueue(ncclResult_t r, int i, const char *call) {
    if (r != ncclSuccess && r != ncclInProgress)
      fail(call, r);
    (void)i;
  }
  /// Polls the stream, NCCL's asynchronous error and the deadline.
  void wait(int i, const char *what) {
    auto start = Clock::now();
    for (;;) {
      cudaError_t q = cudaStreamQuery(streams_[i]);
      if (q == cudaSuccess)
        return;
      if (q != cudaErrorNotReady)
        check(q, "a replica sum");
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comms_[i], &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        ncclCommAbort(comms_[i]);
        comms_[i] = nullptr;
        fail("summing across replicas", state);
      }
      if (std::chrono::duration<double>(Clock::now() - start).count() >
          timeout_) {
        ncclCommAbort(comms_[i]);
        comms_[i] = nullptr;
        throw Error("replica " + std::to_string(rank_) + " of " +
                    std::to_string(size_) + ": no sum of " + what +
                    " from the other replicas within " +
                    std::to_string(int(timeout_)) +
                    " s: a replica stopped (RONDO_REPLICA_TIMEOUT)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void allReduce(int i, void *host, int64_t n, size_t elem,
                 ncclDataType_t type) {
    cudaSetDevice(device_);
    const int64_t chunk = int64_t(64) << 20; // elements per round trip
    char *bytes = static_cast<char *>(host);
    void *dev = scratchOf(i, size_t(std::min(n, chunk)) * elem);
    for (int64_t off = 0; off < n; off += chunk) {
      int64_t count = std::min(chunk, n - off);
      check(cudaMemcpyAsync(dev, bytes + off * elem, size_t(count) * elem,
                            cudaMemcpyHostToDevice, streams_[i]),
            "cudaMemcpyAsync");
      enqueue(ncclAllReduce(dev, dev, size_t(count), type, ncclSum, comms_[i],
                            streams_[i]),
              i, "ncclAllReduce");
      check(cudaMemcpyAsync(bytes + off * elem, dev, size_t(count) * elem,
                            cudaMemcpyDeviceToHost, streams_[i]),
            "cudaMemcpyAsync");
      wait(i, i == 0 ? "gradients" : "losses and counts");
    }
  }

  int device_ = 0, rank_ = 0, size_ = 1;
  double timeout_ = 60;
  ncclComm_t comms_[2] = {nullptr, nullptr};
  cudaStream_t streams_[2] = {nullptr, nullptr};
  void *scratch_[2] = {nullptr, nullptr};
  size_t scratchBytes_[2] = {0, 0};
  std::string engine_;
};

} // namespace

std::unique_ptr<ReplicaGroup> joinNcclReplicaGroup(int replicas, int device) {
  return std::make_unique<NcclReplicaGroup>(replicas, device);
}

} // namespace rondo::rt
