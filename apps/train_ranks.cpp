#include "apps/train_ranks.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace app {

using model::training::Parameters;

void kill_rank_from_env(const Group& group, uint64_t step) {
  const char* v = std::getenv("GPT2VK_TRAIN_KILL_RANK");
  if (!v || !*v) return;
  unsigned long long rank = 0, at = 0;
  if (std::sscanf(v, "%llu:%llu", &rank, &at) != 2)
    throw std::runtime_error(std::string("GPT2VK_TRAIN_KILL_RANK=") + v + ": not RANK:STEP");
  if (rank != group.rank() || at != step) return;
  std::fprintf(stderr, "gpt2vk: rank %llu killed before step %llu\n", rank, at);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

uint64_t fnv1a(std::string_view s) { return vk::fnv1a(s.data(), s.size()); }
uint64_t fnv1a(const Parameters& p, uint64_t h) {
  for (const model::ExpectedTensor& e : p.tensors())
    h = vk::fnv1a(p.tensor(e.name).data(), p.tensor(e.name).size() * 4,
                  vk::fnv1a(e.name.data(), e.name.size(), h));
  return h;
}

void check_ranks(const Group& group, const std::vector<std::pair<std::string, uint64_t>>& items) {
  if (group.size() == 1) return;
  std::vector<uint64_t> mine;
  for (const auto& item : items) mine.push_back(item.second);
  const std::vector<uint64_t> all = group.allgather(mine);
  for (uint32_t r = 1; r < group.size(); r++) {
    std::string differ;
    for (size_t i = 0; i < items.size(); i++)
      if (all[r * items.size() + i] != all[i]) differ += (differ.empty() ? "" : ", ") + items[i].first;
    if (!differ.empty())
      throw GroupRefusal("the ranks of this job disagree: rank " + std::to_string(r) + " of " +
                         std::to_string(group.size()) + " has another " + differ +
                         " than rank 0 (every rank must be given the same flags, and the same "
                         "files at the same paths)");
  }
}

std::string rank_device(const vk::Instance& instance, uint32_t rank) {
  std::vector<uint32_t> gpus;
  for (const vk::PhysicalDevice& d : instance.devices())
    if (d.unusable.empty() && d.caps.type != VK_PHYSICAL_DEVICE_TYPE_CPU) gpus.push_back(d.index);
  return gpus.empty() ? std::string() : std::to_string(gpus[rank % gpus.size()]);
}

}  // namespace app
