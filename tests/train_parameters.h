// Parameters for the training tests: GPT-2's initialisation, every value then moved by up to
// 0.2 (uniform, seeded), so that LayerNorm gains sit away from 1, every path is alive and the
// gradients have sizes central differences resolve.
#pragma once
#include <functional>
#include <string>

#include "model/formats/config.h"
#include "model/training/parameters.h"

namespace test {

model::training::Parameters random_parameters(const model::Config& config, unsigned seed);

// Checks grads, a step's analytic gradients at params, against central differences of loss()
// (the step's loss at params as they are) at up to 6 elements spread over each tensor, h = 1e-3
// (the step the floats took): |numeric - analytic| <= 2e-3 max|g| + 2e-2 |g|, max over every
// tensor. params is perturbed in place and restored.
void check_step_gradients(const std::string& what, model::training::Parameters& params,
                          const model::training::Parameters& grads,
                          const std::function<double()>& loss);

}  // namespace test
