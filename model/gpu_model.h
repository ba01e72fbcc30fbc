// The GPU forward pass: weights uploaded once (fp16 or fp32), a KV cache for n_ctx tokens, and
// one command buffer per forward pass, submitted once and waited on once.
#pragma once
#include <memory>

#include "model/model.h"
#include "vk/context.h"
#include "vk/recorder.h"

namespace model {

class Checkpoint;

struct GpuModelOptions {
  Precision precision = Precision::F16;
  bool progress = true;          // a progress bar on stderr while weights upload
  bool timestamps = false;       // per-dispatch GPU times (Recorder::timings)
  // A forward pass is one submission; with N > 0 it is one per N blocks (the last also runs the
  // head), for drivers whose watchdog ends long submissions. Same logits either way.
  uint32_t split_layers = 0;
};

// `device` must outlive the model.
std::unique_ptr<Model> make_gpu_model(const Checkpoint& checkpoint, const vkr::Device& device,
                                      const GpuModelOptions& options = {});

// The recorder statistics and timings of the model's last forward pass (for the benchmark and
// the tests that prove one submission per token). `model` must come from make_gpu_model.
const vkr::RecorderStats& gpu_stats(const Model& model);
std::vector<vkr::DispatchTime> gpu_timings(const Model& model);

}  // namespace model
