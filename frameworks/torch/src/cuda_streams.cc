#include "cuda_streams.h"

#include "accord/torch/basics.h"

#ifndef ACCORD_TORCH_WITH_CUDA
#define ACCORD_TORCH_WITH_CUDA 0
#endif

#if ACCORD_TORCH_WITH_CUDA
#include <c10/core/Event.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace accord {
namespace torch {
namespace internal {

#if ACCORD_TORCH_WITH_CUDA

bool CudaBuilt() { return true; }

void RequireCuda(const c10::Device& device, const std::string& what) {}

c10::Stream CurrentStream(const c10::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).unwrap();
}

void* NativeStream(const c10::Stream& stream) { return c10::cuda::CUDAStream(stream).stream(); }

void StreamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer) {
  if (waiter == producer) return;
  c10::Event event(c10::DeviceType::CUDA);
  event.record(producer);
  event.block(waiter);
}

#else  // LibTorch without CUDA

namespace {

[[noreturn]] void NoCuda(const std::string& what, const c10::Device& device) {
  throw Error(
      StatusCode::kUnimplemented,
      what + ": the tensor is on " + device.str() +
          ", but this accord_torch was built against a LibTorch without CUDA, so it cannot serve CUDA "
          "tensors; build accord against a LibTorch with CUDA (for pip's torch: -DCMAKE_PREFIX_PATH=\"$(python3 "
          "-c 'import torch; print(torch.utils.cmake_prefix_path)')\")");
}

}  // namespace

bool CudaBuilt() { return false; }

void RequireCuda(const c10::Device& device, const std::string& what) {
  if (device.is_cuda()) NoCuda(what, device);
}

c10::Stream CurrentStream(const c10::Device& device) { NoCuda("accord::torch", device); }

void* NativeStream(const c10::Stream& stream) { NoCuda("accord::torch", stream.device()); }

void StreamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer) {
  NoCuda("accord::torch", waiter.device());
}

#endif

}  // namespace internal
}  // namespace torch
}  // namespace accord
