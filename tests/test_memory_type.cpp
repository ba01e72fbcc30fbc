// vk::memory_type_candidates against the memory property tables of devices this machine does
// not have, as vulkaninfo reports them (types and heaps modelled on reports in the public
// gpuinfo.org database; sizes rounded), and against the device the tests run on.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/gpu.h"
#include "vk/memory.h"
#include "vk/memory_type.h"

namespace {

constexpr VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
constexpr VkMemoryPropertyFlags HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
constexpr VkMemoryPropertyFlags HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
constexpr VkMemoryPropertyFlags CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
constexpr VkMemoryPropertyFlags AMD_COHERENT =
    VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD | VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD;
constexpr VkDeviceSize MiB = 1 << 20, GiB = VkDeviceSize{1} << 30;

struct Type {
  VkMemoryPropertyFlags flags;
  uint32_t heap;
};

VkPhysicalDeviceMemoryProperties table(std::vector<VkDeviceSize> heaps, std::vector<Type> types) {
  VkPhysicalDeviceMemoryProperties p{};
  p.memoryHeapCount = static_cast<uint32_t>(heaps.size());
  for (size_t i = 0; i < heaps.size(); i++) p.memoryHeaps[i].size = heaps[i];
  p.memoryTypeCount = static_cast<uint32_t>(types.size());
  for (size_t i = 0; i < types.size(); i++) p.memoryTypes[i] = {types[i].flags, types[i].heap};
  return p;
}

uint32_t first(const VkPhysicalDeviceMemoryProperties& p, vk::MemoryPurpose purpose,
               VkDeviceSize bytes, bool uma) {
  const std::vector<uint32_t> c = vk::memory_type_candidates(p, ~0u, purpose, bytes, uma);
  REQUIRE(!c.empty());
  return c[0];
}

}  // namespace

TEST_CASE("memory types: a discrete NVIDIA card (VRAM, system memory, a 256 MiB BAR)") {
  // Heaps: 0 VRAM 12 GiB, 1 system 32 GiB, 2 the BAR window 214 MiB.
  const auto p = table({12 * GiB, 32 * GiB, 214 * MiB}, {{0, 1},
                                                         {DL, 0},
                                                         {DL, 0},
                                                         {HV | HC, 1},
                                                         {HV | HC | CA, 1},
                                                         {DL | HV | HC, 2}});
  // Weights in VRAM that is not host-visible; a 1 GiB arena never in the BAR window.
  CHECK(first(p, vk::MemoryPurpose::Device, GiB, false) == 1);
  // Uploads through write-combined system memory, not the small BAR heap; readback cached.
  CHECK(first(p, vk::MemoryPurpose::Upload, 64 * MiB, false) == 3);
  CHECK(first(p, vk::MemoryPurpose::Readback, MiB, false) == 4);
  // A pass's ids and position: in the BAR window, which the GPU reads without crossing PCIe.
  CHECK(first(p, vk::MemoryPurpose::Parameters, 4096, false) == 5);
  // Past VRAM (a 13 GiB request), device memory falls back to host-visible system memory.
  CHECK(first(p, vk::MemoryPurpose::Device, 13 * GiB, false) == 3);
}

TEST_CASE("memory types: a discrete AMD card on RADV, device-coherent types present") {
  // Heaps: 0 VRAM 16 GiB, 1 system (GTT) 16 GiB, 2 the BAR 256 MiB; the AMD device-coherent
  // copies of each type come after them.
  const auto p = table({16 * GiB, 16 * GiB, 256 * MiB}, {{DL, 0},
                                                         {HV | HC, 1},
                                                         {DL | HV | HC, 2},
                                                         {HV | HC | CA, 1},
                                                         {DL | AMD_COHERENT, 0},
                                                         {HV | HC | AMD_COHERENT, 1},
                                                         {HV | HC | CA | AMD_COHERENT, 1}});
  CHECK(first(p, vk::MemoryPurpose::Device, 500 * MiB, false) == 0);
  CHECK(first(p, vk::MemoryPurpose::Upload, 500 * MiB, false) == 1);
  CHECK(first(p, vk::MemoryPurpose::Readback, MiB, false) == 3);
  CHECK(first(p, vk::MemoryPurpose::Parameters, 4096, false) == 2);  // the BAR
  for (vk::MemoryPurpose purpose : {vk::MemoryPurpose::Device, vk::MemoryPurpose::Upload,
                                    vk::MemoryPurpose::Readback, vk::MemoryPurpose::Parameters})
    for (uint32_t t : vk::memory_type_candidates(p, ~0u, purpose, MiB, false)) CHECK(t < 4);
  // A buffer whose memoryTypeBits exclude type 0 takes the next device-local type.
  const std::vector<uint32_t> c =
      vk::memory_type_candidates(p, ~0u & ~1u, vk::MemoryPurpose::Device, MiB, false);
  REQUIRE(!c.empty());
  CHECK(c[0] == 2);
}

TEST_CASE("memory types: an Intel iGPU and Apple through MoltenVK (UMA)") {
  // Intel ANV: one device-local heap of system memory, every type on it.
  const auto intel = table({24 * GiB}, {{DL, 0}, {DL | HV | HC, 0}, {DL | HV | HC | CA, 0}});
  CHECK(first(intel, vk::MemoryPurpose::Device, GiB, true) == 1);  // mapped: uploads are memcpy
  CHECK(first(intel, vk::MemoryPurpose::Readback, MiB, true) == 2);
  CHECK(vk::memory_type_mappable(intel, 1));
  // MoltenVK on an M1: private, shared (coherent) and managed (cached, not coherent).
  const auto apple = table({10 * GiB}, {{DL, 0}, {DL | HV | HC, 0}, {DL | HV | CA, 0}});
  CHECK(first(apple, vk::MemoryPurpose::Device, GiB, true) == 1);
  CHECK(first(apple, vk::MemoryPurpose::Readback, MiB, true) == 1);  // coherent, never managed
  CHECK(first(apple, vk::MemoryPurpose::Upload, MiB, true) == 1);
  CHECK_FALSE(vk::memory_type_mappable(apple, 2));
}

TEST_CASE("memory types: an AMD APU's 512 MiB carve-out and lavapipe") {
  // RADV on Renoir: heap 0 the carve-out, heap 1 system memory.
  const auto apu = table({512 * MiB, 14 * GiB},
                         {{DL, 0}, {HV | HC, 1}, {DL | HV | HC, 0}, {HV | HC | CA, 1}});
  CHECK(first(apu, vk::MemoryPurpose::Device, 100 * MiB, true) == 2);
  CHECK(first(apu, vk::MemoryPurpose::Parameters, 4096, true) == 2);
  // Weights of GPT-2 medium (700 MiB) do not fit the carve-out: host-visible system memory,
  // which the APU reads as fast, not an allocation failure.
  CHECK(first(apu, vk::MemoryPurpose::Device, 700 * MiB, true) == 1);
  CHECK(vk::memory_type_candidates(apu, ~0u, vk::MemoryPurpose::Device, 15 * GiB, true).empty());
  // lavapipe: one type, everything.
  const auto lvp = table({2 * GiB}, {{DL | HV | HC | CA, 0}});
  for (vk::MemoryPurpose purpose : {vk::MemoryPurpose::Device, vk::MemoryPurpose::Upload,
                                    vk::MemoryPurpose::Readback, vk::MemoryPurpose::Parameters})
    CHECK(first(lvp, purpose, MiB, true) == 0);
}

TEST_CASE("memory types: every kind of arena on this device is usable, staging mapped") {
  GPU_TEST(g);
  for (vk::MemoryKind kind : {vk::MemoryKind::Device, vk::MemoryKind::Staging,
                              vk::MemoryKind::Readback, vk::MemoryKind::Parameters}) {
    vk::Arena a(g.device, 1 << 16, kind, "test memory kind");
    if (kind != vk::MemoryKind::Device) CHECK(a.mapped());
    const std::vector<float> data(1024, 1.5f);
    const vk::BufferSpan s = a.alloc(data.size() * 4);
    vk::upload(g.device, s, data.data(), data.size() * 4);
    std::vector<float> back(data.size());
    vk::download(g.device, back.data(), s, back.size() * 4);
    CHECK(back == data);
  }
}
