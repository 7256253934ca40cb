// Helpers for the LibTorch adapter's multi-rank tests: at::Tensors built from
// the seeded per-rank values of tests/mpi/test_util.h, and element-by-element
// comparisons that name the rank, the tensor, the index, the expected and the
// received value.
//
// Include this header first in a test file, before Catch: LibTorch's headers
// bring glog's CHECK macro, which must not replace Catch's CHECK (a failing
// glog CHECK aborts the process). So LibTorch comes first, glog's CHECK is
// dropped, and Catch defines its own.
//
// Thread safety: the test's thread only (Catch2 assertions).
#pragma once

#include <ATen/ATen.h>
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "accord/torch.h"
#include "test_util.h"

namespace accord_torch_test {

// The torch dtypes the collectives are tested on, with the accord dtype.
struct DtypeCase {
  c10::ScalarType torch_type;
  accord::DataType dtype;
};

inline const std::vector<DtypeCase>& TestedDtypes() {
  static const std::vector<DtypeCase> dtypes = {
      {at::kFloat, accord::DataType::kFloat32}, {at::kDouble, accord::DataType::kFloat64},
      {at::kHalf, accord::DataType::kFloat16},  {at::kBFloat16, accord::DataType::kBFloat16},
      {at::kInt, accord::DataType::kInt32},     {at::kLong, accord::DataType::kInt64},
      {at::kByte, accord::DataType::kUInt8},    {at::kChar, accord::DataType::kInt8},
  };
  return dtypes;
}

// A tensor of `shape` and `type` holding `values` (row-major).
inline at::Tensor FromValues(const std::vector<double>& values, at::IntArrayRef shape, c10::ScalarType type) {
  at::Tensor t = at::tensor(values, at::kDouble).reshape(shape);
  return type == at::kBool ? t.ne(0) : t.to(type);
}

// Rank `rank`'s input for data key `key`, as a tensor.
inline at::Tensor RankTensor(const std::string& key, int rank, at::IntArrayRef shape, const DtypeCase& type,
                             accord_test::ValueKind kind = accord_test::ValueKind::kSmall) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return FromValues(accord_test::RankValues(key, rank, type.dtype, n, kind), shape, type.torch_type);
}

inline std::vector<int64_t> Sizes(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

// Checks `got` (any layout) against `expected` (row-major) element by element.
inline bool ExpectTensor(const std::string& what, const at::Tensor& got, const DtypeCase& type,
                         const std::vector<int64_t>& shape, const std::vector<double>& expected,
                         double tolerance = 0.0) {
  if (!got.defined()) {
    FAIL_CHECK("rank " << accord_test::Rank() << ": " << what << ": no tensor");
    return false;
  }
  {
    INFO("rank " << accord_test::Rank() << ": " << what << ": torch dtype");
    CHECK(std::string(c10::toString(got.scalar_type())) == c10::toString(type.torch_type));
  }
  const at::Tensor dense = got.contiguous();
  return accord_test::ExpectValues(what, accord::torch::to_tensor_view(dense), type.dtype, shape, expected, tolerance);
}

// Checks a float64 tensor against a float64 reference tensor of the same shape.
inline bool ExpectClose(const std::string& what, const at::Tensor& got, const at::Tensor& want, double tolerance) {
  const at::Tensor expected = want.detach().to(at::kDouble).contiguous();
  const std::vector<double> values(expected.data_ptr<double>(), expected.data_ptr<double>() + expected.numel());
  const DtypeCase type{at::kDouble, accord::DataType::kFloat64};
  return ExpectTensor(what, got.detach().to(at::kDouble), type, Sizes(expected), values, tolerance);
}

}  // namespace accord_torch_test
