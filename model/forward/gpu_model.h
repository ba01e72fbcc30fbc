// The GPU forward pass: weights uploaded once (fp16 or fp32), a KV cache for n_ctx tokens, and
// one command buffer per forward pass, submitted once and waited on once.
#pragma once
#include <functional>
#include <memory>

#include "model/forward/model.h"
#include "vk/context.h"
#include "vk/recorder.h"

namespace model {

class Checkpoint;

// Called as weights upload: bytes done of the total (a command's progress bar).
using UploadProgress = std::function<void(uint64_t done, uint64_t total)>;

// The kernels come from the device's policy (model/ops/gpu/policy.h).
struct GpuModelOptions {
  Precision precision = Precision::F16;
  bool timestamps = false;  // per-dispatch GPU times (Recorder::timings)
  // A forward pass is one submission; with N > 0 it is one per N blocks (the last also runs the
  // head), for drivers whose watchdog ends long submissions. Same logits either way.
  uint32_t split_layers = 0;
  UploadProgress on_upload;
};

// `device` must outlive the model.
std::unique_ptr<Model> make_gpu_model(const Checkpoint& checkpoint, const vk::Device& device,
                                      const GpuModelOptions& options = {});

// The recorder statistics and timings of the model's last forward pass (for the benchmark and
// the tests that prove one submission per token). `model` must come from make_gpu_model.
const vk::RecorderStats& gpu_stats(const Model& model);
std::vector<vk::DispatchTime> gpu_timings(const Model& model);
// "gpu (forced ...)" or "cpu (auto: a CPU device)": the kernel set the model runs.
std::string gpu_kernels(const Model& model);

}  // namespace model
