// What a training run prints and draws (apps/train.cpp): the loss picture, the per-op profile of
// a step, the device memory line and --bench's line.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "model/training/gpu_trainer.h"
#include "vk/context.h"

namespace app {

// loss.svg: the training loss of every step and the validation loss where evaluated, written
// under another name first, so that a kill never leaves half a picture.
void write_plot(const std::filesystem::path& file,
                const std::vector<std::pair<uint64_t, double>>& train,
                const std::vector<std::pair<uint64_t, double>>& val);

// GPU time per op kind of the last step, largest first, as a Markdown table on stdout.
void print_profile(const model::training::GpuTrainer& trainer);

// "12.5 KiB", "812.4 MiB", "6.81 GiB".
std::string bytes_text(uint64_t bytes);

// The device memory of the run: the device's peak (the trainer allocates all it holds when it is
// made), then the trainer's share by use, activations first (what --recompute shrinks).
std::string memory_text(const model::training::GpuTrainer& trainer, const vk::Device& device);

// --bench's line: the median step after the first (the first builds the pipelines); M
// micro-batches of B x T tokens a step.
void print_bench(std::vector<double> step_s, uint32_t M, uint32_t B, uint32_t T,
                 uint64_t parameters, const std::string& device, const std::string& memory);

}  // namespace app
