// Tests for TensorQueue's count of the bytes no round has announced yet
// (NewBytes), which the coordinator reads to decide whether a burst is
// small: single and grouped enqueues add their inputs' bytes; a refused
// enqueue adds nothing; taking the requests, removing an unannounced entry
// and closing the queue take them away again. Finished entries' nodes are
// kept for later enqueues, holding nothing alive.
#include "runtime/tensor_queue.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

namespace accord {
namespace {

TensorEntry Entry(const std::string& name, DataType dtype, int64_t elements) {
  TensorEntry e;
  e.request.name = name;
  e.request.dtype = dtype;
  e.request.shape = {elements};
  e.input = TensorView{nullptr, dtype, {elements}, Device::CPU()};
  return e;
}

TEST_CASE("TensorQueue counts the bytes of what no round has announced", "[tensor_queue]") {
  WorkSignal signal;
  TensorQueue queue(&signal);
  CHECK(queue.NewBytes() == 0);

  REQUIRE(queue.Enqueue(Entry("bias", DataType::kFloat32, 1024)).ok());
  CHECK(queue.NewBytes() == 4096);
  std::vector<TensorEntry> group;
  group.push_back(Entry("weight", DataType::kFloat16, 3000));
  group.push_back(Entry("step", DataType::kInt64, 1));
  REQUIRE(queue.Enqueue(std::move(group)).ok());
  CHECK(queue.NewBytes() == 4096 + 6000 + 8);

  // A name already in flight is refused and counts nothing.
  CHECK_FALSE(queue.Enqueue(Entry("bias", DataType::kFloat32, 99)).ok());
  std::vector<TensorEntry> twice;
  twice.push_back(Entry("other", DataType::kFloat32, 10));
  twice.push_back(Entry("other", DataType::kFloat32, 10));
  CHECK_FALSE(queue.Enqueue(std::move(twice)).ok());
  CHECK(queue.NewBytes() == 4096 + 6000 + 8);

  // Announced: nothing is new any more, though all three are in flight.
  CHECK(queue.TakeNewRequests().size() == 3);
  CHECK(queue.NewBytes() == 0);
  CHECK(queue.size() == 3);

  // Removing an announced entry leaves the count alone; removing one not
  // yet announced takes its bytes away.
  REQUIRE(queue.Enqueue(Entry("late", DataType::kFloat64, 100)).ok());
  CHECK(queue.NewBytes() == 800);
  const std::string bias = "bias";
  CHECK(queue.Remove({&bias}).front());
  CHECK(queue.NewBytes() == 800);
  const std::string late = "late";
  CHECK(queue.Remove({&late}).front());
  CHECK(queue.NewBytes() == 0);
  CHECK(queue.TakeNewRequests().empty());

  REQUIRE(queue.Enqueue(Entry("last", DataType::kFloat32, 5)).ok());
  CHECK(queue.NewBytes() == 20);
  CHECK(queue.Close(Status::ShutDown("closed")).size() == 3);
  CHECK(queue.NewBytes() == 0);
}

TEST_CASE("TensorQueue takes out one entry by name, announced or not", "[tensor_queue]") {
  WorkSignal signal;
  TensorQueue queue(&signal);
  REQUIRE(queue.Enqueue(Entry("loss", DataType::kFloat32, 1)).ok());
  REQUIRE(queue.Enqueue(Entry("metric", DataType::kFloat64, 2)).ok());
  CHECK(queue.TakeNewRequests().size() == 2);
  REQUIRE(queue.Enqueue(Entry("late", DataType::kInt32, 3)).ok());

  // Absent: an empty handle, the queue untouched.
  CHECK_FALSE(queue.Remove(std::string("missing")));
  CHECK(queue.size() == 3);

  TensorQueue::Taken loss = queue.Remove(std::string("loss"));
  REQUIRE(loss);
  CHECK(loss.key() == "loss");
  CHECK(loss.mapped().input.dtype == DataType::kFloat32);
  CHECK(queue.size() == 2);
  CHECK_FALSE(queue.Remove(std::string("loss")));  // taken once only

  // Not yet announced: it leaves the new requests too, bytes and all.
  CHECK(queue.NewBytes() == 12);
  TensorQueue::Taken late = queue.Remove(std::string("late"));
  REQUIRE(late);
  CHECK(late.mapped().request.name == "late");
  CHECK(queue.NewBytes() == 0);
  CHECK(queue.TakeNewRequests().empty());

  // The name is free again.
  CHECK(queue.Enqueue(Entry("loss", DataType::kFloat32, 1)).ok());
  CHECK(queue.size() == 2);
}

TEST_CASE("TensorQueue reuses finished nodes, holding nothing alive in them", "[tensor_queue]") {
  WorkSignal signal;
  TensorQueue queue(&signal);
  auto state = std::make_shared<HandleState>(1);
  TensorEntry first = Entry("a", DataType::kFloat32, 4);
  first.handle = state;
  REQUIRE(queue.Enqueue(std::move(first)).ok());
  CHECK(state.use_count() == 2);

  // A batch's nodes are spare at once, released of their handles.
  const std::string a = "a";
  std::vector<TensorQueue::Taken> batch = queue.Remove({&a});
  REQUIRE(batch.front());
  const TensorEntry* node = &batch.front().mapped();
  queue.Recycle(&batch);
  CHECK_FALSE(batch.front());
  CHECK(state.use_count() == 1);

  // The next enqueue takes that node, with its own fields in it.
  REQUIRE(queue.Enqueue(Entry("b", DataType::kInt64, 3)).ok());
  CHECK(queue.NewBytes() == 24);
  CHECK(queue.size() == 1);

  // A name in flight is refused and the entry given back whole, whether or
  // not a spare node was at hand.
  queue.Recycle(&batch);  // nothing to give: no node, no harm
  const Status refused_fresh = queue.Enqueue(Entry("b", DataType::kFloat32, 1));
  CHECK(refused_fresh.message().find("'b' is already in flight") != std::string::npos);
  REQUIRE(queue.Enqueue(Entry("d", DataType::kFloat32, 1)).ok());
  const std::string d_name = "d";
  std::vector<TensorQueue::Taken> d = queue.Remove({&d_name});
  queue.Recycle(&d);  // now a spare node is at hand for the next try
  TensorEntry again = Entry("b", DataType::kFloat32, 1);
  again.handle = state;
  const Status refused = queue.Enqueue(std::move(again));
  CHECK(refused.message().find("'b' is already in flight") != std::string::npos);
  CHECK(again.request.name == "b");
  CHECK(again.handle == state);

  TensorQueue::Taken b = queue.Remove(std::string("b"));
  REQUIRE(b);
  CHECK(&b.mapped() == node);
  CHECK(b.key() == "b");
  CHECK(b.mapped().request.name == "b");
  CHECK(b.mapped().input.dtype == DataType::kInt64);
  CHECK(b.mapped().input.shape == Shape{3});
  CHECK_FALSE(b.mapped().announced);

  // A single node (a carried allreduce) becomes spare at the queue's next
  // lock taken by the coordinator.
  queue.Recycle(&b);
  CHECK_FALSE(b);
  CHECK(queue.TakeNewRequests().empty());
  REQUIRE(queue.Enqueue(Entry("c", DataType::kFloat16, 2)).ok());
  TensorQueue::Taken c = queue.Remove(std::string("c"));
  REQUIRE(c);
  CHECK(&c.mapped() == node);
  CHECK(c.mapped().input.dtype == DataType::kFloat16);
  CHECK(queue.size() == 0);
}

}  // namespace
}  // namespace accord
