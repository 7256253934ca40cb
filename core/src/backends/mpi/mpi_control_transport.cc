#include "backends/mpi/mpi_control_transport.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstring>

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
  if (size_ > 1 && size_ <= direct_and_ranks_) return ExchangeBitAnd(bits, std::string(), nullptr);
  MPI_Request request;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                                                         MPI_UINT64_T, MPI_BAND, comm_.get(), &request)));
  return PollWait(&request, policy_);
}

Status MpiControlTransport::AllreduceBitAndCarrying(std::vector<uint64_t>* bits, const std::string& mine,
                                                    std::vector<std::string>* carried) {
  if (mine.size() > kCarryBytes) return Status::Internal("negotiation: more than kCarryBytes carried");
  if (size_ > 1 && size_ <= direct_and_ranks_) return ExchangeBitAnd(bits, mine, carried);
  carried->clear();
  return AllreduceBitAnd(bits);
}

Status MpiControlTransport::ExchangeBitAnd(std::vector<uint64_t>* bits, const std::string& mine,
                                           std::vector<std::string>* carried) {
  constexpr size_t kWord = sizeof(uint64_t);
  const size_t n = bits->size();
  if (n > INT_MAX / 2) return Status::Internal("negotiation bits over 2^30 words");
  const size_t carry_words = (mine.size() + kWord - 1) / kWord;
  sent_.assign(n + 1 + carry_words, 0);
  std::copy(bits->begin(), bits->end(), sent_.begin());
  sent_[n] = mine.size();
  if (!mine.empty()) std::memcpy(sent_.data() + n + 1, mine.data(), mine.size());
  // Room for the most any rank may carry.
  const size_t room = n + 1 + kCarryBytes / kWord;
  const int peers = size_ - 1;
  received_.resize(room * static_cast<size_t>(peers));
  requests_.clear();
  for (int i = 0; i < peers; ++i) {
    const int peer = (rank_ + 1 + i) % size_;
    MPI_Request receive, send;
    ACCORD_RETURN_IF_ERROR(
        ACCORD_MPI_CHECK(MPI_Irecv(received_.data() + room * static_cast<size_t>(i), static_cast<int>(room),
                                   MPI_UINT64_T, peer, kBitsTag, comm_.get(), &receive)));
    requests_.push_back(receive);
    ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(
        MPI_Isend(sent_.data(), static_cast<int>(sent_.size()), MPI_UINT64_T, peer, kBitsTag, comm_.get(), &send)));
    requests_.push_back(send);
  }
  ACCORD_RETURN_IF_ERROR(PollWaitAll(static_cast<int>(requests_.size()), requests_.data(), policy_));
  if (carried != nullptr) carried->assign(size_, std::string());
  for (int i = 0; i < peers; ++i) {
    const uint64_t* theirs = received_.data() + room * static_cast<size_t>(i);
    for (size_t w = 0; w < n; ++w) (*bits)[w] &= theirs[w];
    if (carried == nullptr) continue;
    if (theirs[n] > kCarryBytes) return Status::Internal("negotiation: a rank carried more than kCarryBytes");
    const int peer = (rank_ + 1 + i) % size_;
    (*carried)[peer].assign(reinterpret_cast<const char*>(theirs + n + 1), theirs[n]);
  }
  if (carried != nullptr) (*carried)[rank_] = mine;
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
