// broadcast_optimizer_state's gradients, and broadcast_parameters and
// broadcast_optimizer_state refusing tensors that differ between ranks.
//
// Gradients: rank r sets each parameter's gradient from rank-dependent
// values (tests/mpi/test_util.h), in every way a rank's gradient can stand
// against the root's (none, another dtype or shape, frozen here or on the
// root, sparse); afterwards every rank must hold, element for element, what
// accord.torch's broadcast_optimizer_state leaves in Python.
//
// Differences: one rank has an extra layer, a tensor of another shape or
// dtype, or its unnamed tensors in another order. Every rank must throw
// kInvalidArgument at once with the same message, which the test spells out
// in full, and accord must work afterwards. (A hang fails the CTest timeout.)
#include "torch_test_util.h"  // first: LibTorch, then Catch

#include <string>
#include <utility>
#include <vector>

#include "tensor_agreement.h"

namespace {

using accord::torch::DistributedOptimizer;
using namespace accord_test;
using namespace accord_torch_test;

const DtypeCase kF64{at::kDouble, accord::DataType::kFloat64};
const DtypeCase kF32{at::kFloat, accord::DataType::kFloat32};

// "rank 1" or "ranks 0, 2", as the messages list ranks.
std::string RanksText(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// Every rank but `rank`.
std::vector<int> AllBut(int rank) {
  std::vector<int> ranks;
  for (int r = 0; r < Size(); ++r) {
    if (r != rank) ranks.push_back(r);
  }
  return ranks;
}

// Calls `call`, which must throw kInvalidArgument with exactly `expected`.
template <typename Call>
void ExpectRefusal(const std::string& what, const std::string& expected, Call call) {
  INFO("rank " << Rank() << ": " << what);
  try {
    call();
    FAIL_CHECK("rank " << Rank() << ": " << what << ": no error");
  } catch (const accord::torch::Error& error) {
    CHECK(error.code() == accord::StatusCode::kInvalidArgument);
    CHECK(std::string(error.what()) == expected);
  }
}

// A Sum allreduce over every rank, checked: accord still works.
void CheckUsable(const std::string& what) {
  accord::AllreduceOptions sum;
  sum.op = accord::ReduceOp::kSum;
  sum.name = "after." + what;
  const at::Tensor total = accord::torch::allreduce(at::full({3}, Rank() + 1.0, at::kDouble), sum);
  ExpectTensor(what + ": an allreduce after the error", total, kF64, {3},
               std::vector<double>(3, Size() * (Size() + 1) / 2.0));
}

// ExpectRefusal on every rank, then CheckUsable.
template <typename Call>
void ExpectRefused(const std::string& what, const std::string& expected, Call call) {
  ExpectRefusal(what, expected, call);
  CheckUsable(what);
}

// ------------------------------------------------------------- gradients

// A parameter with rank-dependent values.
at::Tensor Param(const std::string& key, at::IntArrayRef shape, bool requires_grad) {
  return RankTensor(key, Rank(), shape, kF64).set_requires_grad(requires_grad);
}

// Rank `rank`'s gradient of parameter `key`.
at::Tensor Grad(const std::string& key, int rank, at::IntArrayRef shape, const DtypeCase& type = kF64) {
  return RankTensor("grad." + key, rank, shape, type);
}

// The parameters of the gradient test, each with how its gradient stands
// on the root and on the other ranks, and what every rank must end with.
struct GradientCase {
  std::string key;
  std::vector<int64_t> shape;
  at::Tensor param;
  at::Tensor expected;  // undefined: no gradient
};

std::vector<GradientCase> MakeGradientCases(int root) {
  const bool is_root = Rank() == root;
  std::vector<GradientCase> cases;
  auto add = [&](const std::string& key, std::vector<int64_t> shape, bool requires_grad, at::Tensor grad,
                 at::Tensor expected) {
    at::Tensor p = Param(key, shape, requires_grad);
    if (grad.defined()) p.mutable_grad() = grad;
    cases.push_back({key, std::move(shape), p, std::move(expected)});
  };
  const int r = Rank();
  // Every rank has a gradient: the root's everywhere.
  add("dense", {2, 3}, true, Grad("dense", r, {2, 3}), Grad("dense", root, {2, 3}));
  // The root has none yet: zeros everywhere, the root included.
  add("none_on_root", {4}, true, is_root ? at::Tensor() : Grad("none_on_root", r, {4}), at::zeros({4}, at::kDouble));
  // Frozen everywhere: each rank keeps its own.
  add("frozen", {3}, false, Grad("frozen", r, {3}), Grad("frozen", r, {3}));
  // Another dtype, another shape, or none here: a new tensor of the root's.
  add("other_dtype", {2, 2}, true, is_root ? Grad("other_dtype", r, {2, 2}) : Grad("other_dtype", r, {2, 2}, kF32),
      Grad("other_dtype", root, {2, 2}));
  add("other_shape", {5}, true, is_root ? Grad("other_shape", r, {5}) : Grad("other_shape", r, {1}),
      Grad("other_shape", root, {5}));
  add("none_here", {3}, true, is_root ? Grad("none_here", r, {3}) : at::Tensor(), Grad("none_here", root, {3}));
  // Frozen on this rank only, or on the root only: each rank keeps its own.
  add("frozen_here", {2}, is_root, Grad("frozen_here", r, {2}), Grad("frozen_here", r, {2}));
  add("frozen_on_root", {2}, !is_root, Grad("frozen_on_root", r, {2}), Grad("frozen_on_root", r, {2}));
  // The root's sparse gradient arrives dense; the root keeps its own.
  const at::Tensor sparse = Grad("sparse", root, {3, 2}).to_sparse();
  add("sparse", {3, 2}, true, is_root ? sparse : Grad("sparse", r, {3, 2}), is_root ? sparse : sparse.to_dense());
  return cases;
}

void CheckGradients(const std::string& what, const std::vector<GradientCase>& cases) {
  for (const GradientCase& c : cases) {
    const at::Tensor grad = c.param.grad();
    INFO("rank " << Rank() << ": " << what << ": gradient of '" << c.key << "'");
    REQUIRE(grad.defined());
    CHECK(grad.is_sparse() == c.expected.is_sparse());
    ExpectClose(what + ": gradient of '" + c.key + "'", grad.is_sparse() ? grad.to_dense() : grad,
                c.expected.is_sparse() ? c.expected.to_dense() : c.expected, 0.0);
  }
}

std::vector<at::Tensor> ParamsOf(const std::vector<GradientCase>& cases) {
  std::vector<at::Tensor> params;
  for (const GradientCase& c : cases) params.push_back(c.param);
  return params;
}

TEST_CASE("broadcast_optimizer_state: every trainable parameter ends with the root's gradient") {
  for (int root : {Size() - 1, 0}) {
    const std::string suffix = " (root " + std::to_string(root) + ")";
    SECTION("an SGD" + suffix) {
      std::vector<GradientCase> cases = MakeGradientCases(root);
      const at::Tensor dense_before = cases[0].param.grad();
      torch::optim::SGD sgd(ParamsOf(cases), torch::optim::SGDOptions(0.1).momentum(0.9));
      accord::torch::broadcast_optimizer_state(sgd, root);
      CheckGradients("SGD" + suffix, cases);
      // A gradient of the root's dtype and shape receives it in place.
      CHECK(cases[0].param.grad().data_ptr() == dense_before.data_ptr());
    }
    SECTION("an Adam, through a DistributedOptimizer" + suffix) {
      std::vector<GradientCase> cases = MakeGradientCases(root);
      torch::optim::Adam adam(ParamsOf(cases), torch::optim::AdamOptions(0.01 * (Rank() + 1)));
      torch::OrderedDict<std::string, at::Tensor> named;
      for (const GradientCase& c : cases) named.insert(c.key, c.param);
      DistributedOptimizer opt(adam, named);
      accord::torch::broadcast_optimizer_state(opt, root);
      CheckGradients("DistributedOptimizer" + suffix, cases);
      const auto& options = static_cast<const torch::optim::AdamOptions&>(adam.param_groups()[0].options());
      CHECK(options.lr() == 0.01 * (root + 1));
    }
  }
}

// ------------------------------------------------------------ differences

// fc1 and fc2 on every rank, and fc3 where `extra`.
struct Net : torch::nn::Module {
  explicit Net(bool extra) {
    fc1 = register_module("fc1", torch::nn::Linear(4, 6));
    fc2 = register_module("fc2", torch::nn::Linear(6, 3));
    if (extra) fc3 = register_module("fc3", torch::nn::Linear(3, 2));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

TEST_CASE("broadcast_parameters: tensors that differ between ranks fail on every rank, naming them") {
  if (Size() == 1) return;
  const std::string prefix = "broadcast_parameters: the ranks' tensors differ: ";
  SECTION("a layer only rank 1 has") {
    auto net = std::make_shared<Net>(Rank() == 1);
    const std::string others = RanksText(AllBut(1));
    ExpectRefused("extra layer",
                  prefix + "'fc3.weight' is missing on " + others + " (present on rank 1 as float32 [2, 3]); " +
                      "'fc3.bias' is missing on " + others + " (present on rank 1 as float32 [2])",
                  [&] { accord::torch::broadcast_parameters(net, 0); });
  }
  SECTION("in a process set of the last two ranks: named by their global ranks") {
    const std::vector<int> members = {Size() - 2, Size() - 1};
    const accord::Result<accord::ProcessSetId> set = accord::AddProcessSet(members);
    INFO("rank " << Rank() << ": AddProcessSet: " << set.status().ToString());
    REQUIRE(set.ok());  // on every rank alike
    if (Rank() >= members[0]) {
      auto net = std::make_shared<Net>(Rank() == members[1]);
      const std::string lacking = std::to_string(members[0]), holding = std::to_string(members[1]);
      ExpectRefusal("process set",
                    prefix + "'fc3.weight' is missing on rank " + lacking + " (present on rank " + holding +
                        " as float32 [2, 3]); 'fc3.bias' is missing on rank " + lacking + " (present on rank " +
                        holding + " as float32 [2])",
                    [&] { accord::torch::broadcast_parameters(net, 0, set.value()); });
    }
    CHECK(accord::RemoveProcessSet(set.value()).ok());
    CheckUsable("process set");
  }
  SECTION("a shape on the last rank and a dtype on rank 1") {
    const int last = Size() - 1;
    torch::OrderedDict<std::string, at::Tensor> named;
    named.insert("a", at::zeros(Rank() == last ? std::vector<int64_t>{3, 3} : std::vector<int64_t>{2, 3}));
    named.insert("b", at::zeros({4}, Rank() == 1 ? at::kDouble : at::kFloat));
    named.insert("c", at::zeros({1}));
    ExpectRefused("shape and dtype",
                  prefix + "'a' is float32 [2, 3] on " + RanksText(AllBut(last)) + " and float32 [3, 3] on rank " +
                      std::to_string(last) + "; 'b' is float32 [4] on " + RanksText(AllBut(1)) +
                      " and float64 [4] on rank 1",
                  [&] { accord::torch::broadcast_parameters(named, 0); });
  }
  SECTION("five tensors rank 1 lacks: three named, two counted") {
    torch::OrderedDict<std::string, at::Tensor> named;
    named.insert("w", at::zeros({2}));
    for (int i = 0; i < 5 && Rank() != 1; ++i) named.insert("x" + std::to_string(i), at::zeros({1}));
    std::string expected = prefix;
    for (int i = 0; i < 3; ++i) {
      expected += "'x" + std::to_string(i) + "' is missing on rank 1 (present on " + RanksText(AllBut(1)) +
                  " as float32 [1]); ";
    }
    ExpectRefused("five missing", expected + "and 2 more",
                  [&] { accord::torch::broadcast_parameters(named, Size() - 1); });
  }
  SECTION("unnamed tensors in another order on rank 1, or one more on the last rank") {
    std::vector<at::Tensor> tensors = {at::zeros({3}), at::zeros({2, 2})};
    if (Rank() == 1) std::swap(tensors[0], tensors[1]);
    const std::string others = RanksText(AllBut(1));
    ExpectRefused("unnamed order",
                  prefix + "'#0' is float32 [3] on " + others + " and float32 [2, 2] on rank 1; '#1' is float32 " +
                      "[2, 2] on " + others + " and float32 [3] on rank 1",
                  [&] { accord::torch::broadcast_parameters(tensors, 0); });
    const int last = Size() - 1;
    std::vector<at::Tensor> more = {at::zeros({3}), at::Tensor(), at::zeros({5}, at::kLong)};
    if (Rank() != last) more.pop_back();
    ExpectRefused("unnamed extra",
                  prefix + "'#2' is missing on " + RanksText(AllBut(last)) + " (present on rank " +
                      std::to_string(last) + " as int64 [5])",
                  [&] { accord::torch::broadcast_parameters(more, 0); });
  }
}

TEST_CASE("broadcast_parameters: named tensors in another order agree and are broadcast by name") {
  for (int root : {Size() - 1, 0}) {
    SECTION("root " + std::to_string(root)) {
      const std::vector<std::string> keys = {"bp.order.a", "bp.order.b", "bp.order.c"};
      const std::vector<std::vector<int64_t>> shapes = {{3}, {2, 2}, {1}};
      torch::OrderedDict<std::string, at::Tensor> named;
      for (size_t k = 0; k < keys.size(); ++k) {
        const size_t i = Rank() % 2 == 1 ? keys.size() - 1 - k : k;  // odd ranks: reversed
        named.insert(keys[i], RankTensor(keys[i], Rank(), shapes[i], kF32));
      }
      CHECK_NOTHROW(accord::torch::broadcast_parameters(named, root));
      for (size_t i = 0; i < keys.size(); ++i) {
        ExpectTensor(keys[i] + " from root " + std::to_string(root), named[keys[i]], kF32, shapes[i],
                     RankValues(keys[i], root, kF32.dtype, accord::NumElements(shapes[i])));
      }
    }
  }
}

TEST_CASE("broadcast_optimizer_state: parameters that differ between ranks fail on every rank, naming them") {
  if (Size() == 1) return;
  const std::string prefix = "broadcast_optimizer_state: the ranks' tensors differ: ";
  SECTION("a layer only rank 1 has, through a DistributedOptimizer: named by place and name") {
    auto net = std::make_shared<Net>(Rank() == 1);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    DistributedOptimizer opt(sgd, net->named_parameters());
    const std::string others = RanksText(AllBut(1));
    ExpectRefused("optimizer extra layer",
                  prefix + "'param_groups[0][4] (fc3.weight)' is missing on " + others +
                      " (present on rank 1 as float32 [2, 3]); 'param_groups[0][5] (fc3.bias)' is missing on " +
                      others + " (present on rank 1 as float32 [2])",
                  [&] { accord::torch::broadcast_optimizer_state(opt, 0); });
  }
  SECTION("a shape on the last rank, a plain optimizer: named by place") {
    const int last = Size() - 1;
    std::vector<at::Tensor> params = {at::zeros({Rank() == last ? 5 : 6, 4}, at::kDouble), at::zeros({2})};
    torch::optim::SGD sgd(params, 0.1);
    ExpectRefused("optimizer shape",
                  prefix + "'param_groups[0][0]' is float64 [6, 4] on " + RanksText(AllBut(last)) +
                      " and float64 [5, 4] on rank " + std::to_string(last),
                  [&] { accord::torch::broadcast_optimizer_state(sgd, 0); });
  }
}

TEST_CASE("ExplainDifferences: versions, missing ranks, and what it does not spell out") {
  using accord::torch::internal::Described;
  using accord::torch::internal::ExplainDifferences;
  const Described w0{"w0", "float32", {1}}, w0_wide{"w0", "float32", {2}}, w0_int{"w0", "int64", {1}};
  const Described w1{"w1", "float32", {1}}, w2{"w2", "float32", {1}}, w3{"w3", "float32", {1}};
  // Four differing names over three ranks (4, 5, 6): three spelled out.
  CHECK(ExplainDifferences({{w0, w1, w2, w3}, {w0_wide}, {w0}}, {4, 5, 6}) ==
        "'w0' is float32 [1] on ranks 4, 6 and float32 [2] on rank 5; "
        "'w1' is missing on ranks 5, 6 (present on rank 4 as float32 [1]); "
        "'w2' is missing on ranks 5, 6 (present on rank 4 as float32 [1]); and 1 more");
  // Two versions and a rank that lacks it.
  CHECK(ExplainDifferences({{w0}, {}, {w0_int}}, {0, 1, 2}) ==
        "'w0' is float32 [1] on rank 0 and int64 [1] on rank 2, missing on rank 1");
  // Names in the order of the lowest rank that holds them.
  CHECK(ExplainDifferences({{w1}, {w3, w2}}, {0, 1}) ==
        "'w1' is missing on rank 1 (present on rank 0 as float32 [1]); "
        "'w3' is missing on rank 0 (present on rank 1 as float32 [1]); "
        "'w2' is missing on rank 0 (present on rank 1 as float32 [1])");
  // The same tensors, in another order: nothing to name.
  CHECK(ExplainDifferences({{w0, w1}, {w1, w0}}, {0, 1}) ==
        "the ranks list the same tensors in a different order or with repeated names");
}

}  // namespace
