// A device with every kernel decision made once: what each GPU op wrapper receives. The
// pipelines (vk::Kernels, shared by everything on the device), the kernel policy resolved for
// it (the set, the tuning table's row) and, from checked_ops (coop_check.h), the verdict of the
// matrix units' self-test. A model, a trainer or a test makes one and passes it down; no op
// works the policy out again.
#pragma once
#include <string>

#include "model/ops/gpu/policy.h"
#include "shader_names.h"
#include "vk/context.h"
#include "vk/pipeline.h"

namespace model::gpu {

class Ops {
 public:
  // The policy the device's options ask for (vk::DeviceOptions::kernels, coop_matrix), on its
  // shared pipelines or on a Kernels of the caller's (a test that counts compiles). Models and
  // trainers take checked_ops(device) instead, which first tests the matrix units where this
  // policy would use them.
  explicit Ops(const vk::Device& device);
  explicit Ops(vk::Kernels& kernels);
  // A policy given whole, with the note that says why it differs from the chosen one.
  Ops(vk::Kernels& kernels, const KernelPolicy& policy, std::string note = {});

  const vk::Device& device() const { return kernels_.device(); }
  const vk::DeviceCaps& caps() const { return kernels_.device().caps(); }
  const KernelPolicy& policy() const { return policy_; }
  // A pipeline by shader and specialization, made on first use (vk::Kernels::get). The shader
  // is an enumerator of the generated list (shader_names.h): a name no shader has is a
  // compile error, not a failure at run time.
  const vk::Pipeline& get(vk::Shader shader, const vk::Specialization& spec = {}) const {
    return kernels_.get(vk::shader_name(shader), spec);
  }
  vk::Kernels& kernels() const { return kernels_; }  // defer() and compile_deferred()
  // Where the matrix units' self-test failed or could not run: what it found, else "".
  const std::string& note() const { return note_; }

 private:
  vk::Kernels& kernels_;
  KernelPolicy policy_;
  std::string note_;
};

}  // namespace model::gpu
