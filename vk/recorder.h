// Records many dispatches into one command buffer, with the barriers between them, and submits
// it once against one fence. Barriers are derived from each shader's reflected bindings: a
// dispatch that reads or writes a range an earlier dispatch wrote (or writes a range one read)
// since the last barrier gets a compute-to-compute barrier first, and no other dispatch does.
#pragma once
#include <volk.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "vk/handle.h"
#include "vk/hash.h"
#include "vk/memory.h"
#include "vk/pipeline.h"

namespace vk {

class Device;

struct Groups {
  uint32_t x = 1, y = 1, z = 1;
};

// Workgroups to cover `threads` invocations along x with `p`'s workgroup size (ceil-div). Counts
// beyond the device's maxComputeWorkGroupCount[0] fold into y; shaders index with
// gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x
// and bound-check against the thread count.
Groups groups_for(const Device& device, const Pipeline& p, uint64_t threads);
// The same fold for a count of workgroups (one per row, per output block, ...); `what` names the
// op in the error when even x * y cannot hold them.
Groups fold_groups(const Device& device, uint64_t groups, const std::string& what);

// What one recording did; the counters that prove "one submission per forward pass".
struct RecorderStats {
  uint32_t dispatches = 0;
  uint32_t barriers = 0;
  uint32_t descriptor_writes = 0;  // descriptors written (one per binding)
  uint32_t pipeline_binds = 0;
  uint32_t submits = 0;
  uint32_t waits = 0;
  uint32_t commands = 0;  // vkCmd* calls recorded (0 for a replay)
  uint32_t replays = 0;   // submissions of an earlier recording, unchanged (Recorder::replay)

  RecorderStats& operator+=(const RecorderStats& o) {  // of a pass recorded in several parts
    dispatches += o.dispatches, barriers += o.barriers, descriptor_writes += o.descriptor_writes;
    pipeline_binds += o.pipeline_binds, submits += o.submits, waits += o.waits;
    commands += o.commands, replays += o.replays;
    return *this;
  }
};

struct DispatchTime {
  std::string shader;
  double ms = 0;
  // Bytes of the dispatch's read-only bindings, overlaps counted once: what it reads at most,
  // and exactly what a matrix-vector product reads (its bindings are the weight block and x), so
  // bytes / ms is the bandwidth the op reached.
  uint64_t read_bytes = 0;
  // Its arithmetic, as the op that recorded it counts it (Recorder::set_flops): a multiply and
  // an add are 2. 0 where the op does not say (or cannot: keys read at run time).
  double flops = 0;
};

// Ticks from timestamp `from` to a later `to`, of which only the low `valid_bits` count: the
// counter wraps there (Intel reports 36 bits), and the bits above are undefined.
uint64_t timestamp_ticks(uint64_t from, uint64_t to, uint32_t valid_bits);

class Recorder {
 public:
  // timestamps: write a GPU timestamp after every dispatch (when the queue supports them).
  explicit Recorder(const Device& device, bool timestamps = false);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  ~Recorder();

  void begin();  // start a new recording; releases the previous one's descriptor sets
  // A recording that records nothing: dispatches are checked as in a real one and counted
  // (dry_dispatches), flush() does nothing, and the last real recording is left as it was (its
  // stats, timings, and a later submit() submit it again). What it is for: the ops it runs
  // request their pipelines, so a dry pass names the pipelines a real one will use
  // (Kernels::defer), before they are compiled.
  void begin_dry();
  uint32_t dry_dispatches() const { return dry_dispatches_; }
  // After a dry recording: whether it would have recorded exactly what the last real recording
  // holds (the same pipelines, bindings, push constants and workgroups, in order, and no
  // flush), so that submitting that one again does the same work. Every recording keeps a hash
  // of those (its signature).
  bool dry_matches() const;
  // Submits the last real recording again where dry_matches(); stats() then count the one
  // submission and its dispatches, with nothing recorded. Throws otherwise.
  void replay();

  // Binds `buffers` to bindings 0, 1, ... of `p` and dispatches. A storage texel buffer binding
  // (imageLoad) gets a VkBufferView of the span in the format the shader declares; views are
  // made once per (buffer, range, format) and kept for the Recorder's lifetime, so a buffer bound
  // that way must outlive the Recorder's use of it and not be replaced by a new buffer while the
  // Recorder lives (a new VkBuffer could reuse the handle). P is the shader's push-constant
  // struct; its size must equal the shader's block.
  template <typename P>
  void dispatch(const Pipeline& p, std::initializer_list<BufferSpan> buffers, const P& push,
                Groups groups) {
    record(p, {buffers.begin(), buffers.size()}, &push, sizeof(P), groups);
  }
  // The same with bindings gathered at run time (an optional output, say).
  template <typename P>
  void dispatch(const Pipeline& p, std::span<const BufferSpan> buffers, const P& push,
                Groups groups) {
    record(p, buffers, &push, sizeof(P), groups);
  }
  void dispatch(const Pipeline& p, std::initializer_list<BufferSpan> buffers, Groups groups) {
    record(p, {buffers.begin(), buffers.size()}, nullptr, 0, groups);
  }

  // The FLOPs of the next dispatch (DispatchTime::flops); each dispatch takes it and resets it.
  void set_flops(double flops) { next_flops_ = flops; }

  void end();     // closes the recording; it may then be submitted any number of times
  void submit();  // one vkQueueSubmit with the fence; throws once the device is lost
  // Waits on the fence at most timeout_s (0: the device's fence_timeout_s()); a submission that
  // does not finish in time, or a lost device, becomes a vk::Error (Device::wait_for).
  void wait(double timeout_s = 0);
  // The timeout of waits that name none (flush() and wait()), until set again; 0: the device's.
  // A model sets it per pass from the pass's expected time (model/forward/submissions.h).
  void set_timeout(double timeout_s) { timeout_s_ = timeout_s; }
  double timeout() const;
  void run() { end(); submit(); wait(); }
  // Submits what is recorded so far, waits, and goes on recording: one pass in several
  // submissions, for drivers whose watchdog ends long ones. Barrier tracking carries over, so a
  // dispatch that touches what the earlier submission wrote still gets its barrier (submission
  // order makes it cover the earlier batch). stats() and timings() add up over the parts; only
  // the part after the last flush() is replayed by another submit().
  void flush();

  // Tests use this to prove synchronization validation catches a missing barrier.
  void set_auto_barriers(bool on) { auto_barriers_ = on; }

  const RecorderStats& stats() const { return stats_; }
  // GPU time of each dispatch of the last finished submission (empty without timestamps).
  std::vector<DispatchTime> timings() const;

 private:
  struct Range {
    VkBuffer buffer;
    VkDeviceSize lo, hi;
  };
  void record(const Pipeline& p, std::span<const BufferSpan> buffers, const void* push,
              uint32_t push_bytes, Groups groups);
  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout);
  void add_pool();
  bool hazard(const Pipeline& p, std::span<const BufferSpan> buffers) const;
  // The union of the read-only bindings' byte ranges (DispatchTime::read_bytes).
  static uint64_t read_only_bytes(const ShaderInterface& iface,
                                  std::span<const BufferSpan> buffers);
  VkBufferView texel_view(const Pipeline& p, const BindingInfo& b, const BufferSpan& s);
  void open();  // begins the command buffer (and the timestamps) for more dispatches
  std::vector<DispatchTime> last_timings() const;  // of the part last submitted

  const Device& device_;
  Handle<VkCommandPool> pool_;
  Handle<VkFence> fence_;
  Handle<VkQueryPool> queries_;
  std::vector<Handle<VkDescriptorPool>> descriptor_pools_;
  std::map<std::tuple<VkBuffer, VkDeviceSize, VkDeviceSize, VkFormat>, Handle<VkBufferView>> views_;
  size_t current_pool_ = 0;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;

  bool recording_ = false;
  bool dry_ = false;  // begin_dry()
  uint32_t dry_dispatches_ = 0;
  uint64_t signature_ = kFnv1aOffset;      // of the real recording (vk/hash.h)
  uint64_t dry_signature_ = kFnv1aOffset;  // of the last dry one
  bool flushed_ = false;                     // the real recording was cut by flush()
  void hash(const void* data, size_t bytes);  // into the current recording's signature
  bool recorded_ = false;  // cmd_ holds a finished real recording
  double timeout_s_ = 0;  // set_timeout()
  bool pending_ = false;  // submitted, not yet waited on
  bool auto_barriers_ = true;
  VkPipeline bound_ = VK_NULL_HANDLE;
  std::vector<Range> reads_, writes_;  // since the last barrier
  std::vector<std::string> timed_;     // shader name per timestamp interval
  std::vector<uint64_t> timed_bytes_;  // and its DispatchTime::read_bytes
  std::vector<double> timed_flops_;    // and its DispatchTime::flops
  double next_flops_ = 0;              // set_flops()
  std::vector<DispatchTime> flushed_timings_;  // of the parts flush() submitted
  uint32_t max_timestamps_ = 0;
  RecorderStats stats_;
};

}  // namespace vk
