// The GPU forward pass: weights uploaded once (fp16 or fp32), a KV cache for n_ctx tokens, and
// one command buffer per forward pass, submitted once and waited on once.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include "model/forward/model.h"
#include "model/forward/submissions.h"
#include "vk/context.h"
#include "vk/recorder.h"

namespace model {

class Checkpoint;
class Encoder;

// Called as weights upload: bytes done of the total (a command's progress bar).
using UploadProgress = std::function<void(uint64_t done, uint64_t total)>;

// The kernels come from the device's policy (model/ops/gpu/policy.h).
struct GpuModelOptions {
  Precision precision = Precision::F16;
  bool timestamps = false;  // per-dispatch GPU times (Recorder::timings)
  // With N > 0 a forward pass is one submission per N blocks (the last also runs the head), for
  // drivers whose watchdog ends long submissions. 0: on a GPU, as many blocks per submission as
  // `rates` expects to finish within its budget (model/forward/submissions.h); on a CPU device
  // (no watchdog) one submission, unless `rates` is given. Same logits either way. Where one
  // block alone is over the budget, a causal model's prompt also runs in chunks
  // (prompt_chunks): the same logits within rounding, since each chunk's matmuls and attention
  // reduce over the same values in a different grouping.
  uint32_t split_layers = 0;
  UploadProgress on_upload;
  std::optional<SubmissionRates> rates;
  // A decode step whose recording would be the last one's again (the position is read at run
  // time, so it is until the plan changes: a kernel or a key-block count past a length, a
  // window slide) submits that recording again instead of recording it (Recorder::replay).
  // false: every pass is recorded, as a test compares.
  bool replay = true;
  // Sequences decoded together (gpt2vk serve --parallel): each slot a KV cache of slot_context
  // tokens (0: n_ctx), slot 0 the one logits() and next() use. With more than one, the model's
  // slot_* calls run them (Model::slot_decode); at most kMaxSlots, where a row's matmuls reduce
  // in the same order whatever the rows' count.
  uint32_t slots = 1;
  uint32_t slot_context = 0;
  // A decoder with cross-attention: its source caches ([n_ctx, A] of keys and of values per
  // layer each). 1: every slot reads the one set_source() gives (beams of one source); up to
  // `slots`: slot s < sources may have a source of its own (Model::slot_set_source), so that
  // slots decode different sources together.
  uint32_t sources = 1;
  // The KV cache's elements: F32, or F16 (half its memory and of the bytes a decoded token's
  // attention reads, each key and value rounded to fp16 once; logits within the tolerance
  // docs/benchmark.md states). Any kernel set; the CPU set's texel attention reads only fp32,
  // so with F16 it runs the storage-buffer kernels.
  Precision kv_cache = Precision::F32;
  // An encoder's sequences per pass (Encoder::encode_batch): the activations hold this many
  // sequences of n_ctx rows (fewer where one binding could not hold them: maxStorageBufferRange).
  // 1: one sequence a pass, the activations n_ctx rows as a decoder's.
  uint32_t encoder_batch = 1;
};

inline constexpr uint32_t kMaxSlots = 8;

// `device` must outlive the model.
std::unique_ptr<Model> make_gpu_model(const Checkpoint& checkpoint, const vk::Device& device,
                                      const GpuModelOptions& options = {});

// The recorder statistics and timings of the model's last forward pass (for the benchmark and
// the tests that prove one submission per token). `model` must come from make_gpu_model.
const vk::RecorderStats& gpu_stats(const Model& model);
std::vector<vk::DispatchTime> gpu_timings(const Model& model);
// The same of a GPU encoder's last pass (`encoder` from make_gpu_encoder).
const vk::RecorderStats& gpu_stats(const Encoder& encoder);
std::vector<vk::DispatchTime> gpu_timings(const Encoder& encoder);
// How long a wait for one of the last pass's submissions may take (submission_timeout).
double gpu_submission_timeout(const Model& model);
// "gpu (forced ...)" or "cpu (auto: a CPU device)": the kernel set the model runs.
std::string gpu_kernels(const Model& model);

}  // namespace model
