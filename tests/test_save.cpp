// Training checkpoints under unlucky kills (model/training/save.h, issue 35): a child process
// saves over a checkpoint and is SIGKILLed just before its Nth file operation, for every N;
// then the folder must hold the previous checkpoint or the new one, file for file, once
// finish_save has run, and load_run must read it. A kill inside that recovery, at each of its
// operations, must change nothing of the outcome.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "model/training/save.h"
#include "tests/files.h"

namespace {

namespace fs = std::filesystem;
using model::training::Parameters;
using model::training::RunState;

// The visible files of a folder, name -> bytes: what a reader of the checkpoint sees.
using Files = std::map<std::string, std::string>;
Files files_of(const fs::path& dir) {
  Files out;
  if (!fs::is_directory(dir)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.')
      out[e.path().filename().string()] = test::read_file(e.path());
  return out;
}

// A checkpoint at `step`: weights, moments and losses that differ from step to step.
struct Saved {
  Parameters params, m, v;
  RunState state;
  Saved(const model::Config& c, uint64_t step) : params(c), m(c), v(c) {
    params.init_gpt2(step);
    m.init_gpt2(step + 100);
    v.init_gpt2(step + 200);
    state = {step, 32 * step, "settings", {}, {}};
    for (uint64_t s = 1; s <= step; s++) state.train_loss.emplace_back(s, 5.0 / double(s));
  }
  void save(const fs::path& dir, const fs::path& tokenizer_dir,
            const model::training::FileOpHook& hook = {}) const {
    model::training::save_checkpoint(dir, params, tokenizer_dir, &state, &m, &v, hook);
  }
};

// Runs `work` in a child that SIGKILLs itself before its Nth file operation. True when the
// kill came, false when the work ended first (so N is past its last operation).
bool killed_at(int n, const std::function<void(const model::training::FileOpHook&)>& work) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int count = 0;
    try {
      work([&](std::string_view, const fs::path&) {
        if (++count == n) raise(SIGKILL);
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      _exit(2);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return true;
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "the child failed at operation ",
                  n);
  return false;
}

void copy_folder(const fs::path& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

// After recovery the folder reads as one whole checkpoint, `before` or `after` file for file;
// returns which (true: after).
bool recovered(const fs::path& dir, const Files& before, const Files& after,
               const std::string& what) {
  model::training::finish_save(dir);
  const Files now = files_of(dir);
  const bool is_after = now == after;
  REQUIRE_MESSAGE((is_after || now == before), what,
                  ": neither the previous checkpoint nor the new one");
  CHECK_MESSAGE(!fs::exists(dir / ".complete-checkpoint"), what);
  if (!now.empty()) {
    const model::training::Resumed r = model::training::load_run(dir);
    CHECK_MESSAGE(r.state.step == (is_after ? 2u : 1u), what);
  }
  return is_after;
}

// Every kill point of a save of step 2 over `start` (a folder with step 1's checkpoint, or
// none), and with `nested` every kill point of the recovery after each.
void kill_everywhere(const model::Config& c, const fs::path& tokenizer_dir, bool over_a_checkpoint,
                     bool nested) {
  test::TempDir tmp;
  const Saved one(c, 1), two(c, 2);
  const fs::path start = tmp / "start", after_dir = tmp / "after", dir = tmp / "dir",
                 again = tmp / "again";
  if (over_a_checkpoint) one.save(start, tokenizer_dir);
  two.save(after_dir, tokenizer_dir);
  const Files before = files_of(start), after = files_of(after_dir);
  REQUIRE(before != after);
  int n = 1;
  bool committed = false;
  for (;; n++) {
    fs::remove_all(dir);
    if (over_a_checkpoint) copy_folder(start, dir);
    const bool killed = killed_at(n, [&](const auto& hook) { two.save(dir, tokenizer_dir, hook); });
    if (!killed) break;
    const std::string what = "killed before operation " + std::to_string(n);
    // A kill inside the recovery: the next recovery finishes it the same way.
    if (nested)
      for (int k = 1;; k++) {
        copy_folder(dir, again);
        if (!killed_at(k, [&](const auto& hook) { model::training::finish_save(again, hook); }))
          break;
        const bool is_after = recovered(again, before, after,
                                        what + ", then in recovery before " + std::to_string(k));
        copy_folder(dir, again);
        CHECK(is_after == recovered(again, before, after, what));
      }
    // Once the new checkpoint was committed, a kill never brings back the previous one.
    const bool is_after = recovered(dir, before, after, what);
    CHECK_MESSAGE((!committed || is_after), what);
    committed = committed || is_after;
    // A save after any kill leaves the new checkpoint and no leftovers.
    two.save(dir, tokenizer_dir);
    CHECK(files_of(dir) == after);
    CHECK(!fs::exists(dir / ".partial-checkpoint"));
  }
  CHECK(committed);
  CHECK(files_of(dir) == after);
  CHECK(n > 10);  // the save made operations to kill at
}

model::Config tiny(model::TokenizerKind kind, uint32_t n_vocab) {
  model::Config c = model::gpt2_config(8, 1, 2);
  c.n_vocab = n_vocab;
  c.n_ctx = 4;
  c.n_inner = 16;
  c.tokenizer.kind = kind;
  c.eos_token_id.reset();
  return c;
}

}  // namespace

TEST_CASE("a checkpoint save killed at any file operation leaves the previous or the new one") {
  const model::Config bytes = tiny(model::TokenizerKind::Bytes, 256);
  SUBCASE("over a checkpoint, and killed again during recovery") {
    kill_everywhere(bytes, {}, true, true);
  }
  SUBCASE("into a new folder") {
    kill_everywhere(bytes, {}, false, false);
  }
  SUBCASE("with GPT-2's tokenizer files") {
    kill_everywhere(tiny(model::TokenizerKind::Gpt2, 50257), test::source_dir() / "data" / "gpt2",
                    true, false);
  }
}

TEST_CASE(
    "a completed save is a plain model folder, and recovery writes nothing where none is due") {
  test::TempDir tmp;
  const model::Config c = tiny(model::TokenizerKind::Bytes, 256);
  Saved(c, 3).save(tmp / "out", {});
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(tmp / "out"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"config.json", "model.safetensors",
                                          "optimizer.safetensors", "trainer_state.json"});
  CHECK(model::Checkpoint::load(tmp / "out")->config() == c);
  int operations = 0;
  CHECK(!model::training::finish_save(tmp / "out", [&](auto, const auto&) { operations++; }));
  CHECK(operations == 0);
}
