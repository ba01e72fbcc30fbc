// The pipeline cache kept between runs (vk/pipeline_cache.h): written at the end of a run, read
// at the next, and never trusted: truncated, corrupt, foreign and unreadable files are ignored
// with a warning and replaced; concurrent savers leave a whole file.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/files.h"
#include "tests/gpu.h"
#include "vk/pipeline.h"
#include "vk/pipeline_cache.h"

namespace {

std::vector<uint8_t> bytes_of(const std::filesystem::path& f) {
  const std::string s = test::read_file(f);
  return {s.begin(), s.end()};
}

void write_bytes(const std::filesystem::path& f, const std::vector<uint8_t>& b) {
  test::write_file(f, std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

// Kernels on the shared device with a cache in `dir`: one pipeline, then the save at the end.
void run_once(test::Gpu& g, const std::filesystem::path& dir) {
  vk::Kernels k(g.device, dir);
  k.get("add");
}

// The warnings a cache reports while it is made.
struct Warnings {
  std::vector<std::string> seen;
  vk::PipelineCache::Warn sink() {
    return [this](const std::string& m) { seen.push_back(m); };
  }
};

}  // namespace

TEST_CASE("pipeline cache: default_cache_dir follows GPT2VK_CACHE_DIR, XDG_CACHE_HOME, HOME") {
  // Only on this platform's rule (Linux and other Unix); the variables are restored after.
  const auto keep = [](const char* n) {
    const char* v = std::getenv(n);
    return std::make_pair(std::string(n), v ? std::optional<std::string>(v) : std::nullopt);
  };
  const auto saved = {keep("GPT2VK_CACHE_DIR"), keep("XDG_CACHE_HOME"), keep("HOME")};
#if !defined(_WIN32) && !defined(__APPLE__)
  ::unsetenv("GPT2VK_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  ::setenv("HOME", "/home/u", 1);
  CHECK(vk::default_cache_dir() == "/x/cache/gpt2vk");
  ::unsetenv("XDG_CACHE_HOME");
  CHECK(vk::default_cache_dir() == "/home/u/.cache/gpt2vk");
  ::setenv("GPT2VK_CACHE_DIR", "/elsewhere", 1);
  CHECK(vk::default_cache_dir() == "/elsewhere");
  ::setenv("GPT2VK_CACHE_DIR", "off", 1);
  CHECK(vk::default_cache_dir().empty());
  ::unsetenv("GPT2VK_CACHE_DIR");
  ::unsetenv("HOME");
  CHECK(vk::default_cache_dir().empty());
#endif
  for (const auto& [name, value] : saved) {
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
}

TEST_CASE("pipeline cache: saved at the end of a run, loaded by the next") {
  GPU_TEST(g);
  test::TempDir dir;
  {
    vk::PipelineCache c(g.device, dir.path());
    CHECK(c.status() == "absent");
  }
  run_once(g, dir.path() / "sub");  // a folder that does not exist yet is made
  vk::PipelineCache first(g.device, dir.path() / "sub");
  REQUIRE(std::filesystem::exists(first.path()));
  CHECK(first.status() == "loaded");
  CHECK(first.check(bytes_of(first.path())).empty());
  // The name says what the driver's data are valid for.
  CHECK(first.path().extension() == ".pipelines");
  // Unchanged data are not written again.
  CHECK_FALSE(first.save());

  // No folder: an in-memory cache, never saved.
  vk::PipelineCache none(g.device, "");
  CHECK(none.status() == "none");
  CHECK(none.path().empty());
  CHECK_FALSE(none.save());
}

TEST_CASE("pipeline cache: truncated, corrupt and foreign files are ignored and rewritten") {
  GPU_TEST(g);
  test::TempDir dir;
  run_once(g, dir.path());
  const std::filesystem::path file = vk::PipelineCache(g.device, dir.path()).path();
  const std::vector<uint8_t> good = bytes_of(file);
  REQUIRE(good.size() > sizeof(vk::PipelineCacheFileHeader));
  const std::vector<uint8_t> payload(good.begin() + sizeof(vk::PipelineCacheFileHeader),
                                     good.end());

  struct Case {
    const char* what;
    std::vector<uint8_t> file;
    const char* reason;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", {}, "truncated"});
  cases.push_back({"cut in its header", {good.begin(), good.begin() + 20}, "truncated"});
  cases.push_back({"cut in its data", {good.begin(), good.end() - 1}, "truncated or padded"});
  std::vector<uint8_t> flipped = good;
  flipped.back() ^= 0x40;
  cases.push_back({"a flipped bit", flipped, "corrupt"});
  std::vector<uint8_t> other = good;
  std::memcpy(other.data(), "NOTOURS!", 8);
  cases.push_back({"another program's file", other, "not a gpt2vk pipeline cache"});
  std::vector<uint8_t> foreign = payload;
  foreign[16] ^= 0xff;  // the first byte of the pipelineCacheUUID
  cases.push_back({"another driver's data", vk::PipelineCache::wrap(foreign), "another device"});
  std::vector<uint8_t> no_header(payload.begin(), payload.begin() + 8);
  cases.push_back({"data without a Vulkan header", vk::PipelineCache::wrap(no_header),
                   "no Vulkan pipeline cache header"});

  for (const Case& c : cases) {
    CAPTURE(c.what);
    write_bytes(file, c.file);
    Warnings w;
    {
      vk::PipelineCache cache(g.device, dir.path(), w.sink());
      CHECK(cache.status().rfind("ignored: ", 0) == 0);
      CHECK(cache.status().find(c.reason) != std::string::npos);
      CHECK(cache.loaded_bytes() == 0);
      REQUIRE(w.seen.size() == 1);
      CHECK(w.seen[0].find(file.string()) != std::string::npos);
      CHECK(w.seen[0].find("rewritten") != std::string::npos);
      CHECK(cache.save());
    }
    vk::PipelineCache again(g.device, dir.path());
    CHECK(again.status() == "loaded");
  }
}

TEST_CASE("pipeline cache: an unwritable folder is a warning, not an error") {
  GPU_TEST(g);
  test::TempDir dir;
  // A plain file where the folder should be: nothing can be created under it.
  test::write_file(dir / "blocked", "x");
  Warnings w;
  vk::PipelineCache cache(g.device, dir / "blocked", w.sink());
  CHECK(cache.status() == "absent");
  CHECK_FALSE(cache.save());
  REQUIRE(w.seen.size() == 1);
  CHECK(w.seen[0].find("could not save the pipeline cache") != std::string::npos);
}

TEST_CASE("pipeline cache: concurrent savers leave one whole file and no temporaries") {
  GPU_TEST(g);
  test::TempDir dir;
  // Each round, four threads open a cache in a new folder, most of them before any file is
  // there, and save at once: several renames race onto one name.
  for (int round = 0; round < 10; round++) {
    const std::filesystem::path folder = dir / ("round" + std::to_string(round));
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++)
      threads.emplace_back([&] {
        vk::PipelineCache c(g.device, folder);
        c.save();
      });
    for (std::thread& t : threads) t.join();
    vk::PipelineCache after(g.device, folder);
    CHECK(after.status() == "loaded");
    for (const auto& e : std::filesystem::directory_iterator(folder))
      CHECK(e.path().extension() == ".pipelines");
  }
}
