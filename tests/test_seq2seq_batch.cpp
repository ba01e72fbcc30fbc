// Several sources decoded together (Model::slot_set_source, decode_batch): each slot reads the
// source cache of its own, and a row's logits are the bits it gets decoded alone, so the ids are
// greedy()'s of each source; under both kernel sets, on the fixtures Hugging Face saved (Marian,
// T5 v1.0 and v1.1) and on models/reverse, whose sources end at different steps.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/forward/seq2seq.h"
#include "model/generation/seq2seq_generate.h"
#include "model/text/sentencepiece.h"
#include "tests/files.h"
#include "tests/gpu.h"

namespace {

// Sources of 1 to n ids, each its own, none holding the fixtures' special ids 0-2.
std::vector<std::vector<int32_t>> sources_of(size_t n, uint32_t V) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < n; i++) {
    std::vector<int32_t> ids;
    for (size_t t = 0; t <= i; t++)
      ids.push_back(static_cast<int32_t>(3 + (i * 31 + t * 17) % (V - 4)));
    out.push_back(ids);
  }
  return out;
}

// models/reverse's held-out sources (its heldout.tsv's first column), tokenized as the command
// does, strings of 4 to 12 letters whose reversals end at different steps.
std::vector<std::vector<int32_t>> reverse_sources(size_t n) {
  const std::filesystem::path dir = test::source_dir() / "models/reverse";
  const auto spm = model::load_sentencepiece(dir, model::SpmFlavor::Marian);
  std::ifstream in(dir / "heldout.tsv");
  std::vector<std::vector<int32_t>> out;
  for (std::string line; out.size() < n && std::getline(in, line);)
    out.push_back(spm->encode(line.substr(0, line.find('\t'))));
  return out;
}

model::GpuModelOptions options(uint32_t slots) {
  model::GpuModelOptions o;
  o.precision = model::Precision::F32;
  o.slots = o.sources = slots;
  return o;
}

}  // namespace

TEST_CASE("seq2seq: sources decoded together give greedy()'s ids, each as alone") {
  GPU_TEST(g);
  for (const char* name : {"marian", "t5-v1_0", "t5-v1_1", "reverse"}) {
    CAPTURE(std::string(name));
    const bool reverse = std::string(name) == "reverse";
    auto checkpoint =
        model::Checkpoint::load(reverse ? test::source_dir() / "models/reverse"
                                        : test::source_dir() / "tests/data/hf" / name);
    // More sources than slots: slots take new sources as theirs end.
    const std::vector<std::vector<int32_t>> sources =
        reverse ? reverse_sources(19) : sources_of(11, checkpoint->config().n_vocab);
    // Each source its own limit (the fixtures': 0 to 12; models/reverse's: 20, past every end).
    std::vector<uint32_t> limits;
    for (size_t i = 0; i < sources.size(); i++)
      limits.push_back(reverse ? 20 : static_cast<uint32_t>(i * 5 % 13));
    for (vk::KernelSet set : test::kKernelSets) {
      CAPTURE(vk::kernel_set_name(set));
      auto alone = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), options(1));
      auto together = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), options(4));
      std::vector<size_t> order;
      const std::vector<std::vector<int32_t>> got =
          model::decode_batch(*together, sources, limits, 4, nullptr,
                              [&](size_t i, const std::vector<int32_t>&) { order.push_back(i); });
      REQUIRE(got.size() == sources.size());
      CHECK(order.size() == sources.size());
      std::vector<size_t> lengths;
      for (size_t i = 0; i < sources.size(); i++) {
        CAPTURE(i);
        CHECK(got[i] == model::greedy(*alone, sources[i], limits[i]));
        lengths.push_back(got[i].size());
      }
      // The reversals end at different steps, so slots took sources in mid-flight of the others.
      if (reverse) CHECK(std::set<size_t>(lengths.begin(), lengths.end()).size() > 3);
    }
  }
}

TEST_CASE("seq2seq: sampled sources decode together as each does alone") {
  // Each source draws from a Sampler of its own (seed + its index), from all V logits of its
  // step whether alone (sample()) or in a batch: the same ids either way. At temperature 4 the
  // random Marian and T5 v1.0 fixtures' draws are far from greedy's (v1.1's logits are too
  // peaked for that); at 1e-4 they are greedy's.
  GPU_TEST(g);
  for (const char* name : {"marian", "t5-v1_0"}) {
    CAPTURE(std::string(name));
    auto checkpoint = model::Checkpoint::load(test::source_dir() / "tests/data/hf" / name);
    const std::vector<std::vector<int32_t>> sources = sources_of(9, checkpoint->config().n_vocab);
    const uint32_t max_new = 10;
    model::SamplerOptions o;
    o.temperature = 4.0f, o.top_k = 50, o.top_p = 0.95f, o.seed = 11, o.temperature_first = true;
    for (vk::KernelSet set : test::kKernelSets) {
      CAPTURE(vk::kernel_set_name(set));
      auto alone = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), options(1));
      auto together = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), options(4));
      const auto one = model::decode_batch(*alone, sources, std::span(&max_new, 1), 1, &o);
      CHECK(model::decode_batch(*together, sources, std::span(&max_new, 1), 4, &o) == one);
      // Source i's own sampler: its ids alone, seeded seed + i.
      model::SamplerOptions third = o;
      third.seed += 2;
      model::Sampler s(third);
      CHECK(model::sample(*alone, sources[2], max_new, s) == one[2]);
      size_t differ = 0;
      for (size_t i = 0; i < sources.size(); i++)
        differ += one[i] != model::greedy(*alone, sources[i], max_new);
      CHECK(differ >= sources.size() / 2);
      model::SamplerOptions cold = o;
      cold.temperature = 1e-4f;
      const auto near_greedy =
          model::decode_batch(*together, sources, std::span(&max_new, 1), 4, &cold);
      for (size_t i = 0; i < sources.size(); i++)
        CHECK(near_greedy[i] == model::greedy(*alone, sources[i], max_new));
    }
  }
}

TEST_CASE("seq2seq: slots with sources of their own decode the bits each gets alone") {
  GPU_TEST(g);
  for (const char* name : {"marian", "t5-v1_1"}) {
    CAPTURE(std::string(name));
    auto checkpoint = model::Checkpoint::load(test::source_dir() / "tests/data/hf" / name);
    const model::Config& c = checkpoint->config();
    const uint32_t V = c.n_vocab, S = 3;
    const std::vector<std::vector<int32_t>> sources = {sources_of(9, V)[8], sources_of(2, V)[1],
                                                       sources_of(5, V)[4]};
    for (vk::KernelSet set : test::kKernelSets) {
      CAPTURE(vk::kernel_set_name(set));
      // Each source alone in a model of one slot, as greedy() decodes it.
      std::vector<std::unique_ptr<model::Seq2Seq>> alone;
      auto together = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), options(S));
      for (uint32_t s = 0; s < S; s++) {
        alone.push_back(model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), options(1)));
        alone[s]->set_source(sources[s]);
        together->set_slot_source(s, sources[s]);
      }
      // Slot 1 starts two steps late, so the rows sit at different positions.
      for (uint32_t step = 0; step < 6; step++) {
        std::vector<model::Model::SlotToken> rows;
        for (uint32_t s = 0; s < S; s++)
          if (s != 1 || step >= 2)
            rows.push_back({s, static_cast<int32_t>((step * 5 + s * 11) % V)});
        const std::vector<float> out = together->decoder().slot_decode(rows);
        for (size_t r = 0; r < rows.size(); r++) {
          CAPTURE(step);
          CAPTURE(rows[r].slot);
          const model::Model::SlotToken one[] = {{0, rows[r].id}};
          const std::vector<float> own = alone[rows[r].slot]->decoder().slot_decode(one);
          CHECK(std::vector<float>(out.begin() + long(r * V), out.begin() + long((r + 1) * V)) ==
                own);
        }
      }
    }
  }
}

TEST_CASE("seq2seq: which source a slot reads") {
  GPU_TEST(g);
  auto checkpoint = model::Checkpoint::load(test::source_dir() / "tests/data/hf/marian");
  const uint32_t V = checkpoint->config().n_vocab;
  const std::vector<std::vector<int32_t>> sources = sources_of(6, V);
  model::GpuModelOptions o = options(3);
  o.sources = 2;
  auto m = model::make_gpu_seq2seq(*checkpoint, g.device, o);
  model::Model& d = m->decoder();
  const model::Model::SlotToken start[] = {{0, 5}};
  // No source yet: refused by slot.
  CHECK_THROWS_WITH_AS(d.slot_decode(start), doctest::Contains("set_source()"), std::runtime_error);
  m->set_slot_source(1, sources[3]);
  CHECK(d.slot_source_length(1) == 4);
  CHECK(d.slot_source_length(0) == 0);
  const model::Model::SlotToken two[] = {{2, 5}};
  CHECK_THROWS_WITH_AS(d.slot_decode(two), doctest::Contains("slot 2 has no source"),
                       std::runtime_error);
  // Slot 2 has no source cache of its own (2 caches); it reads another's through a copy.
  CHECK_THROWS_WITH_AS(m->set_slot_source(2, sources[0]),
                       doctest::Contains("no source cache of its own"), std::runtime_error);
  const model::Model::SlotCopy copy[] = {{1, 2}};
  d.slot_copy(copy);
  CHECK(d.slot_source_length(2) == 4);
  // Slot 1's cache overwritten: slot 2, which shared it, has none until it is given one.
  m->set_slot_source(1, sources[5]);
  CHECK(d.slot_source_length(1) == 6);
  CHECK(d.slot_source_length(2) == 0);
  // set_source(): every slot reads the one source.
  m->set_source(sources[1]);
  for (uint32_t s = 0; s < 3; s++) CHECK(d.slot_source_length(s) == 2);
  // More source caches than slots, or none: refused when the model is made.
  o.sources = 4;
  CHECK_THROWS_WITH_AS(model::make_gpu_seq2seq(*checkpoint, g.device, o),
                       doctest::Contains("4 source caches for 3 slots"), std::runtime_error);
}

TEST_CASE("seq2seq: prepare() for sources decoded together, or sampled, compiles what they use") {
  GPU_TEST(g);
  auto checkpoint = model::Checkpoint::load(test::source_dir() / "tests/data/hf/t5-v1_0");
  const std::vector<std::vector<int32_t>> sources = sources_of(7, checkpoint->config().n_vocab);
  std::vector<uint32_t> lengths;
  for (const auto& s : sources) lengths.push_back(static_cast<uint32_t>(s.size()));
  model::SamplerOptions o;
  o.temperature = 1.0f, o.top_k = 50, o.top_p = 1.0f, o.temperature_first = true;
  for (vk::KernelSet set : test::kKernelSets) {
    CAPTURE(vk::kernel_set_name(set));
    for (const uint32_t batch : {4u, 1u}) {
      for (const bool sampled : {false, true}) {
        CAPTURE(batch);
        CAPTURE(sampled);
        test::LoweredGpu fresh(g, {}, set);
        auto m = model::make_gpu_seq2seq(*checkpoint, fresh.device, options(batch));
        const size_t made = m->prepare(lengths, 8, 1, batch > 1, sampled);
        CHECK(made > 0);
        const uint32_t eight[] = {8};
        model::decode_batch(*m, sources, eight, batch, sampled ? &o : nullptr);
        CHECK(fresh.device.kernels().count() == made);
      }
    }
  }
}
