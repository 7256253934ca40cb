// accord for LibTorch: collectives on at::Tensor, DistributedOptimizer, and
// broadcast of parameters and optimizer state. Link accord::torch (CMake:
// find_package(accord) then target_link_libraries(app PRIVATE accord::torch)).
//
//   accord::torch::init();
//   auto model = std::make_shared<Net>();
//   accord::torch::broadcast_parameters(model->named_parameters(), /*root_rank=*/0);
//   torch::optim::SGD sgd(model->parameters(), 0.01);
//   accord::torch::DistributedOptimizer opt(sgd, model->named_parameters());
//   // loop: opt.zero_grad(); loss.backward(); opt.step();
//
// Everything here lives in accord::torch and throws accord::torch::Error on
// failure; the core's own API (accord::Init() returning a Status, ...) stays
// available beside it. See docs/cpp.md.
#pragma once

#include "accord/torch/basics.h"
#include "accord/torch/broadcast_state.h"
#include "accord/torch/collectives.h"
#include "accord/torch/distributed_optimizer.h"
