// What the ranks of a data-parallel training job (apps/group.h) check together, and where each
// runs: apps/train.cpp's run on each rank calls these.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "apps/group.h"
#include "model/training/parameters.h"
#include "vk/context.h"
#include "vk/hash.h"

namespace app {

// An error every rank of a job meets alike (a check across the ranks): each ends by itself,
// rank 0 saying why, rather than one rank aborting the others.
struct GroupRefusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the ranks compare of their flags, data and weights: vk/hash.h's FNV-1a, of bytes, of a
// string, and of every tensor of a model's parameters (its name, then its values).
using vk::fnv1a;
uint64_t fnv1a(std::string_view s);
uint64_t fnv1a(const model::training::Parameters& p, uint64_t h = vk::kFnv1aOffset);

// The ranks must run one job: each names what it has, and a job whose ranks disagree is refused
// (GroupRefusal) naming the items and the first rank that differs from rank 0.
void check_ranks(const Group& group, const std::vector<std::pair<std::string, uint64_t>>& items);

// GPT2VK_TRAIN_KILL_RANK=R:S, for tests: rank R of an MPI job SIGKILLs itself before step S
// (counting from 1), named on stderr first, as a crashed machine would end it.
void kill_rank_from_env(const Group& group, uint64_t step);

// A rank's device: --device where given, else this machine's GPUs in turn by the rank's place
// among the machine's ranks (modulo their count), else the default (lavapipe where no GPU).
std::string rank_device(const vk::Instance& instance, uint32_t rank);

}  // namespace app
