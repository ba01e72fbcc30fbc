// gpt2vk train: train a model (from a checkpoint or from GPT-2's initialisation) on a text file,
// one command buffer per step on a Vulkan device (model/training/gpu_trainer.h), saving
// Hugging Face-layout checkpoints that the other commands read as they are.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "apps/commands.h"
#include "apps/group.h"
#include "apps/options.h"
#include "apps/progress.h"
#include "apps/session.h"
#include "apps/signals.h"
#include "apps/train_pairs.h"
#include "apps/train_ranks.h"
#include "apps/train_report.h"
#include "model/formats/checkpoint.h"
#include "model/generation/sampler.h"
#include "model/text/tokenizer.h"
#include "model/training/gpu_trainer.h"
#include "model/training/run_state.h"
#include "model/training/save.h"
#include "model/training/schedule.h"

namespace app {
namespace {

struct TrainArgs {
  // -m, --init, --data, --batch, --ctx, the optimizer's and the schedule's flags, --seed,
  // --sampling, --grad-accum, --steps, --val-data, --eval-every, --save-every, --recompute;
  // paths made absolute before use.
  model::training::RunFlags run;
  ModelArgs model;  // --device, --kernels, --validation
  std::string out, resume, log;
  bool overwrite = false;  // -o may replace a checkpoint that is not --resume's
  bool profile = false;  // then GPU time per op of the last step
  // Time the steps only: no output folder, no checkpoint, no evaluation; print tokens/s (the
  // median step after the first, whose time includes building the pipelines).
  bool bench = false;
  // --sample-every N (0: never): every N steps, a greedy continuation by --sample-len tokens of
  // --sample-prompt (default: the training text's first line, its first kSamplePromptTokens);
  // an encoder-decoder's, the translation of --sample-prompt (default: the first pair's source).
  uint64_t sample_every = 0;
  uint32_t sample_len = 64;
  std::string sample_prompt;
};

constexpr size_t kSamplePromptTokens = 8;

// Whether the command line gave an option ("--lr", "-m").
using Given = std::function<bool(const std::string& flag)>;

namespace fs = std::filesystem;
using model::training::Parameters;

// GPT2VK_TRAIN_KILL_AT_FILE_OP=N, for tests: SIGKILL just before the run's Nth file operation
// on a checkpoint (a save's or a recovery's), named on stderr first, as an unlucky kill would
// land there.
model::training::FileOpHook kill_hook_from_env() {
  const char* v = std::getenv("GPT2VK_TRAIN_KILL_AT_FILE_OP");
  if (!v || !*v) return {};
  char* end = nullptr;
  const uint64_t at = std::strtoull(v, &end, 10);
  if (*end || at == 0)
    throw std::runtime_error(std::string("GPT2VK_TRAIN_KILL_AT_FILE_OP=") + v + ": not a count from 1");
  const auto count = std::make_shared<uint64_t>(0);
  return [at, count](std::string_view op, const fs::path& path) {
    if (++*count != at) return;
    std::fprintf(stderr, "gpt2vk: killed before file operation %llu: %.*s %s\n",
                 static_cast<unsigned long long>(at), static_cast<int>(op.size()), op.data(),
                 path.c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  };
}

// The validation flags come together: one without the other would silently evaluate nothing.
void check_validation(const TrainArgs& a) {
  if (a.bench) return;
  if (a.run.eval_every && a.run.val_data.empty())
    throw std::runtime_error("--eval-every needs --val-data FILE, the text to evaluate on");
  if (!a.run.val_data.empty() && !a.run.eval_every)
    throw std::runtime_error("--val-data is read only with --eval-every N (how often to evaluate)");
}

// The sample flags: --sample-len and --sample-prompt shape what --sample-every prints.
void check_sampling(const TrainArgs& a, const Given& given) {
  for (const char* flag : {"--sample-len", "--sample-prompt"})
    if (given(flag) && !a.sample_every)
      throw std::runtime_error(std::string(flag) + " is read only with --sample-every N (how often "
                               "to print a sample)");
  if (given("--sample-prompt") && a.sample_prompt.empty())
    throw std::runtime_error("--sample-prompt is empty: give some text, or leave it out for the "
                             "training text's first line");
}

// The option of a run flag's key: "lr" is --lr, "weight_decay" --weight-decay, "model" -m.
std::string flag_of(std::string_view key) {
  if (key == "model") return "-m";
  std::string flag = "--" + std::string(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// The run's paths as absolute ones: what the state records, and what a resume compares (not
// normalised: the settings line has always held fs::absolute's text).
void make_absolute(model::training::RunFlags& f) {
  for (std::string* path : {&f.data, &f.init, &f.model, &f.val_data})
    if (!path->empty()) *path = fs::absolute(*path).string();
}

// --resume DIR: the run's flags the command line leaves out come from its state. One that
// shapes the weights, given with another value than the run's, is refused, naming both. A
// state from before the flags were kept gives those of its settings line, with numbers to
// the line's 6 significant digits, compared at that precision (as the whole line was before).
void take_run_flags(TrainArgs& a, const Given& given, const model::training::RunState& state) {
  namespace mt = model::training;
  const bool exact = state.flags.has_value();
  const std::optional<mt::RunFlags> run = exact ? state.flags : mt::parse_settings_line(state.settings);
  if (!run) {
    if (a.run.data.empty())
      throw std::runtime_error(a.resume + "/trainer_state.json does not record the run's flags in a "
                               "form this version reads: give them again (they were: " +
                               state.settings + ")");
    return;  // the whole settings line is compared below, as before
  }
  const auto show = [](const std::string& v) { return v.empty() ? std::string("(none)") : v; };
  for (std::string_view key : mt::run_flag_keys()) {
    const std::string flag = flag_of(key);
    if (!given(flag)) {
      if (exact || mt::shapes_run(key)) mt::copy_run_flag(a.run, *run, key);
    } else if (mt::shapes_run(key)) {
      const std::string now = mt::run_flag_text(a.run, key, exact);
      const std::string then = mt::run_flag_text(*run, key, exact);
      if (now != then)
        throw std::runtime_error(a.resume + " was trained with other flags or data: " + flag + " " +
                                 show(now) + " here, " + show(then) + " in its run (leave " +
                                 flag + " out to go on with the run's, or start a new run with "
                                 "another -o)");
    }
  }
  // --eval-every 0 ends the run's validation: its text is not read then.
  if (!given("--val-data") && a.run.eval_every == 0) a.run.val_data.clear();
}

// --resume DIR alone goes on with the run's flags, into DIR. False where the run reached its
// recorded total and no --steps asks for more: nothing to do, and it says so.
bool take_resume(TrainArgs& a, const Given& given, const model::training::FileOpHook& file_ops) {
  const model::training::RunState run = model::training::read_run_state(a.resume, file_ops);
  take_run_flags(a, given, run);
  if (a.out.empty()) a.out = a.resume;
  if (!run.flags || given("--steps") || run.step < a.run.steps) return true;
  std::fprintf(stderr, "gpt2vk: %s: the run is complete (step %llu of %llu); give --steps N, the "
               "new total, to go on\n", a.resume.c_str(), static_cast<unsigned long long>(run.step),
               static_cast<unsigned long long>(a.run.steps));
  return false;
}

// A new run's -o must not silently replace a checkpoint: one there is continued with --resume,
// or replaced with --overwrite.
void check_out(const TrainArgs& a) {
  if (a.bench || a.overwrite) return;
  std::error_code ec;
  if (!a.resume.empty() && fs::equivalent(a.out, a.resume, ec)) return;
  const std::optional<uint64_t> step = model::training::checkpoint_in(a.out);
  if (!step) return;
  if (*step)
    throw std::runtime_error(a.out + " already holds a checkpoint (step " + std::to_string(*step) +
                             "): continue it with --resume " + a.out +
                             ", or pass --overwrite to replace it");
  throw std::runtime_error(a.out + " already holds a model, with no run state to go on from: "
                           "write to another folder, or pass --overwrite to replace it");
}

// The run's data order (the contract's, schedule.h): sequential windows from a position, or
// random ones from the generator's state; `rows` = --grad-accum x --batch a step.
class DataOrder {
 public:
  // Throws where the data cannot give a step, naming the flags that ask for it.
  DataOrder(const model::training::RunFlags& f, std::span<const int32_t> data,
            const model::training::RunState& state) {
    const uint64_t rows = uint64_t{f.grad_accum} * f.batch, need = rows * f.ctx + 1;
    if (need - 1 > UINT32_MAX)
      throw std::runtime_error("a step of --grad-accum " + std::to_string(f.grad_accum) +
                               " x --batch " + std::to_string(f.batch) + " x --ctx " +
                               std::to_string(f.ctx) + " tokens passes 2^32 tokens");
    const std::string step =
        f.grad_accum > 1 ? std::to_string(f.grad_accum) + " micro-batches of B=" + std::to_string(f.batch)
                         : "B=" + std::to_string(f.batch);
    if (f.sampling == "random") {
      // A window fits, or nothing does; a batch of windows may overlap (nanoGPT's get_batch).
      if (data.size() < uint64_t{f.ctx} + 1)
        throw std::runtime_error(f.data + ": the data holds " + std::to_string(data.size()) +
                                 " tokens; a window of T=" + std::to_string(f.ctx) + " needs " +
                                 std::to_string(uint64_t{f.ctx} + 1));
      random_.emplace(data, static_cast<uint32_t>(rows), f.ctx, state.rng_state.value_or(f.seed));
    } else {
      if (data.size() < need)
        throw std::runtime_error(f.data + ": the data holds " + std::to_string(data.size()) +
                                 " tokens; a step of " + step + " sequences of T=" +
                                 std::to_string(f.ctx) + " needs " + std::to_string(need) +
                                 " (--sampling sequential)");
      sequential_.emplace(data, static_cast<uint32_t>(rows), f.ctx, state.position);
    }
  }
  // An encoder-decoder's: `rows` pairs a step, drawn at random from the generator's state.
  DataOrder(const model::training::RunFlags& f, const model::training::Pairs& pairs,
            const model::training::PairLayout& layout, const model::training::RunState& state)
      : pairs_(&pairs),
        layout_(layout),
        rows_(f.grad_accum * f.batch),
        pair_state_(state.rng_state.value_or(f.seed)) {}
  // The next step's rows; an encoder-decoder's sources too.
  void next(std::vector<int32_t>& ids, std::vector<int32_t>& targets,
            std::vector<int32_t>& sources) {
    if (pairs_)
      model::training::gather_pairs(
          *pairs_, model::training::random_pairs(pair_state_, pairs_->size(), rows_), layout_,
          sources, ids, targets);
    else if (random_)
      random_->next(ids, targets);
    else sequential_->next(ids, targets);
  }
  // Where the next step's data comes from, into the state a save writes.
  void keep(model::training::RunState& state) const {
    if (pairs_)
      state.rng_state = pair_state_;
    else if (random_)
      state.rng_state = random_->state();
    else state.position = sequential_->position();
  }

 private:
  const model::training::Pairs* pairs_ = nullptr;
  model::training::PairLayout layout_;
  uint32_t rows_ = 0;
  uint64_t pair_state_ = 0;
  std::optional<model::training::Batches> sequential_;
  std::optional<model::training::RandomWindows> random_;
};

// A file's tokens, the file named in any error.
std::vector<int32_t> tokenize_file(const model::Tokenizer& tok, const std::string& file) {
  const std::string text = read_file(file);
  try {
    return tok.encode(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
}

// The mean loss over the val tokens' whole windows of T + 1 (stride T), in batches of B; windows
// that do not fill a last batch are left out.
struct Eval {
  double loss = 0;
  uint64_t windows = 0;
};
Eval evaluate(model::training::GpuTrainer& trainer, const std::vector<int32_t>& tokens) {
  const uint32_t B = trainer.batch(), T = trainer.context();
  const uint64_t windows = tokens.size() > T ? (tokens.size() - 1) / T : 0;
  Eval e;
  std::vector<int32_t> ids(size_t{B} * T), targets(size_t{B} * T);
  for (uint64_t w0 = 0; w0 + B <= windows; w0 += B) {
    for (uint32_t b = 0; b < B; b++)
      for (uint32_t t = 0; t < T; t++) {
        ids[size_t{b} * T + t] = tokens[(w0 + b) * T + t];
        targets[size_t{b} * T + t] = tokens[(w0 + b) * T + t + 1];
      }
    e.loss += trainer.evaluate(ids, targets) * B;
    e.windows += B;
  }
  if (e.windows) e.loss /= static_cast<double>(e.windows);
  return e;
}

// The lines of a --log file whose step is at most state.step, in order. With `rebuild` (a
// checkpoint from before the run state kept its losses), the state's curves come from them.
std::string log_until(const std::string& file, model::training::RunState& state, bool rebuild) {
  std::ifstream in(file);
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_unsigned()) continue;
    const uint64_t step = j["step"].get<uint64_t>();
    if (step > state.step) continue;
    kept += line + "\n";
    if (!rebuild) continue;
    if (j.contains("loss") && j["loss"].is_number()) state.train_loss.emplace_back(step, j["loss"].get<double>());
    if (j.contains("val_loss") && j["val_loss"].is_number())
      state.val_loss.emplace_back(step, j["val_loss"].get<double>());
  }
  return kept;
}

// --sample-every's prompt: --sample-prompt's tokens, or the training text's first line cut to
// its first kSamplePromptTokens (the text's first token where that line has none).
std::vector<int32_t> sample_prompt(const TrainArgs& a, const model::Tokenizer& tok,
                                   const std::vector<int32_t>& data) {
  std::string text = a.sample_prompt;
  if (text.empty()) std::getline(std::ifstream(a.run.data), text);
  std::vector<int32_t> ids = tok.encode(text);
  if (a.sample_prompt.empty() && ids.size() > kSamplePromptTokens) ids.resize(kSamplePromptTokens);
  if (ids.empty()) ids.push_back(data.at(0));
  return ids;
}

// The prompt and its continuation by n tokens from the trainer's weights as they are, greedy
// (the same run prints the same samples), the last T tokens its context; it stops early at the
// model's end-of-text. A pass of one sequence each token: the trainer's own forward (its
// next_logits), with no second copy of the weights and nothing a step reads changed.
std::string sample(model::training::GpuTrainer& trainer, const model::Tokenizer& tok,
                   const model::Config& c, std::vector<int32_t> ids, uint32_t n) {
  model::Sampler greedy({.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0});
  const size_t T = trainer.context();
  for (uint32_t i = 0; i < n; i++) {
    const size_t from = ids.size() > T ? ids.size() - T : 0;
    const int32_t id = greedy.pick({{}, trainer.next_logits(std::span(ids).subspan(from))});
    if (c.eos_token_id && id == *c.eos_token_id) break;
    ids.push_back(id);
  }
  return tok.decode_generated(ids, c.n_vocab);
}

// The run on each rank of `group` (one process alone: the run as it always was). Every rank
// trains a replica on its share of each step; rank 0 alone writes.
int train_ranks(TrainArgs a, const Given& given, const Group& group) {
  const model::training::FileOpHook file_ops = kill_hook_from_env();
  make_absolute(a.run);
  // Rank 0 moves in a save a kill cut short before any rank reads the folder.
  if (group.size() > 1) {
    if (group.lead())
      for (const std::string& dir : {a.resume, a.run.model})
        if (!dir.empty() && fs::is_directory(dir)) model::training::finish_save(dir, file_ops);
    group.any(false);
  }
  if (!a.resume.empty() && !a.bench && !take_resume(a, given, file_ops)) return 0;
  if (a.run.data.empty())
    throw std::runtime_error("--data FILE is required (the training text), or --resume DIR to "
                             "go on with a run");
  if (a.run.model.empty() == a.run.init.empty())
    throw std::runtime_error("give exactly one of -m DIR (continue a checkpoint) and --init CONFIG.json (a new model)");
  if (a.model.device == "cpu")
    throw std::runtime_error("training runs on a Vulkan device (lavapipe where there is no GPU), not --device cpu");
  if (a.run.batch == 0) throw std::runtime_error("--batch must be at least 1");
  if (a.run.ctx == 0) throw std::runtime_error("--ctx must be at least 1");
  if (a.run.grad_accum == 0)
    throw std::runtime_error("--grad-accum must be at least 1 (the micro-batches of --batch "
                             "sequences a step sums)");
  if (a.run.steps == 0) throw std::runtime_error("--steps must be at least 1");
  if (group.size() > 1) {
    // A step's micro-batches are the run's (--grad-accum), shared by the ranks: by default one
    // a rank, which makes `mpirun -np N` the run of --grad-accum N.
    const std::string n = std::to_string(group.size()), M = std::to_string(a.run.grad_accum);
    if (!given("--grad-accum") && a.resume.empty()) a.run.grad_accum = group.size();
    else if (a.run.grad_accum % group.size() != 0 && !a.resume.empty() && !given("--grad-accum"))
      throw GroupRefusal(a.resume + "'s run takes " + M + " micro-batch" +
                         (a.run.grad_accum == 1 ? "" : "es") + " a step (--grad-accum " +
                         M + "), which " + n + " ranks cannot share: resume it with a rank count "
                         "that divides " + M + " (one process runs it to the same bits)");
    else if (a.run.grad_accum % group.size() != 0)
      throw GroupRefusal("--grad-accum " + M + " is a step's micro-batches, shared by the ranks: "
                         "give a multiple of the job's " + n + " ranks, or leave it out for one "
                         "micro-batch a rank");
  }
  if (a.bench) {
    if (!a.out.empty() || !a.resume.empty() || !a.log.empty() || !a.run.val_data.empty() ||
        a.run.eval_every || a.run.save_every || a.sample_every)
      throw std::runtime_error("--bench writes and evaluates nothing: leave out -o, --resume, --log, "
                               "--val-data, --eval-every, --save-every and --sample-every");
    if (a.run.steps < 2)
      throw std::runtime_error("--bench needs --steps 2 or more (the first step, which builds the "
                               "pipelines, is not timed)");
  } else if (a.out.empty()) {
    throw std::runtime_error("-o OUT is required (the checkpoint folder to write)");
  }
  check_validation(a);
  check_sampling(a, given);
  if (group.lead()) check_out(a);

  // The model and its tokenizer: a resume given neither -m nor --init reads its own folder's
  // config and tokenizer files (the weights come with its state below).
  std::unique_ptr<Parameters> params;
  fs::path tokenizer_dir;
  if (!a.resume.empty() && !given("--init") && !given("-m")) {
    tokenizer_dir = a.resume;
    params = std::make_unique<Parameters>(model::load_config(tokenizer_dir / "config.json"));
  } else if (!a.run.init.empty()) {
    const model::Config c = model::load_config(a.run.init);
    tokenizer_dir = fs::path(a.run.init).parent_path();
    if (tokenizer_dir.empty()) tokenizer_dir = ".";
    params = std::make_unique<Parameters>(c);
    params->init_gpt2(a.run.seed);
  } else {
    tokenizer_dir = a.run.model;
    model::training::finish_save(a.run.model, file_ops);  // where a kill cut a save short
    params = std::make_unique<Parameters>(Parameters::from_checkpoint(*model::Checkpoint::load(a.run.model)));
  }
  const model::Config& c = params->config();
  // An encoder-decoder trains on pairs (train_pairs.h): a step's S and T are their longest.
  const bool seq2seq = c.family == model::Family::EncoderDecoder;
  RunPairs pairs;
  if (seq2seq) {
    check_pairs_run(a.run, given);
    pairs = load_pairs(tokenizer_dir, c, a.run.data, a.run.val_data, a.run.batch);
    a.run.ctx = pairs.layout.T;
  }
  const std::unique_ptr<model::Tokenizer> tok =
      seq2seq ? nullptr : model::load_tokenizer(tokenizer_dir, c.tokenizer);
  if (a.run.ctx > c.n_ctx)
    throw std::runtime_error("--ctx " + std::to_string(a.run.ctx) + " is past the model's context of " +
                             std::to_string(c.n_ctx) + " tokens");

  // A decoder's tokens; an encoder-decoder's pairs' ids.
  const std::vector<int32_t> data =
      seq2seq ? pair_ids(pairs.train) : tokenize_file(*tok, a.run.data);
  std::vector<int32_t> val;
  if (seq2seq) {
    val = pair_ids(pairs.val);
  } else if (!a.run.val_data.empty()) {
    // A text too short for one batch of windows would evaluate to nothing, silently.
    val = tokenize_file(*tok, a.run.val_data);
    const uint64_t need = uint64_t{a.run.batch} * a.run.ctx + 1;
    if (val.size() < need)
      throw std::runtime_error(a.run.val_data + ": the validation text holds " +
                               std::to_string(val.size()) + " tokens; an evaluation of B=" +
                               std::to_string(a.run.batch) + " windows of T=" + std::to_string(a.run.ctx) +
                               " needs " + std::to_string(need));
  }
  model::training::RunState state{0, 0, model::training::settings_line(a.run), a.run};
  std::unique_ptr<Parameters> m, v;
  if (!a.resume.empty()) {
    model::training::Resumed r = model::training::load_run(a.resume, file_ops);
    if (!(r.params.config() == c))
      throw std::runtime_error(a.resume + " holds another model's shape than " +
                               (a.run.init.empty() ? a.run.model : a.run.init));
    if (r.state.settings != state.settings)
      throw std::runtime_error(a.resume + " was trained with other flags or data:\n  then: " +
                               r.state.settings + "\n  now:  " + state.settings);
    model::training::check_run_state(
        r.state,
        {seq2seq ? pairs.train.size() : data.size(),
         uint64_t{a.run.grad_accum} * a.run.batch * (seq2seq ? 1 : a.run.ctx), a.run.steps,
         a.run.sampling == "random"},
        (fs::path(a.resume) / "trainer_state.json").string());
    *params = std::move(r.params);
    m = std::make_unique<Parameters>(std::move(r.m));
    v = std::make_unique<Parameters>(std::move(r.v));
    state.step = r.state.step;
    state.position = r.state.position;
    state.rng_state = r.state.rng_state;
    state.train_loss = std::move(r.state.train_loss);
    state.val_loss = std::move(r.state.val_loss);
  }
  {
    // What shapes the run must be one on every rank; -o, --log and --device are rank 0's or
    // each rank's own.
    std::vector<std::pair<std::string, uint64_t>> items;
    for (std::string_view key : model::training::run_flag_keys())
      items.emplace_back(flag_of(key), fnv1a(model::training::run_flag_text(a.run, key)));
    items.emplace_back("--kernels", fnv1a(a.model.kernels));
    items.emplace_back("--bench", a.bench);
    items.emplace_back("--sample-every", a.sample_every);
    items.emplace_back("--sample-len", a.sample_len);
    items.emplace_back("--sample-prompt", fnv1a(a.sample_prompt));
    items.emplace_back("training text (--data)", fnv1a(data.data(), data.size() * 4));
    items.emplace_back("validation text (--val-data)", fnv1a(val.data(), val.size() * 4));
    items.emplace_back("starting weights", fnv1a(*params));
    items.emplace_back("optimizer state", m ? fnv1a(*v, fnv1a(*m)) : 0);
    model::training::RunState where = state;  // its flags are compared above
    where.flags.reset(), where.settings.clear();
    items.emplace_back("--resume state (step, data position, losses)",
                       fnv1a(model::training::run_state_json(where)));
    check_ranks(group, items);
  }
  DataOrder batches =
      seq2seq ? DataOrder(a.run, pairs.train, pairs.layout, state) : DataOrder(a.run, data, state);
  // --sample-every's prompt: an encoder-decoder's is a source to translate.
  const std::vector<int32_t> prompt = !a.sample_every ? std::vector<int32_t>{}
                                      : seq2seq       ? pair_sample_source(pairs, a.sample_prompt)
                                                      : sample_prompt(a, *tok, data);
  // The output folder must take a checkpoint before the run spends anything.
  if (!a.bench && group.lead()) {
    std::error_code ec;
    fs::create_directories(a.out, ec);
    const fs::path probe = fs::path(a.out) / ".gpt2vk-write-test";
    std::ofstream f(probe);
    if (ec || !f) throw std::runtime_error(a.out + ": cannot write a checkpoint there");
    f.close();
    fs::remove(probe, ec);
  }
  std::unique_ptr<std::ofstream> log;
  if (!a.log.empty() && group.lead()) {
    // A resumed run keeps the log's lines up to its checkpoint's step: steps a stopped run made
    // after its last save are made again, and would otherwise be there twice.
    if (state.step) {
      const std::string kept = log_until(a.log, state, state.train_loss.empty());
      const std::string tmp = a.log + ".tmp";
      std::ofstream(tmp, std::ios::trunc) << kept;
      std::error_code ec;
      fs::rename(tmp, a.log, ec);
      if (ec) throw std::runtime_error(a.log + ": cannot rewrite it: " + ec.message());
    }
    log = std::make_unique<std::ofstream>(a.log, state.step ? std::ios::app : std::ios::trunc);
    if (!*log) throw std::runtime_error(a.log + ": cannot open for writing");
  }

  vk::InstanceOptions io = vk::InstanceOptions::from_env();
  io.validation = io.validation || a.model.validation;
  vk::Instance instance(io);
  vk::DeviceOptions device_choice = device_options(a.model);
  if (group.size() > 1 && device_choice.select.empty())
    device_choice.select = rank_device(instance, group.local_rank());
  vk::Device device(instance, device_choice);
  model::training::Share share{group.rank(), group.size(),
                               [&group](std::span<const float> mine, std::span<float> all) {
                                 group.allgather(mine, all);
                               }};
  model::training::GpuTrainer trainer(device, *params, a.run.batch, a.run.ctx, a.profile,
                                      a.run.grad_accum, share, a.run.recompute, pairs.layout.S);
  if (m) trainer.upload_moments(*m, *v);
  else m = std::make_unique<Parameters>(c), v = std::make_unique<Parameters>(c);
  if (group.size() > 1)
    std::fprintf(stderr, "gpt2vk: rank %u of %u on %s\n", group.rank(), group.size(),
                 device.caps().name.c_str());
  if (group.lead()) {
    std::fprintf(
        stderr,
        "gpt2vk: training %llu parameters on %s: %zu tokens of data, steps of %s%u x %u "
        "(%s), step %llu of %llu\n",
        static_cast<unsigned long long>(params->count()), device.caps().name.c_str(),
        seq2seq ? pairs.train.sources.size() + pairs.train.targets.size() : data.size(),
        a.run.grad_accum > 1 ? (std::to_string(a.run.grad_accum) + " x ").c_str() : "", a.run.batch,
        a.run.ctx, seq2seq ? "random pairs" : (a.run.sampling + " windows").c_str(),
        static_cast<unsigned long long>(state.step), static_cast<unsigned long long>(a.run.steps));
    std::fprintf(stderr, "gpt2vk: %s\n", memory_text(trainer, device).c_str());
  }

  const auto save = [&] {
    trainer.download(*params);
    trainer.download_moments(*m, *v);
    // The replicas must be one: every update the same on every rank.
    const std::vector<uint64_t> sums = group.allgather(std::vector<uint64_t>{fnv1a(*v, fnv1a(*m, fnv1a(*params)))});
    for (uint32_t r = 1; r < sums.size(); r++)
      if (sums[r] != sums[0])
        throw GroupRefusal("after step " + std::to_string(state.step) + " rank " +
                           std::to_string(r) + "'s weights differ from rank 0's (devices that "
                           "round differently?); the last checkpoint is kept");
    if (!group.lead()) return;
    batches.keep(state);
    model::training::save_checkpoint(a.out, *params, tokenizer_dir, &state, m.get(), v.get(),
                                     file_ops);
  };
  const model::training::Schedule schedule{a.run.lr, a.run.warmup, a.run.cosine, a.run.lr_min, a.run.steps};
  model::training::StepSettings settings;
  settings.sgd = a.run.optimizer == "sgd";
  settings.beta1 = a.run.beta1, settings.beta2 = a.run.beta2, settings.eps = a.run.eps;
  settings.weight_decay = a.run.weight_decay, settings.clip = a.run.grad_clip;
  std::vector<int32_t> ids, targets, sources;
  // SIGINT or SIGTERM, once one came: the step in flight ends, the run saves and exits 128 + it.
  StopSignals signals;
  // On a terminal the progress line rewrites itself; elsewhere (a log) a line every 1% of the run.
  const bool tty = stderr_is_terminal();
  bool line_open = false;  // a progress line drawn on the terminal, not yet ended
  const uint64_t every = std::max<uint64_t>(1, a.run.steps / 100);
  double training_s = 0;  // the steps' own time, evaluations and saves left out
  std::vector<double> step_s;  // each step's, for --bench
  const uint64_t first = state.step;
  int interrupted = 0;  // the signal that stopped the run
  while (state.step < a.run.steps) {
    const uint64_t s = state.step;
    const double lr = model::training::learning_rate(schedule, s);
    settings.lr = static_cast<float>(lr);
    settings.step = s + 1;
    kill_rank_from_env(group, s + 1);
    batches.next(ids, targets, sources);
    const auto start = std::chrono::steady_clock::now();
    const model::training::StepResult r = trainer.step(ids, targets, settings, sources);
    step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    training_s += step_s.back();
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
      throw GroupRefusal("the run diverged at step " + std::to_string(s) + " (loss " +
                               std::to_string(r.loss) + ", gradient norm " +
                               std::to_string(r.grad_norm) + ")" +
                               (a.bench ? std::string()
                                        : "; the last good checkpoint in " + a.out +
                                              " is kept (its step is in trainer_state.json)"));
    state.step++;
    state.train_loss.emplace_back(state.step, r.loss);
    const double per_step = training_s / double(state.step - first);
    const double tokens_per_s = double(a.run.grad_accum) * a.run.batch * a.run.ctx / per_step;
    nlohmann::json line = {{"step", state.step}, {"loss", r.loss}, {"grad_norm", r.grad_norm},
                           {"lr", lr}, {"tokens_per_s", tokens_per_s},
                           {"device_memory", device.peak_allocated()}};
    if (!a.bench && !val.empty() && a.run.eval_every && (state.step % a.run.eval_every == 0 || state.step == a.run.steps)) {
      Eval e;
      if (seq2seq)
        e.loss = evaluate_pairs(trainer, pairs.val, pairs.layout, e.windows);
      else
        e = evaluate(trainer, val);
      if (e.windows) {
        line["val_loss"] = e.loss;
        state.val_loss.emplace_back(state.step, e.loss);
        if (group.lead()) {
          std::fprintf(
              stderr,
              "%sgpt2vk: step %llu: validation loss %.4f, perplexity %.3f over %llu %s of %u\n",
              line_open ? "\n" : "", static_cast<unsigned long long>(state.step), e.loss,
              std::exp(e.loss), static_cast<unsigned long long>(e.windows),
              seq2seq ? "pairs, targets" : "windows", a.run.ctx);
        }
        line_open = false;
      }
    }
    // A line of its own, quoted as a JSON string (a sample's newlines stay inside it).
    if (a.sample_every && state.step % a.sample_every == 0) {
      const nlohmann::json text = seq2seq ? sample_pair(trainer, pairs, c, prompt, a.sample_len)
                                          : sample(trainer, *tok, c, prompt, a.sample_len);
      if (group.lead()) {
        std::fprintf(stderr, "%sgpt2vk: step %llu sample: %s\n", line_open ? "\n" : "",
                     static_cast<unsigned long long>(state.step),
                     text.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      }
      line_open = false;
    }
    if (group.lead() && (tty || state.step % every == 0 || state.step == a.run.steps)) {
      line_open = tty;
      std::fprintf(stderr, "%sstep %llu/%llu | loss %.4f | norm %.3f | lr %.2e | %.0f tok/s | ETA %s%s",
                   tty ? "\r" : "", static_cast<unsigned long long>(state.step),
                   static_cast<unsigned long long>(a.run.steps), r.loss, r.grad_norm, lr, tokens_per_s,
                   duration_text(per_step * double(a.run.steps - state.step)).c_str(),
                   tty ? "   " : "\n");
    }
    if (log) *log << line.dump() << "\n" << std::flush;
    if (!a.bench && a.run.save_every && state.step % a.run.save_every == 0 && state.step < a.run.steps) save();
    // A signal on any rank stops them all after this step (mpirun passes it to every rank).
    if (group.size() > 1 ? group.any(signals.received() != 0) : signals.received() != 0) {
      interrupted = signals.received() ? signals.received() : SIGTERM;
      break;
    }
  }
  // A second signal during the save below ends the process at once: the save is atomic.
  signals.restore();
  if (line_open) std::fprintf(stderr, "\n");
  if (a.bench) {
    if (!group.lead()) return interrupted ? 128 + interrupted : 0;
    if (a.profile) print_profile(trainer);
    print_bench(step_s, a.run.grad_accum, a.run.batch, a.run.ctx, params->count(),
                device.caps().name, memory_text(trainer, device));
    return interrupted ? 128 + interrupted : 0;
  }
  save();
  if (!group.lead()) return interrupted ? 128 + interrupted : 0;
  write_plot(fs::path(a.out) / "loss.svg", state.train_loss, state.val_loss);
  if (a.profile) print_profile(trainer);
  std::fprintf(stderr, "gpt2vk: %s at step %llu: %s (model.safetensors, optimizer state, loss.svg)\n",
               interrupted ? "interrupted; saved" : "saved", static_cast<unsigned long long>(state.step),
               a.out.c_str());
  return interrupted ? 128 + interrupted : 0;
}

// Each rank of an MPI job runs train_ranks(); an error that all meet alike ends each with rank
// 0's message, any other ends the whole job from the rank that met it (MPI_Abort), so that no
// rank waits for one that is gone.
int train(TrainArgs a, const Given& given) {
  const Group group;
  if (group.size() == 1) return train_ranks(std::move(a), given, group);
  try {
    return train_ranks(std::move(a), given, group);
  } catch (const GroupRefusal& e) {
    if (group.lead()) std::fprintf(stderr, "gpt2vk: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    group.abort("gpt2vk: error on rank " + std::to_string(group.rank()) + " of " +
                std::to_string(group.size()) + ": " + e.what() +
                " (ending the job; the last checkpoint is kept)");
  }
}

}  // namespace

Command add_train(CLI::App& cli) {
  auto args = std::make_shared<TrainArgs>();
  model::training::RunFlags& run = args->run;
  CLI::App* cmd = cli.add_subcommand(
      "train", "train a model on a text file on the Vulkan device (one command buffer per step)");
  const auto whole = [](uint64_t lo, uint64_t hi) { return whole_number(int64_t(lo), hi); };
  cmd->add_option("-m,--model", run.model, "continue from this checkpoint folder");
  cmd->add_option("--init", run.init,
                  "start a new model from this config.json with GPT-2's initialisation (the "
                  "tokenizer files, if GPT-2's, beside it)");
  cmd->add_option("--data", run.data, "the training text (UTF-8)");
  cmd->add_option("--val-data", run.val_data, "a held-out text for --eval-every");
  cmd->add_option("-o,--out", args->out,
                  "the checkpoint folder to write (not with --bench; with --resume, its folder "
                  "by default)");
  cmd->add_option("--resume", args->resume,
                  "go on from this checkpoint's weights, moments, step and data position, with "
                  "the run's flags (those given again must agree; --steps may grow)");
  cmd->add_flag("--overwrite", args->overwrite,
                "let -o replace a checkpoint already there (else: refused, unless it is --resume's)");
  cmd->add_option("--steps", run.steps, "the run's total steps (default 1000)")
      ->check(whole(1, uint64_t{1} << 40));
  cmd->add_option("--batch", run.batch, "sequences per step (default 4)")
      ->check(whole(0, UINT32_MAX));
  cmd->add_option("-c,--ctx", run.ctx, "tokens per sequence (default 64)")->check(whole(0, UINT32_MAX));
  cmd->add_option("--grad-accum", run.grad_accum,
                  "micro-batches of --batch sequences per optimizer step, their gradients summed "
                  "(default 1; under mpirun -np N, N, shared by the ranks)")
      ->check(whole(0, model::training::kMaxGradAccum));
  cmd->add_flag("--recompute,!--no-recompute", run.recompute,
                "keep each block's input only and recompute its activations in the backward: "
                "less device memory, the same bits, a slower step (a resume may switch it)");
  cmd->add_option("--sampling", run.sampling,
                  "the data order: random windows (default; seeded by --seed) or sequential")
      ->check(CLI::IsMember({"random", "sequential"}));
  cmd->add_option("--optimizer", run.optimizer, "adamw (default) or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  cmd->add_option("--lr", run.lr, "the learning rate (default 3e-4)")->check(CLI::PositiveNumber);
  cmd->add_option("--beta1", run.beta1, "AdamW's beta1 (default 0.9)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--beta2", run.beta2, "AdamW's beta2 (default 0.95)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--eps", run.eps, "AdamW's epsilon (default 1e-8)")->check(CLI::PositiveNumber);
  cmd->add_option("--weight-decay", run.weight_decay,
                  "decoupled weight decay of matrices and embeddings (default 0.1)")
      ->check(CLI::Range(0.0f, 1e6f));
  cmd->add_option("--grad-clip", run.grad_clip,
                  "the gradients' global norm bound; 0 disables (default 1.0)")
      ->check(CLI::Range(0.0f, 1e30f));
  cmd->add_option("--warmup", run.warmup, "steps of linear warm-up (default 0)")
      ->check(whole(0, UINT64_MAX));
  cmd->add_flag("--cosine", run.cosine, "cosine decay to --lr-min after the warm-up");
  cmd->add_option("--lr-min", run.lr_min, "the cosine schedule's floor (default 0)")
      ->check(CLI::Range(0.0f, 1e30f));
  cmd->add_option("--eval-every", run.eval_every,
                  "evaluate on --val-data every N steps and at the end (default 0: never)")
      ->check(whole(0, UINT64_MAX));
  cmd->add_option("--save-every", run.save_every, "save every N steps (always at the end)")
      ->check(whole(0, UINT64_MAX));
  cmd->add_option("--log", args->log,
                  "JSON lines: step, loss, grad_norm, lr, tokens_per_s, device_memory, val_loss");
  cmd->add_option("--sample-every", args->sample_every,
                  "every N steps print a greedy sample from the weights as they are (default 0: "
                  "never)")
      ->check(whole(0, UINT64_MAX));
  cmd->add_option("--sample-len", args->sample_len,
                  "tokens of each sample (default 64; an encoder-decoder's: at most its targets')")
      ->check(whole(1, 4096));
  cmd->add_option("--sample-prompt", args->sample_prompt,
                  "the text each sample continues (default: the training text's first line, its "
                  "first 8 tokens); an encoder-decoder's: the source it translates, of the pairs' "
                  "source length (default: the first pair's)");
  cmd->add_option("--seed", run.seed, "the initialisation's seed (default 1)")
      ->check(whole(0, UINT64_MAX));
  cmd->add_flag("--profile", args->profile,
                "then the GPU time of each op kind in the last step (timestamps)");
  cmd->add_flag("--bench", args->bench,
                "time --steps (>= 2) steps and print tokens/s, the median step after the "
                "first; writes and evaluates nothing");
  cmd->add_option("--device", args->model.device, "GPU index or name");
  cmd->add_option("--kernels", args->model.kernels,
                  "the kernel set: gpu, cpu or auto (by the device; default, or GPT2VK_KERNELS)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  cmd->add_flag("--validation", args->model.validation,
                "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");
  const Given given = [cmd](const std::string& flag) { return cmd->count(flag) > 0; };
  return {cmd, [args, given] { return train(*args, given); }};
}

}  // namespace app
