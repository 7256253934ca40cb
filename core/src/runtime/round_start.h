// When the coordinator starts its next round: how long a rank with nothing
// new waits first (IdleWait), and how long it lets a burst of enqueues
// finish once one has begun (LetBurstFinish). Coordinator thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "config/config.h"
#include "runtime/waiters.h"
#include "runtime/work_signal.h"

namespace accord {

// How long a rank with nothing new waits before joining the next round: the
// idle timeout while the job makes progress; when no rank has made progress
// for a while (`quiet`), 1/8 of that quiet time (up to the backoff cap), so
// an idle or stalled job wakes rarely while the delay it adds stays a small
// fraction of the time already spent waiting.
std::chrono::microseconds IdleWait(const Config& config, std::chrono::steady_clock::duration quiet);

// A user thread that is enqueueing many tensors (a step's gradients) wakes
// the coordinator with its first one, and on a shared core the woken
// coordinator often takes the core from it at once. Starting the round then
// would negotiate a few tensors and leave the rest for another round and
// another collective. So the coordinator first waits, without taking the
// core, until some user thread waits for a result (it has submitted what it
// had), or no tensor has arrived for kBurstQuiet (it is busy elsewhere), or
// kBurstLimit has passed. A thread that enqueues one tensor and waits costs
// at most one extra wake-up.
//
// When the process has a single core (`shared_core`), communication cannot
// overlap computation: a collective run while the training thread computes
// only takes turns with it on the core, and waits for a peer whose
// coordinator is in the same position. There the coordinator waits until a
// user thread waits for (or polls) a result, up to kSharedCoreLimit, so
// that the collectives run while the training thread has nothing to do.
//
// While what has arrived is small (more than nothing and under
// kSmallBurstBytes, by `new_bytes`), a gap of up to kSmallBurstQuiet between
// enqueues still counts as one burst, for up to kSmallBurstLimit: backward
// gives a layer's bias a moment before its weight (W4: 4 KiB, then 4 MiB
// 0.4-1 ms later), and a round for the bias alone would cost its own
// collective and another round, with the link idle, before the weight's
// collective could start (docs/negotiation.md, step 1).
//
// `waiters` counts the user threads waiting for a result (waiters.h);
// `enqueued` is the coordinator's wake-up signal and `seen` its generation
// when the coordinator woke. `polls_seen` counts the polls of unfinished
// handles when the last round began: a poll since then (which also woke the
// coordinator, on one core) starts the round at once, as a thread waiting
// now does. `spin` (Runtime::DeviceSpin) is how long to poll for a waiter
// before sleeping.
//
// Returns the enqueue generation as the round starts.
inline constexpr std::chrono::microseconds kBurstQuiet{50};
inline constexpr std::chrono::microseconds kBurstLimit{500};
inline constexpr uint64_t kSmallBurstBytes = 64 << 10;
inline constexpr std::chrono::microseconds kSmallBurstQuiet{1000};
inline constexpr std::chrono::microseconds kSmallBurstLimit{2000};
inline constexpr std::chrono::microseconds kSharedCoreLimit{100000};

uint64_t LetBurstFinish(Waiters& waiters, WorkSignal& enqueued, uint64_t seen, bool shared_core, uint64_t polls_seen,
                        std::chrono::microseconds spin, const std::function<uint64_t()>& new_bytes);

}  // namespace accord
