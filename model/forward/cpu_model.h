// The CPU reference forward pass: graph.h over the model::cpu ops, in double accumulation.
#pragma once
#include <memory>

#include "model/forward/model.h"

namespace model {

// The CPU reference (double accumulation, weights rounded to fp16 first when precision is F16
// so it computes what the GPU should; keys and values rounded to fp16 as they are cached when
// kv_cache is F16, as GpuModelOptions::kv_cache stores them).
std::unique_ptr<Model> make_cpu_model(const Checkpoint& checkpoint, Precision precision,
                                      Precision kv_cache = Precision::F32);

}  // namespace model
