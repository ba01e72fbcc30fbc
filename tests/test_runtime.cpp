// The Vulkan runtime itself: reflection, the checks dispatch() makes, barriers, timestamps,
// memory and device selection.
#include <doctest/doctest.h>

#include <cstring>

#include "shaders/add.h"
#include "tests/add.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"
#include "vk/recorder.h"
#include "vk/reflect.h"
#include "vk/spirv_registry.h"

namespace {

vk::Groups one_group() { return {1, 1, 1}; }

}  // namespace

TEST_CASE("reflection reads bindings, access and push-constant size from SPIR-V") {
  vk::ShaderInterface add = vk::reflect(vk::find_spirv("add"));
  REQUIRE(add.bindings.size() == 3);
  CHECK(add.bindings[0].binding == 0);
  CHECK(add.bindings[0].type == VK_DESCRIPTOR_TYPE_STORAGE_BUFFER);
  CHECK(add.bindings[0].writes);
  CHECK_FALSE(add.bindings[0].reads);  // writeonly
  CHECK(add.bindings[1].reads);
  CHECK_FALSE(add.bindings[1].writes);  // readonly
  CHECK(add.push_constant_bytes == sizeof(push::AddPush));

  std::vector<uint32_t> garbage = {1, 2, 3};
  CHECK_THROWS_AS(vk::reflect(garbage), vk::Error);
  std::span<const uint32_t> m = vk::find_spirv("add");
  // Cut at the first instruction boundary past half the module (not inside an instruction, whose
  // own word count could swallow the bad one), then an instruction claiming 65535 words.
  size_t cut = 5;
  while (cut < m.size() / 2) cut += m[cut] >> 16;
  std::vector<uint32_t> truncated(m.begin(), m.begin() + static_cast<long>(cut));
  truncated.push_back(0xffff0001u);
  CHECK_THROWS_AS(vk::reflect(truncated), vk::Error);
}

TEST_CASE("every shader has an embedded module") {
  CHECK(!vk::embedded_spirv().empty());
  CHECK(vk::find_spirv("no_such_shader").empty());
}

TEST_CASE("dispatch rejects wrong push constants, bindings and group counts") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 4096, vk::MemoryKind::Device, "test checks");
  vk::BufferSpan s = arena.alloc(256);
  const vk::Pipeline& add = g.pipelines.get("add");
  vk::Recorder rec(g.device);
  rec.begin();
  struct TooBig {
    uint32_t a, b;
  };
  CHECK_THROWS_WITH_AS(rec.dispatch(add, {s, s, s}, TooBig{1, 2}, one_group()),
                       doctest::Contains("push constants"), vk::Error);
  CHECK_THROWS_WITH_AS(rec.dispatch(add, {s, s}, push::AddPush{1}, one_group()),
                       doctest::Contains("3 bindings"), vk::Error);
  CHECK_THROWS_AS(rec.dispatch(add, {s, s, s}, push::AddPush{1}, vk::Groups{0, 1, 1}), vk::Error);
  CHECK_THROWS_AS(g.pipelines.get("no_such_shader"), vk::Error);
  vk::Specialization huge;
  huge.local_size = {g.device.caps().max_workgroup_invocations + 1, 1, 1};
  CHECK_THROWS_AS(g.pipelines.get("add", huge), vk::Error);
  CHECK_THROWS_AS(test::gpu_add(g.kernels, rec, s, s, s, 1000), vk::Error);  // span too small
  rec.end();
}

TEST_CASE("a binding larger than maxStorageBufferRange is refused, not truncated") {
  GPU_TEST(g);
  test::LoweredGpu small(g, {.max_storage_buffer_range = 1024});  // so the test stays small
  CHECK(small.device.caps().max_storage_buffer_range == 1024);
  vk::Arena arena(small.device, 3 * 4096, vk::MemoryKind::Device, "test range");
  vk::BufferSpan a = arena.alloc(2048), b = arena.alloc(2048), out = arena.alloc(2048);
  vk::Recorder rec(small.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(test::gpu_add(small.kernels, rec, out, a, b, 512),
                       doctest::Contains("maxStorageBufferRange"), vk::Error);
  // Within range:
  test::gpu_add(small.kernels, rec, out.sub(0, 1024), a.sub(0, 1024), b.sub(0, 1024), 256);
  rec.run();
}

TEST_CASE("synchronization validation catches a missing barrier") {
  // Proves the validation layer and sync validation are really on: without this, a suite that
  // silently ran without them would pass every other test.
  GPU_TEST(g);
  g.instance.log().print = false;
  vk::Arena arena(g.device, 4096, vk::MemoryKind::Device, "test hazard");
  vk::BufferSpan x = arena.alloc(1024), y = arena.alloc(1024), z = arena.alloc(1024);
  vk::Recorder rec(g.device);
  rec.set_auto_barriers(false);
  rec.begin();
  test::gpu_add(g.kernels, rec, y, x, x, 256);
  test::gpu_add(g.kernels, rec, z, y, x, 256);  // reads y with no barrier after its write
  uint32_t hazards = g_validation_.seen();
  g.instance.log().print = true;
  CHECK(hazards >= 1);
  std::lock_guard<std::mutex> lock(g.instance.log().mutex);
  CHECK(g.instance.log().last.find("READ_AFTER_WRITE") != std::string::npos);
  g_validation_.expect(hazards);
  rec.end();
}

TEST_CASE("barriers only where a dispatch depends on an earlier one") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 8192, vk::MemoryKind::Device, "test barriers");
  vk::BufferSpan a = arena.alloc(1024), b = arena.alloc(1024), c = arena.alloc(1024),
                  d = arena.alloc(1024);
  vk::Recorder rec(g.device);
  rec.begin();
  test::gpu_add(g.kernels, rec, c, a, b, 256);  // writes c
  test::gpu_add(g.kernels, rec, d, a, b, 256);  // independent: no barrier
  CHECK(rec.stats().barriers == 0);
  test::gpu_add(g.kernels, rec, a, c, d, 256);  // reads c and d: barrier (also write-after-read of a)
  CHECK(rec.stats().barriers == 1);
  test::gpu_add(g.kernels, rec, b, b, b, 256);  // b was read before the last barrier only: no barrier
  CHECK(rec.stats().barriers == 1);
  rec.run();
  CHECK(rec.stats().dispatches == 4);
  CHECK(rec.stats().submits == 1);
  CHECK(rec.stats().waits == 1);
  CHECK(rec.stats().pipeline_binds == 1);
}

TEST_CASE("a recording replays without re-recording") {
  GPU_TEST(g);
  const uint32_t n = 100;
  std::vector<float> one(n, 1.0f), zero(n, 0.0f);
  vk::Arena arena(g.device, 4096, vk::MemoryKind::Device, "test replay");
  vk::BufferSpan acc = test::to_gpu(g, arena, zero), inc = test::to_gpu(g, arena, one);
  vk::Recorder rec(g.device);
  rec.begin();
  test::gpu_add(g.kernels, rec, acc, acc, inc, n);
  rec.end();
  for (int i = 0; i < 5; i++) {
    rec.submit();
    rec.wait();
  }
  std::vector<float> got = test::from_gpu(g, acc, n);
  CHECK(got[0] == 5.0f);
  CHECK(got[n - 1] == 5.0f);
}

TEST_CASE("a dry recording names the pipelines a pass uses; they compile before the real one") {
  GPU_TEST(g);
  const uint32_t n = 100;
  std::vector<float> one(n, 1.0f);
  vk::Arena arena(g.device, 4096, vk::MemoryKind::Device, "test dry");
  vk::BufferSpan out = test::to_gpu(g, arena, one), inc = test::to_gpu(g, arena, one);
  vk::Kernels pipelines(g.device);
  const model::gpu::Ops kernels(pipelines);  // its own: the shared one has compiled `add` already
  vk::Recorder rec(g.device);

  pipelines.defer(true);
  rec.begin_dry();
  test::gpu_add(kernels, rec, out, out, inc, n);
  test::gpu_add(kernels, rec, out, out, inc, n);
  CHECK(rec.dry_dispatches() == 2);
  CHECK(rec.stats().dispatches == 0);  // a dry recording leaves the real one's stats alone
  CHECK_NOTHROW(rec.flush());  // nothing to submit
  rec.end();
  CHECK_THROWS_WITH_AS(rec.submit(), doctest::Contains("nothing recorded"), vk::Error);
  CHECK(pipelines.count() == 1);
  // A real recording of a pipeline still deferred is refused, not recorded with a null handle.
  rec.begin();
  CHECK_THROWS_WITH_AS(test::gpu_add(kernels, rec, out, out, inc, n),
                       doctest::Contains("before it was compiled"), vk::Error);
  rec.end();
  pipelines.defer(false);

  size_t reported = 0;
  CHECK(pipelines.compile_deferred([&](size_t done, size_t total) {
    CHECK(total == 1);
    reported = done;
  }) == 1);
  CHECK(reported == 1);
  CHECK(pipelines.compile_deferred() == 0);  // nothing left
  rec.begin();
  test::gpu_add(kernels, rec, out, out, inc, n);
  rec.end();
  rec.submit();
  rec.wait();
  CHECK(pipelines.count() == 1);
  CHECK(test::from_gpu(g, out, n)[n - 1] == 2.0f);  // the dry dispatches wrote nothing
  // A dry recording after a real one leaves that one to be submitted again.
  rec.begin_dry();
  test::gpu_add(kernels, rec, out, out, inc, n);
  rec.end();
  CHECK(rec.stats().dispatches == 1);
  rec.submit();
  rec.wait();
  CHECK(test::from_gpu(g, out, n)[n - 1] == 3.0f);
}

TEST_CASE("timestamps give a time for every dispatch") {
  GPU_TEST(g);
  if (!g.device.caps().timestamps) {
    MESSAGE("SKIPPED: device has no compute timestamps");
    return;
  }
  const uint32_t n = 1 << 16;
  vk::Arena arena(g.device, 3 * n * sizeof(float) + 1024, vk::MemoryKind::Device, "test time");
  vk::BufferSpan a = arena.alloc(n * 4), b = arena.alloc(n * 4), c = arena.alloc(n * 4);
  vk::Recorder rec(g.device, true);
  rec.begin();
  test::gpu_add(g.kernels, rec, c, a, b, n);
  test::gpu_add(g.kernels, rec, a, c, b, n);
  rec.run();
  std::vector<vk::DispatchTime> t = rec.timings();
  REQUIRE(t.size() == 2);
  CHECK(t[0].shader == "add");
  CHECK(t[0].ms >= 0.0);
  CHECK(t[0].ms + t[1].ms > 0.0);
}

TEST_CASE("timestamp differences count only the valid bits, across a wrap") {
  // 36 valid bits, as Intel reports: the bits above are undefined, so garbage there changes
  // nothing, and a counter that wrapped between two reads still gives the ticks between them.
  const uint64_t wrap36 = uint64_t{1} << 36;
  CHECK(vk::timestamp_ticks(100, 350, 36) == 250);
  CHECK(vk::timestamp_ticks(0xABC0000000000000 | 100, 0x1230000000000000 | 350, 36) == 250);
  CHECK(vk::timestamp_ticks(wrap36 - 10, 5, 36) == 15);
  CHECK(vk::timestamp_ticks(wrap36 - 10, wrap36 | 5, 36) == 15);
  // 64 valid bits: plain unsigned differences, also across a wrap.
  CHECK(vk::timestamp_ticks(~uint64_t{0} - 4, 5, 64) == 10);
  CHECK(vk::timestamp_ticks(7, 7, 1) == 0);
}

TEST_CASE("arenas refuse what does not fit and keep sub-allocations aligned") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 1000, vk::MemoryKind::Device, "small");
  vk::BufferSpan a = arena.alloc(3);
  vk::BufferSpan b = arena.alloc(5);
  CHECK(b.offset % g.device.caps().storage_buffer_alignment == 0);
  CHECK(b.offset >= a.offset + 3);
  CHECK_THROWS_WITH_AS(arena.alloc(2000), doctest::Contains("'small'"), vk::Error);
  CHECK_THROWS_AS(arena.alloc(0), vk::Error);
  CHECK_THROWS_AS(b.sub(4, 2), vk::Error);
  float big[8] = {};
  CHECK_THROWS_AS(vk::upload(g.device, a, big, sizeof(big)), vk::Error);
}

TEST_CASE("staging uploads and downloads round-trip") {
  GPU_TEST(g);
  vk::Arena staging(g.device, 1 << 16, vk::MemoryKind::Staging, "staging");
  vk::Arena device(g.device, 1 << 16, vk::MemoryKind::Device, "device");
  std::vector<float> data = test::random_floats(1000, 5);
  for (vk::Arena* arena : {&staging, &device}) {
    vk::BufferSpan s = test::to_gpu(g, *arena, data);
    CHECK(test::close("round trip", test::from_gpu(g, s, data.size()), data, {0, 0}));
  }
}

TEST_CASE("device selection explains itself") {
  GPU_TEST(g);
  vk::DeviceOptions by_name;
  by_name.select = "no-such-gpu-anywhere";
  CHECK_THROWS_WITH_AS(vk::Device(g.instance, by_name), doctest::Contains("no Vulkan device matches"),
                       vk::Error);
  vk::DeviceOptions by_index;
  by_index.select = "999";
  CHECK_THROWS_AS(vk::Device(g.instance, by_index), vk::Error);
  bool any_usable = false;
  for (const vk::PhysicalDevice& d : g.instance.devices()) {
    CAPTURE(d.caps.name);
    if (!d.unusable.empty()) continue;
    any_usable = true;
    CHECK(d.caps.max_storage_buffer_range > 0);
    CHECK(d.caps.max_push_constants >= 128);  // the Vulkan minimum
    CHECK(d.caps.subgroup_size >= 1);
    CHECK(d.caps.max_workgroup_invocations >= 128);
  }
  CHECK(any_usable);
}

TEST_CASE("groups_for folds large counts into y and never under-covers") {
  GPU_TEST(g);
  const vk::Pipeline& p = g.pipelines.get("add");
  const uint32_t local = p.local_size()[0];
  for (uint64_t threads : {1ull, 63ull, 64ull, 65ull, 1ull << 20, 1ull << 26}) {
    vk::Groups gr = vk::groups_for(g.device, p, threads);
    CHECK(uint64_t(gr.x) * gr.y * local >= threads);
    CHECK(gr.x <= g.device.caps().max_workgroup_count[0]);
  }
}
