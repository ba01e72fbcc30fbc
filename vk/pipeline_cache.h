// A VkPipelineCache kept on disk between runs, so that drivers without a shader cache of their
// own (MoltenVK, several mobile drivers) compile each pipeline once, not once per process.
//
// The file lives in a folder of its own (the user's cache folder: default_cache_dir()), named
// by what the driver's cache is valid for: vendor and device ids, driver version and the
// device's pipelineCacheUUID. Its contents are never trusted: our header (a magic, the payload's
// size and a checksum) and the payload's Vulkan header (vendor, device, UUID) are checked, and
// a file that is truncated, corrupt or made by another device is ignored with a warning and
// replaced at the next save. Saves write a temporary file in the same folder and rename it over
// the old one, so concurrent processes and crashes leave either the old file or a whole new one.
#pragma once
#include <volk.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "vk/handle.h"

namespace vk {

class Device;

// $GPT2VK_CACHE_DIR when set; else $XDG_CACHE_HOME/gpt2vk, $HOME/.cache/gpt2vk (Linux and other
// Unix), ~/Library/Caches/gpt2vk (macOS) or %LOCALAPPDATA%\gpt2vk (Windows); "" when none of
// those variables is set. GPT2VK_CACHE_DIR=off turns the cache off ("").
std::filesystem::path default_cache_dir();

// Our envelope around the driver's data: 32 bytes, then `size` bytes of payload.
struct PipelineCacheFileHeader {
  char magic[8];       // "GPT2VKPC"
  uint32_t version;    // kFileVersion
  uint32_t reserved;   // 0
  uint64_t size;       // of the payload
  uint64_t checksum;   // FNV-1a (64-bit) of the payload
};
static_assert(sizeof(PipelineCacheFileHeader) == 32);

class PipelineCache {
 public:
  static constexpr uint32_t kFileVersion = 1;
  using Warn = std::function<void(const std::string&)>;

  // dir "": an in-memory cache only, never saved. Otherwise loads dir/file_name() when it is
  // there and valid; a file that is not is reported through `warn` (default: stderr) and ignored.
  PipelineCache(const Device& device, const std::filesystem::path& dir, Warn warn = {});
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  VkPipelineCache get() const { return cache_; }
  // dir / "<vendor>-<device>-<driver version>-<uuid>.pipelines" (hex), or "" without a folder.
  const std::filesystem::path& path() const { return path_; }
  // What the constructor found: "none" (no folder), "absent", "loaded", or "ignored: <why>".
  const std::string& status() const { return status_; }
  uint64_t loaded_bytes() const { return loaded_bytes_; }

  // Writes the cache when its data differ from what was loaded or last saved. Returns whether a
  // file was written; a failure (an unwritable folder, a full disk) is a warning, not an error.
  bool save();

  // The checks the constructor makes, on a file's bytes: "" when `file` is a valid cache for
  // this device, else why not. For tests.
  std::string check(const std::vector<uint8_t>& file) const;
  // The file a save writes for `payload` (the driver's data). For tests.
  static std::vector<uint8_t> wrap(const std::vector<uint8_t>& payload);

 private:
  std::vector<uint8_t> data() const;  // the driver's current data

  const Device& device_;
  Warn warn_;
  std::filesystem::path path_;
  std::string status_ = "none";
  uint64_t loaded_bytes_ = 0;
  std::vector<uint8_t> saved_;  // the payload last loaded or saved
  bool current_ = false;        // the file holds saved_
  Handle<VkPipelineCache> cache_;
};

}  // namespace vk
