#include "vk/recorder.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "vk/check.h"
#include "vk/context.h"
#include "vk/sizes.h"

namespace vk {
namespace {
constexpr uint32_t kSetsPerPool = 256;
constexpr uint32_t kMaxTimestamps = 4096;
}  // namespace

// An op fills an absent optional input with another input's span, which is read once if at all:
// overlapping ranges count once.
uint64_t Recorder::read_only_bytes(const ShaderInterface& iface,
                                   std::span<const BufferSpan> buffers) {
  std::vector<Range> ranges;
  for (size_t i = 0; i < buffers.size(); i++)
    if (iface.bindings[i].reads && !iface.bindings[i].writes)
      ranges.push_back({buffers[i].buffer, buffers[i].offset, buffers[i].offset + buffers[i].size});
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.buffer != b.buffer ? a.buffer < b.buffer : a.lo < b.lo;
  });
  uint64_t bytes = 0;
  for (size_t i = 0; i < ranges.size();) {
    Range run = ranges[i++];
    while (i < ranges.size() && ranges[i].buffer == run.buffer && ranges[i].lo <= run.hi)
      run.hi = std::max(run.hi, ranges[i++].hi);
    bytes += run.hi - run.lo;
  }
  return bytes;
}

Groups groups_for(const Device& device, const Pipeline& p, uint64_t threads) {
  const uint64_t local = p.local_size()[0];
  return fold_groups(device, ceil_div(threads, local), "shader '" + p.name() + "'");
}

Groups fold_groups(const Device& device, uint64_t groups, const std::string& what) {
  const DeviceCaps& caps = device.caps();
  if (groups == 0) groups = 1;
  uint64_t x = std::min<uint64_t>(groups, caps.max_workgroup_count[0]);
  uint64_t y = ceil_div(groups, x);
  if (y > caps.max_workgroup_count[1])
    throw Error(what + ": " + std::to_string(groups) +
                " workgroups exceed this device's workgroup-count limits");
  return {static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1};
}

Recorder::Recorder(const Device& device, bool timestamps) : device_(device) {
  VkDevice dev = device.get();
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = device.queue_family();
  VkCommandPool pool = VK_NULL_HANDLE;
  VK_CHECK(vkCreateCommandPool(dev, &pool_info, nullptr, &pool));
  pool_ = device.own(pool, vkDestroyCommandPool);

  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  VK_CHECK(vkAllocateCommandBuffers(dev, &alloc, &cmd_));

  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence = VK_NULL_HANDLE;
  VK_CHECK(vkCreateFence(dev, &fence_info, nullptr, &fence));
  fence_ = device.own(fence, vkDestroyFence);

  if (timestamps && device.caps().timestamps) {
    VkQueryPoolCreateInfo q{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    q.queryType = VK_QUERY_TYPE_TIMESTAMP;
    q.queryCount = kMaxTimestamps;
    VkQueryPool qp = VK_NULL_HANDLE;
    VK_CHECK(vkCreateQueryPool(dev, &q, nullptr, &qp));
    queries_ = device.own(qp, vkDestroyQueryPool);
    max_timestamps_ = kMaxTimestamps;
  }
  add_pool();
}

Recorder::~Recorder() {
  // Resources a submission uses must outlive it; a hung device ends the process (settle()).
  if (pending_) device_.settle(fence_);
}

void Recorder::add_pool() {
  VkDescriptorPoolSize sizes[] = {
      {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * 8},
      {VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, kSetsPerPool},
      {VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER, kSetsPerPool * 4},
  };
  VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  info.maxSets = kSetsPerPool;
  info.poolSizeCount = 3;
  info.pPoolSizes = sizes;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  VK_CHECK(vkCreateDescriptorPool(device_.get(), &info, nullptr, &pool));
  descriptor_pools_.push_back(device_.own(pool, vkDestroyDescriptorPool));
}

VkDescriptorSet Recorder::allocate_set(VkDescriptorSetLayout layout) {
  for (;;) {
    VkDescriptorSetAllocateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    info.descriptorPool = descriptor_pools_[current_pool_];
    info.descriptorSetCount = 1;
    info.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    VkResult r = vkAllocateDescriptorSets(device_.get(), &info, &set);
    if (r == VK_SUCCESS) return set;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) VK_CHECK(r);
    if (++current_pool_ == descriptor_pools_.size()) add_pool();
  }
}

void Recorder::begin() {
  if (pending_) wait();
  device_.check_usable();
  for (auto& p : descriptor_pools_) VK_CHECK(vkResetDescriptorPool(device_.get(), p, 0));
  current_pool_ = 0;
  reads_.clear();
  writes_.clear();
  flushed_timings_.clear();
  stats_ = {};
  signature_ = kFnv1aOffset;
  flushed_ = false;
  open();
}

void Recorder::begin_dry() {
  if (pending_) wait();
  if (recording_) {  // a recording an exception cut short: nothing to submit until begin()
    recording_ = false;
    recorded_ = false;
  }
  // The last real recording, its statistics, timings and barrier tracking stay as they are: it
  // may still be submitted again.
  dry_dispatches_ = 0;
  dry_signature_ = kFnv1aOffset;
  recording_ = true;
  dry_ = true;
}

void Recorder::hash(const void* data, size_t bytes) {
  uint64_t& h = dry_ ? dry_signature_ : signature_;
  h = fnv1a(data, bytes, h);
}

bool Recorder::dry_matches() const {
  return recorded_ && !flushed_ && !recording_ && dry_signature_ == signature_;
}

void Recorder::replay() {
  if (!dry_matches())
    throw Error("Recorder::replay(): the last dry recording differs from the recorded one");
  const uint32_t dispatches = stats_.dispatches;
  submit();
  stats_ = {};
  stats_.dispatches = dispatches;  // what runs; nothing was recorded
  stats_.submits = 1;
  stats_.replays = 1;
}

void Recorder::open() {
  dry_ = false;
  recorded_ = false;
  VK_CHECK(vkResetCommandBuffer(cmd_, 0));
  VkCommandBufferBeginInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VK_CHECK(vkBeginCommandBuffer(cmd_, &info));
  recording_ = true;
  bound_ = VK_NULL_HANDLE;
  timed_.clear();
  timed_bytes_.clear();
  timed_flops_.clear();
  if (queries_) {
    vkCmdResetQueryPool(cmd_, queries_, 0, max_timestamps_);
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    stats_.commands += 2;
  }
}

void Recorder::flush() {
  if (!recording_) throw Error("Recorder::flush() outside begin()/end()");
  const char mark = 'F';
  hash(&mark, 1);
  if (dry_) return;
  flushed_ = true;
  end();
  submit();
  wait();
  const std::vector<DispatchTime> part = last_timings();
  flushed_timings_.insert(flushed_timings_.end(), part.begin(), part.end());
  open();  // the descriptor sets stay allocated: begin() resets the pools
}

bool Recorder::hazard(const Pipeline& p, std::span<const BufferSpan> buffers) const {
  auto overlaps = [](const std::vector<Range>& list, const BufferSpan& s) {
    for (const Range& r : list)
      if (r.buffer == s.buffer && s.offset < r.hi && r.lo < s.offset + s.size) return true;
    return false;
  };
  size_t i = 0;
  for (const BufferSpan& s : buffers) {
    const BindingInfo& b = p.interface().bindings[i++];
    if (overlaps(writes_, s)) return true;  // read-after-write or write-after-write
    if (b.writes && overlaps(reads_, s)) return true;  // write-after-read
  }
  return false;
}

void Recorder::record(const Pipeline& p, std::span<const BufferSpan> buffers,
                      const void* push, uint32_t push_bytes, Groups groups) {
  if (!recording_) throw Error("Recorder::dispatch of '" + p.name() + "' outside begin()/end()");
  const double flops = std::exchange(next_flops_, 0.0);  // this dispatch's, dry or real
  const ShaderInterface& iface = p.interface();
  const DeviceCaps& caps = device_.caps();
  if (push_bytes != iface.push_constant_bytes)
    throw Error("shader '" + p.name() + "' takes " + std::to_string(iface.push_constant_bytes) +
                " bytes of push constants; the host passed " + std::to_string(push_bytes));
  if (buffers.size() != iface.bindings.size())
    throw Error("shader '" + p.name() + "' has " + std::to_string(iface.bindings.size()) +
                " bindings; the host passed " + std::to_string(buffers.size()) + " buffers");
  const uint32_t counts[3] = {groups.x, groups.y, groups.z};
  for (int d = 0; d < 3; d++)
    if (counts[d] == 0 || counts[d] > caps.max_workgroup_count[d])
      throw Error("shader '" + p.name() + "': workgroup count " + std::to_string(counts[d]) +
                  " in dimension " + std::to_string(d) + " is outside this device's limit");

  std::vector<VkDescriptorBufferInfo> infos(buffers.size());
  std::vector<VkBufferView> views(buffers.size(), VK_NULL_HANDLE);
  size_t i = 0;
  for (const BufferSpan& s : buffers) {
    const BindingInfo& b = iface.bindings[i];
    if (s.size == 0 || s.buffer == VK_NULL_HANDLE)
      throw Error("shader '" + p.name() + "': binding " + std::to_string(b.binding) + " is empty");
    if (b.type == VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER) {
      views[i++] = texel_view(p, b, s);
      continue;
    }
    if (b.type != VK_DESCRIPTOR_TYPE_STORAGE_BUFFER)
      throw Error("shader '" + p.name() +
                  "': only storage-buffer and storage-texel-buffer bindings are supported");
    if (s.size > caps.max_storage_buffer_range)
      throw Error("shader '" + p.name() + "': binding " + std::to_string(b.binding) + " spans " +
                  std::to_string(s.size) + " bytes, over this device's maxStorageBufferRange " +
                  std::to_string(caps.max_storage_buffer_range) + "; the op must split it");
    if (s.offset % caps.storage_buffer_alignment != 0)
      throw Error("shader '" + p.name() + "': binding " + std::to_string(b.binding) +
                  " starts at an offset not aligned to minStorageBufferOffsetAlignment");
    infos[i++] = {s.buffer, s.offset, s.size};
  }
  // What identifies the dispatch in the command buffer: a dry recording whose signature equals
  // the recorded one's would record the same commands (barriers follow from these too).
  const Pipeline* pp = &p;
  hash(&pp, sizeof pp);
  for (const BufferSpan& s : buffers) {
    const uint64_t b[3] = {reinterpret_cast<uint64_t>(s.buffer), s.offset, s.size};
    hash(b, sizeof b);
  }
  if (push_bytes) hash(push, push_bytes);
  const uint32_t g[3] = {groups.x, groups.y, groups.z};
  hash(g, sizeof g);
  if (dry_) {  // checked like a real dispatch (a texel view may have been made, and is kept)
    dry_dispatches_++;
    return;
  }

  if (auto_barriers_ && hazard(p, buffers)) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    reads_.clear();
    writes_.clear();
    stats_.barriers++;
    stats_.commands++;
  }
  i = 0;
  for (const BufferSpan& s : buffers) {
    const BindingInfo& b = iface.bindings[i++];
    Range r{s.buffer, s.offset, s.offset + s.size};
    if (b.reads) reads_.push_back(r);
    if (b.writes) writes_.push_back(r);
  }

  VkDescriptorSet set = allocate_set(p.set_layout());
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (uint32_t k = 0; k < infos.size(); k++) {
    writes[k] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[k].dstSet = set;
    writes[k].dstBinding = k;
    writes[k].descriptorCount = 1;
    writes[k].descriptorType = iface.bindings[k].type;
    if (views[k] != VK_NULL_HANDLE)
      writes[k].pTexelBufferView = &views[k];
    else
      writes[k].pBufferInfo = &infos[k];
  }
  vkUpdateDescriptorSets(device_.get(), static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  stats_.descriptor_writes += static_cast<uint32_t>(writes.size());

  if (bound_ != p.get()) {
    vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.get());
    bound_ = p.get();
    stats_.pipeline_binds++;
    stats_.commands++;
  }
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0, 1, &set, 0, nullptr);
  if (push_bytes) vkCmdPushConstants(cmd_, p.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cmd_, groups.x, groups.y, groups.z);
  stats_.dispatches++;
  stats_.commands += push_bytes ? 3 : 2;  // descriptor set, push constants, dispatch
  if (queries_ && timed_.size() + 1 < max_timestamps_) {
    timed_.push_back(p.name());
    timed_bytes_.push_back(read_only_bytes(iface, buffers));
    timed_flops_.push_back(flops);
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_,
                        static_cast<uint32_t>(timed_.size()));
    stats_.commands++;
  }
}

VkBufferView Recorder::texel_view(const Pipeline& p, const BindingInfo& b, const BufferSpan& s) {
  const DeviceCaps& caps = device_.caps();
  const std::string where =
      "shader '" + p.name() + "': texel-buffer binding " + std::to_string(b.binding);
  constexpr VkDeviceSize texel = 16;  // both formats reflect() accepts are 4 x 32 bits
  if (!caps.storage_texel_buffers)
    throw Error(where + ": the device has no rgba32 storage texel buffers");
  if (s.size % texel != 0)
    throw Error(where + " spans " + std::to_string(s.size) + " bytes, not whole texels");
  if (s.size / texel > caps.max_texel_buffer_elements)
    throw Error(where + " spans " + std::to_string(s.size / texel) +
                " texels, over this device's maxTexelBufferElements " +
                std::to_string(caps.max_texel_buffer_elements) + "; the op must split it");
  if (s.offset % caps.texel_buffer_alignment != 0)
    throw Error(where + " starts at an offset not aligned to minTexelBufferOffsetAlignment");
  auto key = std::make_tuple(s.buffer, s.offset, s.size, b.format);
  auto it = views_.find(key);
  if (it != views_.end()) return it->second;
  VkBufferViewCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
  info.buffer = s.buffer;
  info.format = b.format;
  info.offset = s.offset;
  info.range = s.size;
  VkBufferView view = VK_NULL_HANDLE;
  VK_CHECK(vkCreateBufferView(device_.get(), &info, nullptr, &view));
  return views_.emplace(key, device_.own(view, vkDestroyBufferView)).first->second;
}

void Recorder::end() {
  if (!recording_) throw Error("Recorder::end() without begin()");
  if (dry_) {
    recording_ = false;
    dry_ = false;
    return;
  }
  // Make every shader write visible to the host, so mapped memory can be read after wait().
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                       1, &mb, 0, nullptr, 0, nullptr);
  stats_.commands++;
  VK_CHECK(vkEndCommandBuffer(cmd_));
  recorded_ = true;
  recording_ = false;
}

void Recorder::submit() {
  if (recording_) throw Error("Recorder::submit() before end()");
  if (!recorded_)
    throw Error("Recorder::submit() with nothing recorded (a dry recording records nothing)");
  if (pending_) wait();
  device_.check_usable();
  VK_CHECK(vkResetFences(device_.get(), 1, fence_.ptr()));
  VkSubmitInfo info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd_;
  VK_CHECK(vkQueueSubmit(device_.queue(), 1, &info, fence_));
  pending_ = true;
  stats_.submits++;
}

double Recorder::timeout() const {
  return timeout_s_ > 0 ? timeout_s_ : device_.fence_timeout_s();
}

void Recorder::wait(double timeout_s) {
  if (!pending_) return;
  try {
    device_.wait_for(fence_, timeout_s > 0 ? timeout_s : timeout());
  } catch (const Error&) {
    // A lost device runs nothing any more; a timed-out submission may still be running, and
    // the destructor must settle it before anything it uses is freed.
    if (device_.lost() && vkGetFenceStatus(device_.get(), fence_) != VK_NOT_READY) pending_ = false;
    throw;
  }
  pending_ = false;
  stats_.waits++;
}

std::vector<DispatchTime> Recorder::timings() const {
  std::vector<DispatchTime> out = flushed_timings_;
  const std::vector<DispatchTime> last = last_timings();
  out.insert(out.end(), last.begin(), last.end());
  return out;
}

uint64_t timestamp_ticks(uint64_t from, uint64_t to, uint32_t valid_bits) {
  const uint64_t mask = valid_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << valid_bits) - 1;
  return ((to & mask) - (from & mask)) & mask;  // modulo 2^valid_bits: right across a wrap
}

std::vector<DispatchTime> Recorder::last_timings() const {
  std::vector<DispatchTime> out;
  if (!queries_ || timed_.empty() || pending_) return out;
  std::vector<uint64_t> ticks(timed_.size() + 1);
  VK_CHECK(vkGetQueryPoolResults(device_.get(), queries_, 0, static_cast<uint32_t>(ticks.size()),
                                 ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                                 VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const double ns = device_.caps().timestamp_period_ns;
  const uint32_t bits = device_.caps().timestamp_valid_bits;
  for (size_t k = 0; k < timed_.size(); k++)
    out.push_back({timed_[k],
                   static_cast<double>(timestamp_ticks(ticks[k], ticks[k + 1], bits)) * ns * 1e-6,
                   timed_bytes_[k], timed_flops_[k]});
  return out;
}

}  // namespace vk
