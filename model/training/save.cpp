#include "model/training/save.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/dtype.h"
#include "model/formats/safetensors.h"
#include "model/formats/safetensors_writer.h"

namespace model::training {
namespace {

namespace fs = std::filesystem;

// dir/.name.tmp, for a rename over dir/name once it is whole.
fs::path temporary(const fs::path& dir, const std::string& name) {
  return dir / ("." + name + ".tmp");
}

void write_text(const fs::path& file, const std::string& text) {
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) throw std::runtime_error(file.string() + ": cannot open for writing");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error(file.string() + ": write failed (disk full?)");
}

std::vector<TensorData> tensors_of(const Parameters& p, const std::string& prefix) {
  std::vector<TensorData> out;
  for (const ExpectedTensor& e : p.tensors())
    out.push_back(make_tensor(prefix + e.name, TensorDType::F32, e.shape, p.tensor(e.name)));
  return out;
}

void read_tensors(const SafeTensors& file, const std::string& prefix, Parameters& into,
                  const fs::path& path) {
  for (const ExpectedTensor& e : into.tensors()) {
    const TensorView* t = file.find(prefix + e.name);
    if (!t || t->shape != e.shape)
      throw std::runtime_error(path.string() + ": " + prefix + e.name +
                               (t ? " has another shape than the model's" : " is missing"));
    into.tensor(e.name) = to_f32(*t);
  }
}

}  // namespace

void save_checkpoint(const fs::path& dir, const Parameters& params, const fs::path& tokenizer_dir,
                     const RunState* state, const Parameters* m, const Parameters* v) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir.string() + ": cannot create the folder: " + ec.message());
  std::vector<std::pair<fs::path, std::string>> renames;  // temporary -> final name, in order
  const auto stage = [&](const std::string& name) {
    renames.emplace_back(temporary(dir, name), name);
    return temporary(dir, name);
  };
  const Config& c = params.config();
  if (c.tokenizer.kind == TokenizerKind::Gpt2 && fs::absolute(tokenizer_dir) != fs::absolute(dir))
    for (const char* f : {"vocab.json", "merges.txt"}) {
      fs::copy_file(tokenizer_dir / f, stage(f), fs::copy_options::overwrite_existing, ec);
      if (ec) throw std::runtime_error((tokenizer_dir / f).string() + ": cannot copy: " + ec.message());
    }
  const std::string step = state ? std::to_string(state->step) : "0";
  if (state) {
    if (!m || !v) throw std::invalid_argument("save_checkpoint: a run state needs the moments");
    std::vector<TensorData> moments = tensors_of(*m, "m.");
    for (TensorData& t : tensors_of(*v, "v.")) moments.push_back(std::move(t));
    write_safetensors(stage("optimizer.safetensors"), moments, {{"gpt2vk_step", step}});
    const nlohmann::json j = {{"step", state->step}, {"position", state->position},
                              {"settings", state->settings}, {"train_loss", state->train_loss},
                              {"val_loss", state->val_loss}};
    write_text(stage("trainer_state.json"), j.dump(2) + "\n");
  }
  write_text(stage("config.json"), config_json(c));
  write_safetensors(stage("model.safetensors"), tensors_of(params, ""), {{"gpt2vk_step", step}});
  for (const auto& [from, name] : renames) {
    fs::rename(from, dir / name, ec);
    if (ec) throw std::runtime_error((dir / name).string() + ": cannot rename into place: " + ec.message());
  }
}

Resumed load_run(const fs::path& dir) {
  const fs::path state_file = dir / "trainer_state.json", moments = dir / "optimizer.safetensors";
  if (!fs::exists(state_file) || !fs::exists(moments))
    throw std::runtime_error(dir.string() + " is not a training checkpoint: it has no " +
                             (fs::exists(state_file) ? "optimizer.safetensors" : "trainer_state.json"));
  const std::unique_ptr<Checkpoint> ckpt = Checkpoint::load(dir);
  Resumed r{{}, Parameters::from_checkpoint(*ckpt), Parameters(ckpt->config()), Parameters(ckpt->config())};
  std::ifstream in(state_file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    r.state = {j.at("step").get<uint64_t>(), j.at("position").get<uint64_t>(),
               j.at("settings").get<std::string>(), {}, {}};
    using Curve = std::vector<std::pair<uint64_t, double>>;
    if (j.contains("train_loss")) r.state.train_loss = j.at("train_loss").get<Curve>();
    if (j.contains("val_loss")) r.state.val_loss = j.at("val_loss").get<Curve>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(state_file.string() + ": " + e.what());
  }
  const std::unique_ptr<SafeTensors> file = SafeTensors::open(moments);
  read_tensors(*file, "m.", r.m, moments);
  read_tensors(*file, "v.", r.v, moments);
  const std::string step = std::to_string(r.state.step);
  const auto step_of = [](const std::map<std::string, std::string>& meta) {
    auto it = meta.find("gpt2vk_step");
    return it == meta.end() ? std::string("none") : it->second;
  };
  const std::unique_ptr<SafeTensors> weights = SafeTensors::open(dir / "model.safetensors");
  if (step_of(weights->metadata()) != step || step_of(file->metadata()) != step)
    throw std::runtime_error(dir.string() + ": the run state is at step " + step +
                             " but the weights or the moments are not (an interrupted save?)");
  return r;
}

}  // namespace model::training
