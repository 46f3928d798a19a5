//===- MpiReplicas.cpp - Replica sums over MPI ----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// MPI_THREAD_MULTIPLE with one duplicated communicator per talking thread:
// collectives of different threads never share a communicator, so their
// order on each communicator is the program's order on every replica.
// Counts above INT_MAX go in pieces; a sharded tensor's pieces carry each
// replica's part of the piece (MPI_Reduce_scatter, MPI_Allgatherv). Sums use
// MPI_Allreduce; whether every
// replica ends with the same bits is checked, not assumed (the trainer
// compares weight checksums every --replica-check-every steps).
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Replicas.h"

#include "rondo/runtime/Error.h"

// The C API only: Open MPI's deprecated C++ bindings need a library the
// trainers do not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

namespace rondo::rt {
namespace {

void check(int status, const char *call) {
  if (status == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw Error(std::string(call) +
              " failed: " + std::string(text, size_t(length)));
}

class MpiReplicaGroup final : public ReplicaGroup {
public:
  explicit MpiReplicaGroup(int replicas) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
            "MPI_Init_thread");
      if (provided < MPI_THREAD_MULTIPLE)
        throw Error("--replicas: this MPI library does not support "
                    "MPI_THREAD_MULTIPLE, which the optimizer and trainer "
                    "threads need");
    }
    // Errors come back as return codes (and become rt::Error), not aborts
    // with MPI's own message.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    if (size_ != replicas) {
      // The destructor will not run: leave MPI as it would.
      MPI_Finalize();
      throw Error("--replicas " + std::to_string(replicas) +
                  ": this process "
                  "is rank " +
                  std::to_string(rank_) + " of an MPI job of " +
                  std::to_string(size_) +
                  (size_ == 1 ? " (not started by "
                                "mpirun?)"
                              : "") +
                  "; start it as `mpirun -np " + std::to_string(replicas) +
                  " TRAINER --replicas " + std::to_string(replicas) + " ...`");
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &grads_), "MPI_Comm_dup");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &trainer_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(grads_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(trainer_, MPI_ERRORS_RETURN);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string v(version, size_t(length));
    engine_ = "MPI (" + v.substr(0, v.find(',')) + ")";
  }
  ~MpiReplicaGroup() override {
    MPI_Comm_free(&grads_);
    MPI_Comm_free(&trainer_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return engine_; }

  void sumGradients(float *data, int64_t n) override {
    for (int64_t off = 0; off < n; off += INT_MAX / 2) {
      int count = int(std::min<int64_t>(INT_MAX / 2, n - off));
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM,
                          grads_),
            "MPI_Allreduce of gradients");
    }
  }
  void reduceScatterGradients(float *data, int64_t n) override {
    forEachPiece(n, [&](int64_t off, const std::vector<int> &counts,
                        const std::vector<int> &displs) {
      // MPI_IN_PLACE would leave this replica's part at the piece's start;
      // a separate receive buffer keeps it where the shard is.
      scratch_.resize(size_t(counts[size_t(rank_)]));
      check(MPI_Reduce_scatter(data + off, scratch_.data(), counts.data(),
                               MPI_FLOAT, MPI_SUM, grads_),
            "MPI_Reduce_scatter of gradients");
      std::copy(scratch_.begin(), scratch_.end(),
                data + off + displs[size_t(rank_)]);
    });
  }
  void allGatherShards(float *data, int64_t n) override {
    forEachPiece(n, [&](int64_t off, const std::vector<int> &counts,
                        const std::vector<int> &displs) {
      check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data + off,
                           counts.data(), displs.data(), MPI_FLOAT, grads_),
            "MPI_Allgatherv of weight shards");
    });
  }
  std::vector<double> gatherOnOptimizer(const double *data, int n) override {
    std::vector<double> all(size_t(size_) * size_t(n));
    check(MPI_Allgather(data, n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, grads_),
          "MPI_Allgather");
    return all;
  }
  void sum(double *data, int n) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_DOUBLE, MPI_SUM, trainer_),
          "MPI_Allreduce");
  }
  std::vector<uint64_t> gather(uint64_t value) override {
    std::vector<uint64_t> all(size_t(size_), 0);
    unsigned long long v = value;
    std::vector<unsigned long long> got(size_t(size_), 0);
    check(MPI_Allgather(&v, 1, MPI_UNSIGNED_LONG_LONG, got.data(), 1,
                        MPI_UNSIGNED_LONG_LONG, trainer_),
          "MPI_Allgather");
    for (size_t i = 0; i < got.size(); ++i)
      all[i] = got[i];
    return all;
  }
  [[noreturn]] void abortAll(int status) override {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);
  }

private:
  /// Calls `piece(offset, counts, displacements)` for each run of at most
  /// INT_MAX / 2 elements of a sharded tensor of `n`: counts[r] elements of
  /// the piece lie in replica r's shard, from displacements[r] on.
  template <typename Piece> void forEachPiece(int64_t n, Piece &&piece) {
    const int64_t kPiece = INT_MAX / 2;
    std::vector<int> counts(static_cast<size_t>(size_)),
        displs(static_cast<size_t>(size_));
    for (int64_t off = 0; off < n; off += kPiece) {
      const int64_t end = std::min(n, off + kPiece);
      for (int r = 0; r < size_; ++r) {
        const Shard part = shardOf(n, r, size_).within(off, end);
        counts[size_t(r)] = int(part.size());
        displs[size_t(r)] = int(part.begin - off);
      }
      piece(off, counts, displs);
    }
  }

  int rank_ = 0, size_ = 1;
  std::vector<float> scratch_;
  MPI_Comm grads_ = MPI_COMM_NULL, trainer_ = MPI_COMM_NULL;
  std::string engine_;
};

} // namespace

std::unique_ptr<ReplicaGroup> joinReplicaGroup(int replicas) {
  return std::make_unique<MpiReplicaGroup>(replicas);
}

bool replicasSupported() { return true; }

} // namespace rondo::rt
