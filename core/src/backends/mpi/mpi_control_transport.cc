#include "backends/mpi/mpi_control_transport.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <climits>

#include "backends/mpi/mpi_check.h"

namespace accord {

Status PollWait(MPI_Request* request, const PollPolicy& policy) { return PollWaitAll(1, request, policy); }

Status PollWaitAll(int count, MPI_Request* requests, const PollPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto spin_from = start;
  std::chrono::microseconds sleep{2};
  const bool owner_waits = policy.owner_waits && policy.owner_waits();
  bool missed = false;
  while (true) {
    int done = 0;
    ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE)));
    if (done) return Status::OK();
    if (!missed && policy.on_wait) policy.on_wait();
    missed = true;
    const auto now = Clock::now();
    if (policy.deadline != nullptr && now >= *policy.deadline) {
      return Status::Timeout("the other ranks did not reach the negotiation round in time");
    }
    // A user thread of this process is blocked waiting for a result.
    const bool waited_on = policy.waited_on && policy.waited_on();
    if (now - spin_from < policy.spin || (waited_on && now - spin_from < policy.waited_spin)) {
      // Busy, but not greedy: the training thread may share this core (with
      // --bind-to core it does) and may be about to enqueue more tensors.
      if (!owner_waits || now - spin_from >= policy.spin) sched_yield();
      continue;
    }
    bool woken = false;
    const bool unwaited = !waited_on && policy.unwaited_sleep.count() > 0 && now - start >= policy.unwaited_after &&
                          (!policy.unwaited_if || policy.unwaited_if());
    const std::chrono::microseconds this_sleep = unwaited ? std::max(sleep, policy.unwaited_sleep) : sleep;
    if (policy.sleep) {
      woken = policy.sleep(this_sleep);
    } else {
      struct timespec ts {
        static_cast<time_t>(this_sleep.count() / 1000000), static_cast<long>(this_sleep.count() % 1000000) * 1000
      };
      nanosleep(&ts, nullptr);
    }
    if (woken) {
      spin_from = Clock::now();
      sleep = std::chrono::microseconds{2};
      continue;
    }
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    const auto cap = std::max(policy.max_sleep, std::min(waited / 16, policy.max_backoff));
    sleep = std::min(sleep * 2, cap);
  }
}

MpiControlTransport::MpiControlTransport(MpiComm comm, PollPolicy policy, int direct_and_ranks)
    : comm_(std::move(comm)), policy_(policy), direct_and_ranks_(direct_and_ranks) {
  MPI_Comm_rank(comm_.get(), &rank_);
  MPI_Comm_size(comm_.get(), &size_);
}

Status MpiControlTransport::AllreduceBitAnd(std::vector<uint64_t>* bits) {
  if (size_ > 1 && size_ <= direct_and_ranks_) return ExchangeBitAnd(bits);
  MPI_Request request;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                                                         MPI_UINT64_T, MPI_BAND, comm_.get(), &request)));
  return PollWait(&request, policy_);
}

Status MpiControlTransport::ExchangeBitAnd(std::vector<uint64_t>* bits) {
  const size_t n = bits->size();
  if (n > INT_MAX) return Status::Internal("negotiation bits over 2^31 words");
  const int peers = size_ - 1;
  received_.resize(n * static_cast<size_t>(peers));
  requests_.clear();
  for (int i = 0; i < peers; ++i) {
    const int peer = (rank_ + 1 + i) % size_;
    MPI_Request receive, send;
    ACCORD_RETURN_IF_ERROR(
        ACCORD_MPI_CHECK(MPI_Irecv(received_.data() + n * static_cast<size_t>(i), static_cast<int>(n), MPI_UINT64_T,
                                   peer, kBitsTag, comm_.get(), &receive)));
    requests_.push_back(receive);
    ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(
        MPI_Isend(bits->data(), static_cast<int>(n), MPI_UINT64_T, peer, kBitsTag, comm_.get(), &send)));
    requests_.push_back(send);
  }
  ACCORD_RETURN_IF_ERROR(PollWaitAll(static_cast<int>(requests_.size()), requests_.data(), policy_));
  for (int i = 0; i < peers; ++i) {
    const uint64_t* theirs = received_.data() + n * static_cast<size_t>(i);
    for (size_t w = 0; w < n; ++w) (*bits)[w] &= theirs[w];
  }
  return Status::OK();
}

Status MpiControlTransport::Gather(const std::string& mine, std::vector<std::string>* gathered) {
  if (mine.size() > INT_MAX) return Status::Internal("negotiation message over 2 GiB");
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(rank_ == 0 ? size_ : 0);
  MPI_Request request;
  ACCORD_RETURN_IF_ERROR(
      ACCORD_MPI_CHECK(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_.get(), &request)));
  ACCORD_RETURN_IF_ERROR(PollWait(&request, policy_));
  std::vector<int> displs(sizes.size(), 0);
  std::string all;
  if (rank_ == 0) {
    long total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    if (total > INT_MAX) return Status::Internal("negotiation messages over 2 GiB in one round");
    all.resize(total);
  }
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(),
                                                       displs.data(), MPI_BYTE, 0, comm_.get(), &request)));
  ACCORD_RETURN_IF_ERROR(PollWait(&request, policy_));
  if (rank_ == 0) {
    gathered->resize(size_);
    for (int r = 0; r < size_; ++r) (*gathered)[r] = all.substr(displs[r], sizes[r]);
  }
  return Status::OK();
}

Status MpiControlTransport::Broadcast(std::string* bytes) {
  uint64_t n = bytes->size();
  MPI_Request request;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, comm_.get(), &request)));
  ACCORD_RETURN_IF_ERROR(PollWait(&request, policy_));
  if (n > INT_MAX) return Status::Internal("negotiation reply over 2 GiB");
  bytes->resize(n);
  ACCORD_RETURN_IF_ERROR(
      ACCORD_MPI_CHECK(MPI_Ibcast(bytes->data(), static_cast<int>(n), MPI_BYTE, 0, comm_.get(), &request)));
  return PollWait(&request, policy_);
}

void MpiComm::Reset() noexcept {
  if (comm_ == MPI_COMM_NULL || comm_ == MPI_COMM_WORLD || comm_ == MPI_COMM_SELF) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

}  // namespace accord
