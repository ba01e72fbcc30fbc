// Seq2Seq::prepare(): the pipelines an encoder-decoder's generation uses, compiled before its
// first source, so that the command's clock (and a GPU's first source) waits for no compiler.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/forward/seq2seq.h"
#include "model/generation/seq2seq_generate.h"
#include "tests/files.h"
#include "tests/gpu.h"

namespace {

std::vector<int32_t> source_of(uint32_t S, uint32_t V) {
  std::vector<int32_t> ids(S);
  for (uint32_t t = 0; t < S; t++) ids[t] = static_cast<int32_t>(3 + (t * 7919u) % (V - 3));
  return ids;
}

}  // namespace

TEST_CASE("seq2seq: prepare() compiles every pipeline greedy and beam search use") {
  GPU_TEST(g);
  for (const char* name : {"marian", "t5-v1_0", "t5-v1_1"}) {
    CAPTURE(std::string(name));
    auto checkpoint = model::Checkpoint::load(test::source_dir() / "tests/data/hf" / name);
    const uint32_t V = checkpoint->config().n_vocab;
    for (vk::KernelSet set : test::kKernelSets) {
      CAPTURE(vk::kernel_set_name(set));
      for (uint32_t beams : {1u, 4u}) {
        CAPTURE(beams);
        // A device of its own, so that no earlier test has compiled anything for it.
        test::LoweredGpu fresh(g, {}, set);
        model::GpuModelOptions o;
        o.precision = model::Precision::F32;
        o.slots = beams;  // a slot per beam, as the seq2seq command gives them
        auto m = model::make_gpu_seq2seq(*checkpoint, fresh.device, o);
        const uint32_t max_new = 12;
        const std::vector<uint32_t> lengths{9, 5, 9};
        const size_t made = m->prepare(lengths, max_new, beams);
        CHECK(made > 0);
        CHECK(fresh.device.kernels().count() == made);
        model::BeamSettings s;
        s.beams = beams;
        s.max_new_tokens = max_new;
        s.early_stopping = model::BeamSettings::Stop::Never;  // every step up to max_new
        for (uint32_t S : {9u, 5u}) {
          const std::vector<int32_t> source = source_of(S, V);
          const std::vector<int32_t> out =
              beams == 1 ? model::greedy(*m, source, max_new) : model::beam(*m, source, s);
          CHECK(!out.empty());
          // Nothing was made after prepare(): its dry passes named what the real ones use.
          CHECK(fresh.device.kernels().count() == made);
        }
        // Prepared lengths again: nothing new to compile.
        CHECK(m->prepare(lengths, max_new, beams) == 0);
      }
    }
  }
}

TEST_CASE("seq2seq: prepare() on the CPU reference compiles nothing") {
  auto checkpoint = model::Checkpoint::load(test::source_dir() / "tests/data/hf/t5-v1_0");
  auto m = model::make_cpu_seq2seq(*checkpoint, model::Precision::F32);
  const std::vector<uint32_t> lengths{4};
  CHECK(m->prepare(lengths, 8, 1) == 0);
}
