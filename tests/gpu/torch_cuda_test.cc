// The LibTorch adapter (accord::torch) on CUDA tensors, one rank, a real GPU:
//   - every collective (allreduce with every op and scale factors, grouped
//     allreduce, allgather, broadcast, alltoall, reducescatter) on CUDA
//     tensors of several dtypes gives what the same call gives on CPU
//     tensors, element for element, on the input's device;
//   - a tensor written on a side stream behind a long computation, handed to
//     accord with that stream current, is reduced as written; the same with
//     wait_on_stream(), which returns while the GPU is still busy and makes
//     the current stream, not the host, wait;
//   - DistributedOptimizer, broadcast_parameters and
//     broadcast_optimizer_state on a small CUDA model give the parameters
//     the same training gives on the CPU.
// Built only when the LibTorch found has CUDA (tests/gpu/CMakeLists.txt);
// gpu_test_main.cc skips the program when no GPU is visible.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>
// LibTorch may bring glog's CHECK, which aborts; Catch's must win.
#undef CHECK
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // for the listener below
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "accord/torch.h"

namespace {

using accord::ReduceOp;
using accord::StatusCode;
using accord::torch::TensorHandle;

const at::Device kGpu(at::kCUDA, 0);
// Every wait has a limit, so a hang fails with the name of what hung.
constexpr std::chrono::milliseconds kWaitLimit{60000};

// Shuts accord down after the last test case (each starts it if needed).
struct AccordShutdown : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunEnded(const Catch::TestRunStats& stats) override {
    if (accord::torch::is_initialized()) accord::torch::shutdown();
    TestEventListenerBase::testRunEnded(stats);
  }
};
CATCH_REGISTER_LISTENER(AccordShutdown)

void StartAccord() {
  if (!accord::torch::is_initialized()) REQUIRE_NOTHROW(accord::torch::init());
  REQUIRE(accord::torch::size() == 1);
}

const std::vector<c10::ScalarType>& Dtypes() {
  static const std::vector<c10::ScalarType> dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                                      at::kInt,   at::kLong,   at::kByte, at::kChar};
  return dtypes;
}

std::string Name(c10::ScalarType type) { return c10::toString(type); }

// Values exact in every tested dtype: halves in [-2, 3] for floating point,
// small integers otherwise (non-negative for uint8). `salt` varies them.
at::Tensor Values(c10::ScalarType type, at::IntArrayRef shape, int salt) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  at::Tensor base = at::arange(n, at::kLong).add(salt).remainder(11);
  if (at::isFloatingType(type)) {
    base = base.to(at::kDouble).mul(0.5).sub(2.0);
  } else if (type != at::kByte) {
    base = base.sub(5);
  }
  return base.to(type).reshape(shape);
}

// Why `got` is not `want` (dtype, shape, then the first differing elements,
// with their flat index, expected and received value), or "" if it is.
std::string Difference(const at::Tensor& got, const at::Tensor& want) {
  if (!got.defined()) return "no tensor";
  std::ostringstream out;
  if (got.scalar_type() != want.scalar_type()) {
    out << "dtype " << Name(got.scalar_type()) << ", expected " << Name(want.scalar_type());
    return out.str();
  }
  if (got.sizes() != want.sizes()) {
    out << "shape " << got.sizes() << ", expected " << want.sizes();
    return out.str();
  }
  const at::Tensor g = got.detach().cpu().to(at::kDouble).flatten();
  const at::Tensor w = want.detach().cpu().to(at::kDouble).flatten();
  const at::Tensor differing = g.ne(w).nonzero().flatten();
  if (differing.numel() == 0) return "";
  out << differing.numel() << " of " << g.numel() << " elements differ;";
  for (int64_t k = 0; k < std::min<int64_t>(differing.numel(), 5); ++k) {
    const int64_t i = differing[k].item<int64_t>();
    out << " [" << i << "] expected " << w[i].item<double>() << ", got " << g[i].item<double>() << ";";
  }
  return out.str();
}

// `got` is on the GPU and equals `want` (a CPU tensor) element for element.
void ExpectOnGpu(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (!got.defined()) {
    FAIL_CHECK(what << ": no tensor");
    return;
  }
  {
    INFO(what << ": the output is on " << got.device().str() << ", expected " << kGpu.str());
    CHECK(got.device() == kGpu);
  }
  const std::string difference = Difference(got, want);
  if (!difference.empty()) FAIL_CHECK(what << ": " << difference);
}

at::Tensor Await(TensorHandle handle) { return handle.wait(kWaitLimit); }

// A computation on the current stream of kGpu that keeps it busy for about
// `milliseconds`: float64 matrix products, timed once to find how many.
void KeepBusy(int milliseconds) {
  static double per_product_ms = 0;
  const at::Tensor a = at::rand({2048, 2048}, at::TensorOptions().dtype(at::kDouble).device(kGpu));
  if (per_product_ms == 0) {
    at::matmul(a, a);  // warm-up: libraries, workspace
    c10::cuda::getCurrentCUDAStream(kGpu.index()).synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) at::matmul(a, a);
    c10::cuda::getCurrentCUDAStream(kGpu.index()).synchronize();
    per_product_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 4;
    if (per_product_ms <= 0.01) per_product_ms = 0.01;
  }
  const int products = std::min(5000, static_cast<int>(milliseconds / per_product_ms) + 1);
  at::Tensor x = a;
  for (int i = 0; i < products; ++i) x = at::matmul(a, a);
}

TEST_CASE("allreduce of CUDA tensors gives what it gives on the CPU, every op and dtype", "[torch]") {
  StartAccord();
  for (c10::ScalarType type : Dtypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      const std::string key = "gpu.allreduce." + Name(type) + "." + accord::ReduceOpName(op);
      const at::Tensor cpu = Values(type, {7, 33}, 1);
      accord::AllreduceOptions options;
      options.op = op;
      options.name = key + ".cpu";
      const at::Tensor want = Await(accord::torch::allreduce_async(cpu, options));
      // One rank: every op gives the input back.
      CHECK(Difference(want, cpu).empty());

      options.name = key + ".out";
      const at::Tensor gpu = cpu.to(kGpu);
      const at::Tensor out = Await(accord::torch::allreduce_async(gpu, options));
      ExpectOnGpu(key + " out of place", out, want);
      CHECK_FALSE(out.is_same(gpu));
      ExpectOnGpu(key + " out of place leaves its input", gpu, cpu);

      options.name = key + ".in";
      at::Tensor in_place = cpu.to(kGpu);
      const at::Tensor result = Await(accord::torch::allreduce_async_(in_place, options));
      CHECK(result.is_same(in_place));
      ExpectOnGpu(key + " in place", in_place, want);
    }
    // Scale factors go through the pack and unpack kernels: the same
    // results, rounding of integers included, as the CPU path.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const std::string key = "gpu.allreduce.scaled." + Name(type) + "." + accord::ReduceOpName(op);
      const at::Tensor cpu = Values(type, {5, 9}, 2);
      accord::AllreduceOptions options;
      options.op = op;
      options.prescale_factor = 3.0;
      options.postscale_factor = 0.25;
      options.name = key + ".cpu";
      const at::Tensor want = Await(accord::torch::allreduce_async(cpu, options));
      options.name = key + ".gpu";
      ExpectOnGpu(key, Await(accord::torch::allreduce_async(cpu.to(kGpu), options)), want);
    }
  }
}

TEST_CASE("grouped and fused allreduces, and a non-contiguous tensor in place, on the GPU", "[torch]") {
  StartAccord();
  for (c10::ScalarType type : {at::kFloat, at::kHalf, at::kLong}) {
    const std::string key = "gpu.grouped." + Name(type);
    std::vector<at::Tensor> cpu = {Values(type, {3}, 0), Values(type, {4, 5}, 1), Values(type, {1000}, 2)};
    std::vector<at::Tensor> gpu;
    for (const at::Tensor& t : cpu) gpu.push_back(t.to(kGpu));
    accord::AllreduceOptions options;
    options.op = ReduceOp::kSum;
    options.prescale_factor = 2.0;
    options.name = key + ".cpu";
    const std::vector<at::Tensor> want = accord::torch::grouped_allreduce_async(cpu, options).wait_all(kWaitLimit);
    options.name = key + ".gpu";
    const std::vector<at::Tensor> got = accord::torch::grouped_allreduce_async_(gpu, options).wait_all(kWaitLimit);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) ExpectOnGpu(key + " member " + std::to_string(i), got[i], want[i]);

    // Several tensors in flight at once: fused on the device.
    std::vector<TensorHandle> handles;
    for (size_t i = 0; i < gpu.size(); ++i) {
      options.name = key + ".fused." + std::to_string(i);
      handles.push_back(accord::torch::allreduce_async(gpu[i], options));
    }
    for (size_t i = 0; i < handles.size(); ++i) {
      ExpectOnGpu(key + " fused " + std::to_string(i), Await(std::move(handles[i])), want[i] * 2);
    }
  }
  // In place through a transposed view: staged through a contiguous copy on
  // the GPU and copied back into the view.
  const at::Tensor cpu = Values(at::kFloat, {6, 4}, 3);
  at::Tensor base = cpu.to(kGpu);
  at::Tensor view = base.t();
  REQUIRE_FALSE(view.is_contiguous());
  accord::AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.postscale_factor = 2.0;
  options.name = "gpu.noncontiguous";
  CHECK(Await(accord::torch::allreduce_async_(view, options)).is_same(view));
  ExpectOnGpu("a transposed view reduced in place", base, cpu * 2);
}

TEST_CASE("allgather, broadcast, alltoall and reducescatter of CUDA tensors", "[torch]") {
  StartAccord();
  for (c10::ScalarType type : Dtypes()) {
    const std::string key = "gpu.gather." + Name(type);
    const at::Tensor cpu = Values(type, {5, 3}, 4);

    accord::CollectiveOptions options;
    options.name = key + ".allgather";
    ExpectOnGpu(key + " allgather", Await(accord::torch::allgather_async(cpu.to(kGpu), options)), cpu);

    options.name = key + ".broadcast";
    const at::Tensor source = cpu.to(kGpu);
    const at::Tensor copy = Await(accord::torch::broadcast_async(source, 0, options));
    ExpectOnGpu(key + " broadcast out of place", copy, cpu);
    CHECK_FALSE(copy.is_same(source));
    options.name = key + ".broadcast_";
    at::Tensor target = cpu.to(kGpu);
    CHECK(Await(accord::torch::broadcast_async_(target, 0, options)).is_same(target));
    ExpectOnGpu(key + " broadcast in place", target, cpu);

    options.name = key + ".alltoall";
    TensorHandle alltoall = accord::torch::alltoall_async(cpu.to(kGpu), {5}, options);
    ExpectOnGpu(key + " alltoall", alltoall.wait(kWaitLimit), cpu);
    CHECK(alltoall.received_splits() == std::vector<int64_t>{5});

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      accord::ReducescatterOptions scatter;
      scatter.op = op;
      scatter.postscale_factor = 2.0;
      scatter.name = key + ".reducescatter." + accord::ReduceOpName(op) + ".cpu";
      const at::Tensor want = Await(accord::torch::reducescatter_async(cpu, scatter));
      scatter.name = key + ".reducescatter." + accord::ReduceOpName(op) + ".gpu";
      ExpectOnGpu(key + " reducescatter " + accord::ReduceOpName(op),
                  Await(accord::torch::reducescatter_async(cpu.to(kGpu), scatter)), want);
    }
  }
  // Nothing to gather: an empty output on the input's device.
  accord::CollectiveOptions options;
  options.name = "gpu.gather.empty";
  const at::Tensor empty = Await(accord::torch::allgather_async(at::zeros({0, 3}, kGpu), options));
  CHECK(empty.device() == kGpu);
  CHECK(empty.dim() == 2);
  CHECK(empty.numel() == 0);
}

// Before the test's streams start: copies from pageable host memory would
// make the host wait for the stream.
void Settle() { c10::cuda::getCurrentCUDAStream(kGpu.index()).synchronize(); }

TEST_CASE("a tensor written on a side stream behind a long computation is reduced as written", "[torch]") {
  StartAccord();
  const at::Tensor expected = Values(at::kFloat, {1 << 20}, 5) * 2;
  const at::Tensor source = (expected / 2).to(kGpu);
  at::Tensor tensor = at::zeros({1 << 20}, kGpu);
  Settle();
  const c10::cuda::CUDAStream producer = c10::cuda::getStreamFromPool(false, kGpu.index());
  TensorHandle handle;
  accord::AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.postscale_factor = 2.0;
  options.name = "gpu.late_producer";
  bool busy_at_enqueue = false;
  {
    const c10::cuda::CUDAStreamGuard current(producer);
    KeepBusy(300);
    tensor.copy_(source);  // runs on the producer stream after the computation
    handle = accord::torch::allreduce_async_(tensor, options);
    busy_at_enqueue = !producer.query();
  }
  INFO("the producer stream was " << (busy_at_enqueue ? "still busy" : "already idle")
                                  << " when the allreduce was enqueued (busy makes this test meaningful)");
  CHECK(busy_at_enqueue);
  const at::Tensor result = Await(std::move(handle));
  const std::string difference = Difference(result, expected);
  if (!difference.empty()) {
    FAIL_CHECK("the allreduce did not see what its producer stream wrote (read too early?): " << difference);
  }
}

TEST_CASE("wait_on_stream: the current stream, not the host, waits for the result", "[torch]") {
  StartAccord();
  const c10::cuda::CUDAStream producer = c10::cuda::getStreamFromPool(false, kGpu.index());
  const c10::cuda::CUDAStream consumer = c10::cuda::getStreamFromPool(false, kGpu.index());
  const at::Tensor values = Values(at::kFloat, {1 << 20}, 6);
  const at::Tensor gathered_values = values.narrow(0, 0, 1 << 12).reshape({1 << 10, 4});
  const at::Tensor source = values.to(kGpu);
  const at::Tensor gathered_source = gathered_values.to(kGpu);
  at::Tensor tensor = at::zeros({1 << 20}, kGpu);
  at::Tensor gathered_input = at::zeros({1 << 10, 4}, kGpu);
  Settle();

  TensorHandle reduce, gather;
  {
    const c10::cuda::CUDAStreamGuard current(producer);
    KeepBusy(300);
    tensor.copy_(source);
    gathered_input.copy_(gathered_source);
    accord::AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    sum.name = "gpu.wait_on_stream.allreduce";
    reduce = accord::torch::allreduce_async_(tensor, sum);
    accord::CollectiveOptions options;
    options.name = "gpu.wait_on_stream.allgather";
    gather = accord::torch::allgather_async(gathered_input, options);
  }
  at::Tensor doubled, gathered_doubled;
  bool busy_after_wait = false;
  {
    const c10::cuda::CUDAStreamGuard current(consumer);
    const at::Tensor reduced = reduce.wait_on_stream();
    const at::Tensor gathered = gather.wait_on_stream();
    busy_after_wait = !producer.query();
    CHECK(reduced.is_same(tensor));
    CHECK(gathered.device() == kGpu);
    // Queued on the consumer stream behind the wait: sees the results.
    doubled = reduced * 2;
    gathered_doubled = gathered * 2;
    // Asking again, on the same stream, gives the same tensors.
    CHECK(reduce.wait_on_stream().is_same(reduced));
  }
  INFO("wait_on_stream returned while the producer stream was "
       << (busy_after_wait ? "still busy (the host did not wait for the GPU)" : "already idle"));
  CHECK(busy_after_wait);
  consumer.synchronize();
  const std::string difference = Difference(doubled, values * 2);
  if (!difference.empty()) FAIL_CHECK("the consumer stream did not wait for the allreduce: " << difference);
  const std::string gather_difference = Difference(gathered_doubled, gathered_values * 2);
  if (!gather_difference.empty()) {
    FAIL_CHECK("the consumer stream did not wait for the allgather: " << gather_difference);
  }
  // wait() afterwards: the final status (OK), the same tensors.
  CHECK(reduce.wait(kWaitLimit).is_same(tensor));
  CHECK(reduce.poll());
  CHECK(gather.wait(kWaitLimit).device() == kGpu);
}

TEST_CASE("options.stream other than the current stream is refused", "[torch]") {
  StartAccord();
  const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, kGpu.index());
  accord::AllreduceOptions options;
  options.name = "gpu.wrong_stream";
  options.stream = other.stream();
  try {
    accord::torch::allreduce(at::ones({4}, kGpu), options);
    FAIL_CHECK("an allreduce with options.stream set to a stream that is not current was accepted");
  } catch (const accord::torch::Error& error) {
    CHECK(error.code() == StatusCode::kInvalidArgument);
    INFO(error.what());
    CHECK(std::string(error.what()).find("current CUDA stream") != std::string::npos);
  }
  // That stream made current is accepted.
  const c10::cuda::CUDAStreamGuard current(other);
  CHECK(at::equal(accord::torch::allreduce(at::ones({4}, kGpu), options).cpu(), at::ones({4})));
}

// ------------------------------------------------------------- training

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::shared_ptr<Net> MakeNet(const at::Device& device) {
  torch::manual_seed(11);
  auto net = std::make_shared<Net>();
  net->to(at::kDouble);
  net->to(device);
  return net;
}

// Trains a float64 model for a few steps with DistributedOptimizer over SGD
// with momentum on `device`, starting from broadcast parameters and state;
// returns the parameters, on the CPU.
std::vector<at::Tensor> Train(const at::Device& device, accord::torch::Compression compression,
                              const std::string& key) {
  auto net = MakeNet(device);
  accord::torch::broadcast_parameters(net, 0);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  accord::torch::broadcast_optimizer_state(sgd, 0);
  accord::torch::DistributedOptimizerOptions options;
  options.compression = compression;
  accord::torch::DistributedOptimizer opt(sgd, net->named_parameters(), options);
  torch::manual_seed(12);
  for (int step = 0; step < 5; ++step) {
    const at::Tensor x = at::randn({16, 8}, at::kDouble).to(device);
    const at::Tensor y = at::randn({16, 4}, at::kDouble).to(device);
    opt.zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
    {
      INFO(key << " on " << device.str() << ", step " << step << ": every gradient's reduction starts during backward");
      CHECK(opt.started_reductions() == static_cast<int>(opt.parameter_names().size()));
    }
    opt.step();
  }
  accord::torch::broadcast_optimizer_state(sgd, 0);
  std::vector<at::Tensor> parameters;
  for (const at::Tensor& p : net->parameters()) {
    CHECK(p.device() == device);
    parameters.push_back(p.detach().cpu());
  }
  return parameters;
}

TEST_CASE("DistributedOptimizer on a CUDA model ends with the CPU model's parameters", "[torch]") {
  StartAccord();
  for (auto compression : {accord::torch::Compression::kNone, accord::torch::Compression::kFp16}) {
    const bool fp16 = compression == accord::torch::Compression::kFp16;
    const std::string key = fp16 ? "fp16" : "no compression";
    const std::vector<at::Tensor> cpu = Train(at::kCPU, compression, key);
    const std::vector<at::Tensor> gpu = Train(kGpu, compression, key);
    REQUIRE(cpu.size() == gpu.size());
    // float64 on both; the GPU sums in another order. With fp16 a gradient
    // may round to a neighbouring float16 on one device only.
    const double tolerance = fp16 ? 1e-3 : 1e-9;
    for (size_t i = 0; i < cpu.size(); ++i) {
      const double deviation = (gpu[i] - cpu[i]).abs().max().item<double>();
      INFO(key << ": parameter " << i << " of shape " << cpu[i].sizes() << ": largest deviation from the CPU model "
               << deviation << " (allowed " << tolerance << ")");
      CHECK(deviation <= tolerance);
    }
  }
}

}  // namespace
