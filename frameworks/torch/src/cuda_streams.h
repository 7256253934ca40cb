// CUDA streams for the adapter: the one file that uses c10's CUDA API.
//
// The core reads a CUDA tensor once the work queued on its producer's
// stream (a cudaStream_t) has run; LibTorch's producer is the current CUDA
// stream of the tensor's device. cuda_streams.cc is compiled with c10's
// CUDA API only when the LibTorch found has CUDA (ACCORD_TORCH_WITH_CUDA=1,
// see ../CMakeLists.txt). Without it no CUDA tensor can be served, and
// RequireCuda() says so. Everything else in the adapter works with c10's
// device-neutral types (c10::Stream, c10::StreamGuard) and has no #if.
//
// Thread safety: any thread; "current" means the calling thread's.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <string>

namespace accord {
namespace torch {
namespace internal {

// Whether this adapter was built against a LibTorch with CUDA.
bool CudaBuilt();

// Throws Error(kUnimplemented) when `device` is a CUDA device and this
// adapter cannot serve it (built against a LibTorch without CUDA). `what`
// names the call.
void RequireCuda(const c10::Device& device, const std::string& what);

// The current CUDA stream of `device`, a CUDA device.
c10::Stream CurrentStream(const c10::Device& device);

// A CUDA stream as the core takes it: its cudaStream_t (null: the legacy
// default stream).
void* NativeStream(const c10::Stream& stream);

// Makes `waiter` wait, on the device, for the work queued on `producer` so
// far; the host does not wait. Both are CUDA streams.
void StreamWaitsFor(const c10::Stream& waiter, const c10::Stream& producer);

}  // namespace internal
}  // namespace torch
}  // namespace accord
