// The CPU reference forward pass: graph.h over the model::cpu ops, in double accumulation.
#pragma once
#include <memory>

#include "model/forward/model.h"

namespace model {

// The CPU reference (double accumulation, weights rounded to fp16 first when precision is F16
// so it computes what the GPU should).
std::unique_ptr<Model> make_cpu_model(const Checkpoint& checkpoint, Precision precision);

}  // namespace model
