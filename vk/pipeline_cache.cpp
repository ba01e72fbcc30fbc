#include "vk/pipeline_cache.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#if defined(_WIN32)
#include <process.h>
#else
#include <unistd.h>
#endif

#include "vk/check.h"
#include "vk/context.h"
#include "vk/hash.h"

namespace vk {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'T', '2', 'V', 'K', 'P', 'C'};
// VkPipelineCacheHeaderVersionOne: header length, header version, vendor id, device id, UUID.
constexpr size_t kVulkanHeaderBytes = 16 + VK_UUID_SIZE;
// A file larger than this is not read: no driver's cache of our few dozen pipelines comes near.
constexpr uintmax_t kMaxFileBytes = uintmax_t{256} << 20;

long process_id() {
#if defined(_WIN32)
  return _getpid();
#else
  return static_cast<long>(getpid());
#endif
}

uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string hex(uint64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llx", width, static_cast<unsigned long long>(v));
  return buf;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

std::filesystem::path default_cache_dir() {
  if (const char* d = env("GPT2VK_CACHE_DIR")) return std::string(d) == "off" ? "" : d;
#if defined(_WIN32)
  if (const char* d = env("LOCALAPPDATA")) return std::filesystem::path(d) / "gpt2vk";
#elif defined(__APPLE__)
  if (const char* h = env("HOME")) return std::filesystem::path(h) / "Library/Caches/gpt2vk";
#else
  // The XDG spec: a relative XDG_CACHE_HOME is invalid and to be ignored.
  if (const char* d = env("XDG_CACHE_HOME"); d && d[0] == '/')
    return std::filesystem::path(d) / "gpt2vk";
  if (const char* h = env("HOME")) return std::filesystem::path(h) / ".cache/gpt2vk";
#endif
  return {};
}

PipelineCache::PipelineCache(const Device& device, const std::filesystem::path& dir, Warn warn)
    : device_(device), warn_(std::move(warn)) {
  if (!warn_)
    warn_ = [](const std::string& m) { std::fprintf(stderr, "gpt2vk: warning: %s\n", m.c_str()); };
  std::vector<uint8_t> initial;
  if (!dir.empty()) {
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(device.physical(), &props);
    std::string uuid;
    for (uint8_t b : props.pipelineCacheUUID) uuid += hex(b, 2);
    path_ = dir / (hex(props.vendorID, 4) + "-" + hex(props.deviceID, 4) + "-" +
                   hex(props.driverVersion, 8) + "-" + uuid + ".pipelines");
    std::ifstream in(path_, std::ios::binary);
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(path_, ec);
    if (!in) {
      status_ = "absent";
    } else if (ec || bytes > kMaxFileBytes) {
      status_ = "ignored: " + (ec ? "unreadable (" + ec.message() + ")"
                                  : "larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB");
      warn_("ignoring the pipeline cache " + path_.string() + ": " + status_.substr(9) +
            "; it will be rewritten");
    } else {
      std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
      const std::string why = check(file);
      if (why.empty()) {
        initial.assign(file.begin() + sizeof(PipelineCacheFileHeader), file.end());
        status_ = "loaded";
        loaded_bytes_ = initial.size();
        current_ = true;
      } else {
        status_ = "ignored: " + why;
        warn_("ignoring the pipeline cache " + path_.string() + ": " + why +
              "; it will be rewritten");
      }
    }
  }
  VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  info.initialDataSize = initial.size();
  info.pInitialData = initial.empty() ? nullptr : initial.data();
  VkPipelineCache cache = VK_NULL_HANDLE;
  VkResult r = vkCreatePipelineCache(device.get(), &info, nullptr, &cache);
  if (r != VK_SUCCESS && !initial.empty()) {
    // The driver refused data that passed our checks: start empty rather than fail every run.
    status_ = "ignored: the driver refused its data";
    warn_("ignoring the pipeline cache " + path_.string() + ": the driver refused its data (" +
          std::to_string(r) + "); it will be rewritten");
    initial.clear();
    loaded_bytes_ = 0;
    current_ = false;
    info.initialDataSize = 0;
    info.pInitialData = nullptr;
    r = vkCreatePipelineCache(device.get(), &info, nullptr, &cache);
  }
  VK_CHECK(r);
  cache_ = device.own(cache, vkDestroyPipelineCache);
  saved_ = std::move(initial);
}

std::string PipelineCache::check(const std::vector<uint8_t>& file) const {
  PipelineCacheFileHeader h;
  if (file.size() < sizeof h)
    return "truncated (" + std::to_string(file.size()) + " bytes, less than its header)";
  std::memcpy(&h, file.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a gpt2vk pipeline cache";
  if (h.version != kFileVersion)
    return "format version " + std::to_string(h.version) + ", not " + std::to_string(kFileVersion);
  const uint64_t payload = file.size() - sizeof h;
  if (h.size != payload)
    return "truncated or padded (" + std::to_string(payload) + " bytes of data, its header says " +
           std::to_string(h.size) + ")";
  const uint8_t* p = file.data() + sizeof h;
  if (fnv1a(p, payload) != h.checksum) return "corrupt (checksum mismatch)";
  if (payload < kVulkanHeaderBytes || read_u32(p) < kVulkanHeaderBytes || read_u32(p) > payload ||
      read_u32(p + 4) != VK_PIPELINE_CACHE_HEADER_VERSION_ONE)
    return "its data has no Vulkan pipeline cache header";
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(device_.physical(), &props);
  if (read_u32(p + 8) != props.vendorID || read_u32(p + 12) != props.deviceID ||
      std::memcmp(p + 16, props.pipelineCacheUUID, VK_UUID_SIZE) != 0)
    return "made by another device or driver";
  return {};
}

std::vector<uint8_t> PipelineCache::wrap(const std::vector<uint8_t>& payload) {
  PipelineCacheFileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFileVersion;
  h.size = payload.size();
  h.checksum = fnv1a(payload.data(), payload.size());
  std::vector<uint8_t> file(sizeof h + payload.size());
  std::memcpy(file.data(), &h, sizeof h);
  if (!payload.empty()) std::memcpy(file.data() + sizeof h, payload.data(), payload.size());
  return file;
}

std::vector<uint8_t> PipelineCache::data() const {
  size_t size = 0;
  VK_CHECK(vkGetPipelineCacheData(device_.get(), cache_, &size, nullptr));
  std::vector<uint8_t> d(size);
  if (size) VK_CHECK(vkGetPipelineCacheData(device_.get(), cache_, &size, d.data()));
  d.resize(size);
  return d;
}

bool PipelineCache::save() {
  if (path_.empty() || device_.lost()) return false;
  std::vector<uint8_t> payload;
  try {
    payload = data();
  } catch (const std::exception& e) {
    warn_(std::string("could not read the pipeline cache back from the driver: ") + e.what());
    return false;
  }
  if (current_ && payload == saved_) return false;
  // Not even a Vulkan header: a later load would only warn about it.
  if (payload.size() < kVulkanHeaderBytes) return false;
  const std::vector<uint8_t> file = wrap(payload);
  // A name no other process or thread uses, in the same folder, so the rename is atomic. (Two
  // processes saving at once: the last rename wins, and the other's new entries wait for a
  // later run.)
  static std::atomic<uint64_t> serial{0};
  std::filesystem::path tmp = path_;
  tmp += ".tmp-" + hex(uint64_t(process_id()), 8) + "-" + hex(serial++, 4) + "-" +
         hex(uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()), 16);
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  bool ok = !ec;
  if (ok) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
    out.close();
    ok = static_cast<bool>(out);
  }
  if (ok) {
    std::filesystem::rename(tmp, path_, ec);
    ok = !ec;
  }
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    warn_("could not save the pipeline cache to " + path_.string() +
          " (the folder is not writable, or the disk is full); pipelines will be compiled "
          "again next time");
    return false;
  }
  saved_ = payload;
  current_ = true;
  return true;
}

}  // namespace vk
