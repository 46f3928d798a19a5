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
// (NVLink or the network, whatever NCCL finds) and copies it back. With the
// optimizer sharded, a chunk's shards are reduced each to its owner and
// later broadcast from it (grouped ncclReduce / ncclBroadcast, NCCL's
// reduce-scatter and all-gather for shards of unequal size), and only the
// replica's own shard travels back (after the reduce) or up (before the
// broadcast).
//
// Device-resident state (a one-worker plan that keeps weights, gradients
// and moments on its GPU) hands the engine device pointers on the replica's
// own GPU: those are summed, reduced and broadcast in place, with no trip
// through host memory. The callers' device work on them has completed (every
// DeviceOps call synchronises), and every collective here is waited for
// before it returns, so no stream ordering crosses this interface.
//
// NCCL does not notice a peer that died inside a collective on NVLink: its
// kernels spin. So the rendezvous connections stay open for the whole run,
// and every wait polls the stream, NCCL's asynchronous error, those
// connections (a process that ends closes them, which names the lost rank)
// and a deadline (RONDO_REPLICA_TIMEOUT seconds, default 60) for a replica
// that hangs. RONDO_REPLICA_DEBUG=1 prints a hash of every gradient sum's
// input and output, to compare replicas line by line.
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
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
    throw Error(std::string(call) + " failed on GPU " + std::to_string(device) +
                ": " + cudaGetErrorString(status));
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
    int left =
        int(std::chrono::duration<double, std::milli>(deadline - Clock::now())
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
/// Returns the connections, kept open for the whole run: rank 0 holds one
/// per other rank (rank k's at k-1), the others their one to rank 0.
std::vector<int> rendezvous(int rank, int size, const std::string &addr,
                            int port, double timeout, ncclUniqueId ids[2]) {
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
    std::vector<std::unique_ptr<Socket>> peers(size_t(size - 1));
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
    for (int joined = 1; joined < size; ++joined) {
      pollfd pfd{listener.fd, POLLIN, 0};
      int left =
          int(std::chrono::duration<double, std::milli>(deadline - Clock::now())
                  .count());
      if (left <= 0 || ::poll(&pfd, 1, left) <= 0)
        throw Error("replica rendezvous: " + std::to_string(joined) + " of " +
                    std::to_string(size) + " replicas joined within " +
                    std::to_string(int(timeout)) + " s");
      auto peer =
          std::make_unique<Socket>(::accept(listener.fd, nullptr, nullptr));
      if (peer->fd < 0)
        throw Error("replica rendezvous: accept failed");
      int32_t who = -1;
      recvAll(peer->fd, &who, sizeof(who), timeout);
      if (who < 1 || who >= size || peers[size_t(who - 1)])
        throw Error("replica rendezvous: a process joined as rank " +
                    std::to_string(who) + " (RANK must be unique, 0.." +
                    std::to_string(size - 1) + ")");
      sendAll(peer->fd, ids, 2 * sizeof(ncclUniqueId));
      peers[size_t(who - 1)] = std::move(peer);
    }
    std::vector<int> fds;
    for (auto &p : peers) {
      fds.push_back(p->fd);
      p->fd = -1;
    }
    return fds;
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
      int32_t me = rank;
      sendAll(s.fd, &me, sizeof(me));
      recvAll(s.fd, ids, 2 * sizeof(ncclUniqueId), timeout);
      int fd = s.fd;
      s.fd = -1;
      return {fd};
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

/// Whether the other end of `fd` has closed (its process ended).
bool peerClosed(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) <= 0)
    return false;
  char byte;
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
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
      throw Error("--replicas " + std::to_string(replicas) +
                  ": this process "
                  "is rank " +
                  std::string(r) + " of " + std::string(w) +
                  " (RANK / WORLD_SIZE)");
    if (const char *t = std::getenv("RONDO_REPLICA_TIMEOUT"))
      timeout_ = std::max(1.0, std::atof(t));
    debug_ = std::getenv("RONDO_REPLICA_DEBUG") != nullptr;
    const char *a = env({"MASTER_ADDR"});
    const char *p = env({"MASTER_PORT"});
    ncclUniqueId ids[2];
    peers_ =
        rendezvous(rank_, size_, a ? a : "127.0.0.1", p ? std::atoi(p) : 29500,
                   std::max(timeout_, 120.0), ids);
    checkCuda(cudaSetDevice(device_), "cudaSetDevice", device_);
    // Everything a sum needs is allocated here, once: a cudaFree while a
    // collective runs would synchronise the device against kernels that
    // wait for the other replicas, and reused addresses confuse NCCL's
    // buffer registrations.
    check(cudaMalloc(&gradScratch_, kChunk * sizeof(float)),
          "cudaMalloc of the gradient sum buffer");
    check(cudaMalloc(&smallScratch_, kSmallBytes),
          "cudaMalloc of the loss sum buffer");
    // Pinned, so that every copy is asynchronous and every wait is one of
    // ours (with a deadline), never a blocking pageable copy.
    check(cudaMallocHost(&smallHost_, kSmallBytes), "cudaMallocHost");
    check(cudaMalloc(&gradSmallScratch_, kSmallBytes),
          "cudaMalloc of the gradient flag buffer");
    check(cudaMallocHost(&gradSmallHost_, kSmallBytes), "cudaMallocHost");
    for (int i = 0; i < 2; ++i) {
      check(cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
      // Blocking communicators: a collective returns once it is enqueued,
      // and wait() bounds its completion.
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
    }
    cudaFree(gradScratch_);
    cudaFree(smallScratch_);
    cudaFreeHost(smallHost_);
    cudaFree(gradSmallScratch_);
    cudaFreeHost(gradSmallHost_);
    for (int fd : peers_)
      ::close(fd);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return engine_; }
  bool takesDeviceMemory() const override { return true; }

  // One span is a batch of one: the same paths for host and GPU memory.
  void sumGradients(float *data, int64_t n) override {
    const GradientSpan span{data, n};
    sumGradientsMany(&span, 1);
  }
  void reduceScatterGradients(float *data, int64_t n) override {
    const GradientSpan span{data, n};
    reduceScatterGradientsMany(&span, 1);
  }
  void allGatherShards(float *data, int64_t n) override {
    const GradientSpan span{data, n};
    allGatherShardsMany(&span, 1);
  }
  // Spans in the GPU's memory are issued as grouped collectives and waited
  // for once: a stage's hundreds of tensors would otherwise cost a
  // synchronisation each. Adjacent spans (a stage's gradient block) are
  // summed as one. Spans in host memory (streamed state) are staged through
  // the scratch buffer one by one.
  void sumGradientsMany(const GradientSpan *all, size_t count) override {
    auto [spans, host] = splitByMemory(all, count, "gradient sum");
    std::lock_guard<std::mutex> lock(mu_[0]);
    cudaSetDevice(device_);
    for (const GradientSpan &span : host)
      stagedSum(span.data, span.n);
    std::vector<GradientSpan> merged;
    for (const GradientSpan &span : spans) {
      if (!merged.empty() && merged.back().data + merged.back().n == span.data)
        merged.back().n += span.n;
      else if (span.n > 0)
        merged.push_back(span);
    }
    if (merged.empty())
      return;
    grouped(merged.size(), "ncclAllReduce", [&](size_t i) {
      enqueue(ncclAllReduce(merged[i].data, merged[i].data, size_t(merged[i].n),
                            ncclFloat, ncclSum, comms_[0], streams_[0]),
              "ncclAllReduce");
    });
    wait(0, "gradients");
    gradSums_ += int64_t(spans.size());
  }
  void reduceScatterGradientsMany(const GradientSpan *all,
                                  size_t count) override {
    auto [spans, host] = splitByMemory(all, count, "gradient reduce-scatter");
    std::lock_guard<std::mutex> lock(mu_[0]);
    cudaSetDevice(device_);
    for (const GradientSpan &span : host)
      stagedReduceScatter(span.data, span.n);
    if (spans.empty())
      return;
    grouped(spans.size(), "ncclReduce", [&](size_t i) {
      float *data = spans[i].data;
      group(spans[i].n, 0, spans[i].n, "ncclReduce", [&](int r, Shard part) {
        float *p = data + part.begin;
        return ncclReduce(p, p, size_t(part.size()), ncclFloat, ncclSum, r,
                          comms_[0], streams_[0]);
      });
    });
    wait(0, "gradient shards");
  }
  void allGatherShardsMany(const GradientSpan *all, size_t count) override {
    auto [spans, host] = splitByMemory(all, count, "weight all-gather");
    std::lock_guard<std::mutex> lock(mu_[0]);
    cudaSetDevice(device_);
    for (const GradientSpan &span : host)
      stagedAllGather(span.data, span.n);
    if (spans.empty())
      return;
    grouped(spans.size(), "ncclBroadcast", [&](size_t i) {
      float *data = spans[i].data;
      group(spans[i].n, 0, spans[i].n, "ncclBroadcast", [&](int r, Shard part) {
        float *p = data + part.begin;
        return ncclBroadcast(p, p, size_t(part.size()), ncclFloat, r, comms_[0],
                             streams_[0]);
      });
    });
    wait(0, "weight shards");
  }
  std::vector<double> gatherOnOptimizer(const double *data, int n) override {
    std::lock_guard<std::mutex> lock(mu_[0]);
    cudaSetDevice(device_);
    const size_t bytes = size_t(n) * sizeof(double);
    if (size_t(size_ + 1) * bytes > kSmallBytes)
      throw Error("replica gather of " + std::to_string(n) +
                  " values: more than the buffer holds");
    auto *host = static_cast<double *>(gradSmallHost_);
    auto *dev = static_cast<double *>(gradSmallScratch_);
    std::memcpy(host, data, bytes);
    check(
        cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, streams_[0]),
        "cudaMemcpyAsync");
    enqueue(ncclAllGather(dev, dev + n, size_t(n), ncclDouble, comms_[0],
                          streams_[0]),
            "ncclAllGather");
    check(cudaMemcpyAsync(host + n, dev + n, size_t(size_) * bytes,
                          cudaMemcpyDeviceToHost, streams_[0]),
          "cudaMemcpyAsync");
    wait(0, "gradient flags");
    return std::vector<double>(host + n, host + n + size_t(size_) * size_t(n));
  }
  void sum(double *data, int n) override {
    std::lock_guard<std::mutex> lock(mu_[1]);
    cudaSetDevice(device_);
    const size_t bytes = size_t(n) * sizeof(double);
    if (bytes > kSmallBytes)
      throw Error("replica sum of " + std::to_string(n) +
                  " values: more than the buffer holds");
    std::memcpy(smallHost_, data, bytes);
    check(cudaMemcpyAsync(smallScratch_, smallHost_, bytes,
                          cudaMemcpyHostToDevice, streams_[1]),
          "cudaMemcpyAsync");
    enqueue(ncclAllReduce(smallScratch_, smallScratch_, size_t(n), ncclDouble,
                          ncclSum, comms_[1], streams_[1]),
            "ncclAllReduce");
    check(cudaMemcpyAsync(smallHost_, smallScratch_, bytes,
                          cudaMemcpyDeviceToHost, streams_[1]),
          "cudaMemcpyAsync");
    wait(1, "losses and counts");
    std::memcpy(data, smallHost_, bytes);
  }
  std::vector<uint64_t> gather(uint64_t value) override {
    std::lock_guard<std::mutex> lock(mu_[1]);
    cudaSetDevice(device_);
    if (size_t(size_ + 1) * sizeof(uint64_t) > kSmallBytes)
      throw Error("replica checksums: more replicas than the buffer holds");
    auto *host = static_cast<uint64_t *>(smallHost_);
    auto *dev = static_cast<uint64_t *>(smallScratch_);
    host[0] = value;
    check(cudaMemcpyAsync(dev, host, sizeof(uint64_t), cudaMemcpyHostToDevice,
                          streams_[1]),
          "cudaMemcpyAsync");
    enqueue(ncclAllGather(dev, dev + 1, 1, ncclUint64, comms_[1], streams_[1]),
            "ncclAllGather");
    check(cudaMemcpyAsync(host + 1, dev + 1, size_t(size_) * sizeof(uint64_t),
                          cudaMemcpyDeviceToHost, streams_[1]),
          "cudaMemcpyAsync");
    wait(1, "the weight checksums");
    return std::vector<uint64_t>(host + 1, host + 1 + size_);
  }
  [[noreturn]] void abortAll(int status) override {
    std::fflush(stdout);
    std::fflush(stderr);
    // NCCL cannot end the other processes. Closing our connections tells
    // them at once (their waits watch them); aborting the communicators
    // makes our own pending sums give up. An abort that itself hangs on a
    // stuck kernel must not keep the process alive.
    for (int fd : peers_)
      ::shutdown(fd, SHUT_RDWR);
    std::thread([this] {
      for (ncclComm_t c : comms_)
        if (c)
          ncclCommAbort(c);
    }).detach();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::_Exit(status);
  }

private:
  static constexpr int64_t kChunk = int64_t(32) << 20; // floats per trip
  static constexpr size_t kSmallBytes = 4096;

  static uint64_t hashOf(const float *data, int64_t n) {
    const uint32_t *bits = reinterpret_cast<const uint32_t *>(data);
    uint64_t h = 1469598103934665603ull;
    for (int64_t e = 0; e < n; ++e)
      h = (h ^ bits[e]) * 1099511628211ull;
    return h;
  }
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
  void enqueue(ncclResult_t r, const char *call) {
    if (r != ncclSuccess && r != ncclInProgress)
      fail(call, r);
  }
  /// One grouped collective per replica over the part of [off, end) in its
  /// shard of a tensor of n (skipping empty parts, the same on every
  /// replica): `issue(root, part)`.
  template <typename Issue>
  void group(int64_t n, int64_t off, int64_t end, const char *call,
             Issue &&issue) {
    enqueue(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r)
      if (Shard part = shardOf(n, r, size_).within(off, end); part.size() > 0)
        enqueue(issue(r, part), call);
    enqueue(ncclGroupEnd(), "ncclGroupEnd");
  }
  /// Whether `data` is device memory, which must then be this replica's
  /// GPU (the worker that holds resident state is the GPU the engine was
  /// started on); host memory, pinned or not, is staged through the
  /// scratch buffer.
  bool onThisGpu(const void *data, const char *what) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
      cudaGetLastError(); // Unregistered host memory on older drivers.
      return false;
    }
    if (attributes.type != cudaMemoryTypeDevice)
      return false;
    if (attributes.device != device_)
      throw Error(std::string("replica ") + what + ": the data is on GPU " +
                  std::to_string(attributes.device) +
                  " but this replica's NCCL communicator is on GPU " +
                  std::to_string(device_) +
                  " (pass the replica's worker GPU first in --gpus)");
    return true;
  }
  /// The sums of host memory: chunks through the scratch buffer on the
  /// gradient stream (mu_[0] held, the device current).
  void stagedSum(float *data, int64_t n) {
    const uint64_t before = debug_ ? hashOf(data, n) : 0;
    // One stream: chunk k+1's upload starts after chunk k's download, so
    // the one buffer is never overwritten early.
    for (int64_t off = 0; off < n; off += kChunk) {
      const size_t count = size_t(std::min(kChunk, n - off));
      check(cudaMemcpyAsync(gradScratch_, data + off, count * sizeof(float),
                            cudaMemcpyHostToDevice, streams_[0]),
            "cudaMemcpyAsync");
      enqueue(ncclAllReduce(gradScratch_, gradScratch_, count, ncclFloat,
                            ncclSum, comms_[0], streams_[0]),
              "ncclAllReduce");
      check(cudaMemcpyAsync(data + off, gradScratch_, count * sizeof(float),
                            cudaMemcpyDeviceToHost, streams_[0]),
            "cudaMemcpyAsync");
    }
    wait(0, "gradients");
    if (debug_)
      std::fprintf(stderr,
                   "replica %d: gradient sum %lld: %lld elements, %016llx -> "
                   "%016llx\n",
                   rank_, (long long)gradSums_, (long long)n,
                   (unsigned long long)before,
                   (unsigned long long)hashOf(data, n));
    ++gradSums_;
  }
  void stagedReduceScatter(float *data, int64_t n) {
    const Shard mine = shardOf(n, rank_, size_);
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t end = std::min(n, off + kChunk);
      copyGradients(scratchAt(0), data + off, end - off,
                    cudaMemcpyHostToDevice);
      group(n, off, end, "ncclReduce", [&](int r, Shard part) {
        float *p = scratchAt(part.begin - off);
        return ncclReduce(p, p, size_t(part.size()), ncclFloat, ncclSum, r,
                          comms_[0], streams_[0]);
      });
      const Shard own = mine.within(off, end);
      copyGradients(data + own.begin, scratchAt(own.begin - off), own.size(),
                    cudaMemcpyDeviceToHost);
    }
    wait(0, "gradient shards");
  }
  void stagedAllGather(float *data, int64_t n) {
    const Shard mine = shardOf(n, rank_, size_);
    for (int64_t off = 0; off < n; off += kChunk) {
      const int64_t end = std::min(n, off + kChunk);
      const Shard own = mine.within(off, end);
      copyGradients(scratchAt(own.begin - off), data + own.begin, own.size(),
                    cudaMemcpyHostToDevice);
      group(n, off, end, "ncclBroadcast", [&](int r, Shard part) {
        float *p = scratchAt(part.begin - off);
        return ncclBroadcast(p, p, size_t(part.size()), ncclFloat, r, comms_[0],
                             streams_[0]);
      });
      copyGradients(data + off, scratchAt(0), end - off,
                    cudaMemcpyDeviceToHost);
    }
    wait(0, "weight shards");
  }
  /// The spans in this GPU's memory and those in host memory (a mixed
  /// residency has both), each in the given order: every replica splits the
  /// same spans the same way, so the collectives pair up.
  std::pair<std::vector<GradientSpan>, std::vector<GradientSpan>>
  splitByMemory(const GradientSpan *spans, size_t count, const char *what) {
    std::pair<std::vector<GradientSpan>, std::vector<GradientSpan>> split;
    for (size_t i = 0; i < count; ++i)
      (onThisGpu(spans[i].data, what) ? split.first : split.second)
          .push_back(spans[i]);
    return split;
  }
  /// `issue(i)` for i < count in NCCL groups of a bounded size, all on the
  /// gradient stream (the caller waits once).
  template <typename Issue>
  void grouped(size_t count, const char *call, Issue &&issue) {
    constexpr size_t kPerGroup = 64;
    for (size_t begin = 0; begin < count; begin += kPerGroup) {
      enqueue(ncclGroupStart(), "ncclGroupStart");
      for (size_t i = begin; i < std::min(count, begin + kPerGroup); ++i)
        issue(i);
      enqueue(ncclGroupEnd(), call);
    }
  }
  float *scratchAt(int64_t element) {
    return static_cast<float *>(gradScratch_) + element;
  }
  /// `count` floats on the gradient stream (nothing for none).
  void copyGradients(float *dst, const float *src, int64_t count,
                     cudaMemcpyKind kind) {
    if (count > 0)
      check(cudaMemcpyAsync(dst, src, size_t(count) * sizeof(float), kind,
                            streams_[0]),
            "cudaMemcpyAsync");
  }
  /// Which replica's connection closed, or -1. Rank 0 watches every
  /// replica; the others watch rank 0, which stops the job when it loses
  /// one.
  int lostPeer() const {
    for (size_t k = 0; k < peers_.size(); ++k)
      if (peerClosed(peers_[k]))
        return rank_ == 0 ? int(k) + 1 : 0;
    return -1;
  }
  /// Polls the stream, NCCL's asynchronous error, the other replicas'
  /// connections and the deadline. A sum that cannot complete ends the
  /// process here rather than throwing: another thread of this process may
  /// be blocked in a CUDA call that waits for the stuck collective, so an
  /// error handed up the stack could hang on its way out.
  void wait(int i, const char *what) {
    auto start = Clock::now();
    Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(timeout_));
    int lost = -1;
    for (int polls = 0;; ++polls) {
      cudaError_t q = cudaStreamQuery(streams_[i]);
      if (q == cudaSuccess)
        return;
      if (q != cudaErrorNotReady)
        stop("a replica sum failed on GPU " + std::to_string(device_) + ": " +
             cudaGetErrorString(q));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comms_[i], &state);
      if (state != ncclSuccess && state != ncclInProgress)
        stop("summing " + std::string(what) +
             " across replicas failed "
             "(replica " +
             std::to_string(rank_) + " of " + std::to_string(size_) +
             "): " + ncclGetErrorString(state));
      if (lost < 0 && polls % 64 == 0 && (lost = lostPeer()) >= 0)
        // A replica that finished its last sum and exited also closes its
        // connection: give ours a moment to complete before calling it
        // lost.
        deadline = std::min<Clock::time_point>(
            deadline, Clock::now() + std::chrono::seconds(3));
      if (Clock::now() > deadline) {
        if (lost >= 0)
          stop("replica " + std::to_string(lost) + " of " +
               std::to_string(size_) +
               " was lost (its process ended) while "
               "replica " +
               std::to_string(rank_) + " waited for the sum of " + what);
        stop("replica " + std::to_string(rank_) + " of " +
             std::to_string(size_) + ": no sum of " + what +
             " from the other replicas within " +
             std::to_string(int(timeout_)) +
             " s: a replica stopped or hangs (RONDO_REPLICA_TIMEOUT)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  [[noreturn]] void stop(const std::string &message) {
    std::fprintf(stderr, "%s: error: %s\n", program_invocation_short_name,
                 message.c_str());
    abortAll(1);
  }

  int device_ = 0, rank_ = 0, size_ = 1;
  double timeout_ = 60;
  bool debug_ = false;
  int64_t gradSums_ = 0;
  /// Rank 0: one connection per other rank (rank k at k-1); the others:
  /// the connection to rank 0. Kept open to notice a replica's end.
  std::vector<int> peers_;
  std::mutex mu_[2];
  ncclComm_t comms_[2] = {nullptr, nullptr};
  cudaStream_t streams_[2] = {nullptr, nullptr};
  void *gradScratch_ = nullptr, *smallScratch_ = nullptr, *smallHost_ = nullptr;
  /// The optimizer thread's small gathers (its own, so that they never
  /// share the trainer thread's buffers).
  void *gradSmallScratch_ = nullptr, *gradSmallHost_ = nullptr;
  std::string engine_;
};

} // namespace

std::unique_ptr<ReplicaGroup> joinNcclReplicaGroup(int replicas, int device) {
  return std::make_unique<NcclReplicaGroup>(replicas, device);
}

} // namespace rondo::rt
