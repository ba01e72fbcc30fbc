#include "model/training/save.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/dtype.h"
#include "model/formats/safetensors.h"
#include "model/formats/safetensors_writer.h"
#include "model/formats/seq2seq_tensors.h"

namespace model::training {
namespace {

namespace fs = std::filesystem;

// The save's two folders inside dir (hidden, so readers of a model folder pass them by).
constexpr const char* kPartial = ".partial-checkpoint";    // being written; discarded
constexpr const char* kComplete = ".complete-checkpoint";  // whole and on disk; moved in

// Every file operation, announced to the hook first: a test's kill lands between two of them.
struct Ops {
  const FileOpHook& hook;
  void operator()(std::string_view op, const fs::path& path) const {
    if (hook) hook(op, path);
  }
};

[[noreturn]] void fail(const fs::path& path, const std::string& what, const std::error_code& ec) {
  throw std::runtime_error(path.string() + ": " + what + ": " + ec.message());
}

// fsync, so that a rename that follows never makes visible a file whose bytes are not yet on
// disk (a power cut would otherwise leave it empty or torn). A folder is synced for its names.
// EINVAL is a file system that has no such flush (some FUSE and network ones): nothing to wait
// for there, and no reason to refuse the save.
void sync(const Ops& ops, const fs::path& path, bool folder = false) {
  ops("sync", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (folder ? O_DIRECTORY : 0));
  if (fd < 0 || (::fsync(fd) != 0 && errno != EINVAL)) {
    const std::error_code ec(errno, std::generic_category());
    if (fd >= 0) ::close(fd);
    fail(path, "cannot flush to disk", ec);
  }
  ::close(fd);
}

void rename(const Ops& ops, const fs::path& from, const fs::path& to) {
  ops("rename", to);
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) fail(to, "cannot rename " + from.string() + " into place", ec);
}

void remove_all(const Ops& ops, const fs::path& path) {
  ops("remove", path);
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail(path, "cannot remove", ec);
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

// The weights as the folder holds them: a decoder's under the canonical names (GPT-2's own), an
// encoder-decoder's in MarianMTModel's names and layout, which transformers reads too.
std::vector<TensorData> model_tensors(const Parameters& p) {
  if (p.config().family != Family::EncoderDecoder) return tensors_of(p, "");
  std::vector<TensorData> out;
  const auto canonical = [&p](const std::string& name) -> const std::vector<float>& {
    return p.tensor(name);
  };
  for (const FileTensor& t : seq2seq_file_values(p.config(), canonical))
    out.push_back(make_tensor(t.tensor.name, TensorDType::F32, t.tensor.shape, t.values));
  return out;
}

// The files of its folder a tokenizer of this kind reads (a "bytes" or "chars" one lives in
// config.json).
std::vector<const char*> tokenizer_files(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::Gpt2:
      return {"vocab.json", "merges.txt"};
    case TokenizerKind::MarianSpm:
      return {"source.spm", "target.spm", "vocab.json"};
    case TokenizerKind::T5Spm:
      return {"spiece.model"};
    default:
      return {};
  }
}

// The checkpoint's files, written into `into` and each flushed.
void write_files(const Ops& ops, const fs::path& into, const Parameters& params,
                 const fs::path& tokenizer_dir, const RunState* state, const Parameters* m,
                 const Parameters* v) {
  std::error_code ec;
  const Config& c = params.config();
  for (const char* f : tokenizer_files(c.tokenizer.kind)) {
    ops("write", into / f);
    fs::copy_file(tokenizer_dir / f, into / f, fs::copy_options::overwrite_existing, ec);
    if (ec) fail(tokenizer_dir / f, "cannot copy", ec);
    sync(ops, into / f);
  }
  const std::string step = state ? std::to_string(state->step) : "0";
  if (state) {
    if (!m || !v) throw std::invalid_argument("save_checkpoint: a run state needs the moments");
    std::vector<TensorData> moments = tensors_of(*m, "m.");
    for (TensorData& t : tensors_of(*v, "v.")) moments.push_back(std::move(t));
    ops("write", into / "optimizer.safetensors");
    write_safetensors(into / "optimizer.safetensors", moments, {{"gpt2vk_step", step}});
    sync(ops, into / "optimizer.safetensors");
    ops("write", into / "trainer_state.json");
    write_text(into / "trainer_state.json", run_state_json(*state));
    sync(ops, into / "trainer_state.json");
  }
  ops("write", into / "config.json");
  write_text(into / "config.json", config_json(c));
  sync(ops, into / "config.json");
  ops("write", into / "model.safetensors");
  write_safetensors(into / "model.safetensors", model_tensors(params), {{"gpt2vk_step", step}});
  sync(ops, into / "model.safetensors");
}

}  // namespace

void save_checkpoint(const fs::path& dir, const Parameters& params, const fs::path& tokenizer_dir,
                     const RunState* state, const Parameters* m, const Parameters* v,
                     const FileOpHook& hook) {
  const Ops ops{hook};
  std::error_code ec;
  // A save a kill stopped after its commit holds newer files than dir: in with them first, so
  // that dir and the new files below never have to be told apart.
  finish_save(dir, hook);
  if (!fs::is_directory(dir)) {
    ops("mkdir", dir);
    fs::create_directories(dir, ec);
    if (ec) fail(dir, "cannot create the folder", ec);
    fs::path made = fs::absolute(dir).lexically_normal();
    if (!made.has_filename()) made = made.parent_path();  // "out/"
    sync(ops, made.parent_path(), true);
  }
  const fs::path partial = dir / kPartial, complete = dir / kComplete;
  if (fs::exists(partial, ec)) remove_all(ops, partial);  // a save killed before its commit
  ops("mkdir", partial);
  fs::create_directory(partial, ec);
  if (ec) fail(partial, "cannot create the folder", ec);
  write_files(ops, partial, params, tokenizer_dir, state, m, v);
  sync(ops, partial, true);
  rename(ops, partial, complete);  // the commit: from here on, the new checkpoint is the one
  sync(ops, dir, true);
  finish_save(dir, hook);
}

bool finish_save(const fs::path& dir, const FileOpHook& hook) {
  const Ops ops{hook};
  const fs::path complete = dir / kComplete;
  std::error_code ec;
  if (!fs::is_directory(complete, ec)) return false;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(complete, ec))
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  if (ec) fail(complete, "cannot list", ec);
  // The weights last, as before there was a commit: a reader of dir that sees them new sees the
  // rest new too.
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return std::pair(a == "model.safetensors", a) < std::pair(b == "model.safetensors", b);
  });
  for (const std::string& name : names) rename(ops, complete / name, dir / name);
  sync(ops, dir, true);
  // Once the renames are on disk the folder is empty; should its removal be lost too, the next
  // call finds nothing to move and removes it then.
  remove_all(ops, complete);
  return true;
}

RunState read_run_state(const fs::path& dir, const FileOpHook& hook) {
  finish_save(dir, hook);
  const fs::path state_file = dir / "trainer_state.json", moments = dir / "optimizer.safetensors";
  if (!fs::exists(state_file) || !fs::exists(moments))
    throw std::runtime_error(dir.string() + " is not a training checkpoint: it has no " +
                             (fs::exists(state_file) ? "optimizer.safetensors" : "trainer_state.json"));
  std::ifstream in(state_file, std::ios::binary);
  if (!in) throw std::runtime_error(state_file.string() + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_run_state(text.str(), state_file.string());
}

std::optional<uint64_t> checkpoint_in(const fs::path& dir) {
  std::error_code ec;
  // A save's complete folder holds the newer files where a kill left one.
  for (const fs::path& d : {dir / kComplete, dir}) {
    bool any = false;
    for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"})
      any = any || fs::exists(d / f, ec);
    if (!any) continue;
    std::ifstream in(d / "trainer_state.json", std::ios::binary);
    if (!in) return 0;
    std::ostringstream text;
    text << in.rdbuf();
    try {
      return parse_run_state(text.str(), (d / "trainer_state.json").string()).step;
    } catch (const std::runtime_error&) {
      return 0;  // a damaged state: a checkpoint still, of no step that can be told
    }
  }
  return std::nullopt;
}

Resumed load_run(const fs::path& dir, const FileOpHook& hook) {
  RunState state = read_run_state(dir, hook);
  const fs::path moments = dir / "optimizer.safetensors";
  const std::unique_ptr<Checkpoint> ckpt = Checkpoint::load(dir);
  Resumed r{std::move(state), Parameters::from_checkpoint(*ckpt), Parameters(ckpt->config()),
            Parameters(ckpt->config())};
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
