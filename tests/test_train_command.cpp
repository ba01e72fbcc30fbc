// gpt2vk train, the command (issue 17): a tiny model trained from --init on a short text, under
// the validation layer: the checkpoint generate reads as it is, two runs with one seed giving
// the same bits, a resumed run equal to an uninterrupted one, SIGINT and SIGTERM, a diverging
// run, --bench, and every bad input refused with a message that names it. Issue 35: a kill at
// any file operation of a save, and a corrupt trainer_state.json. Issue 41: the runs here take
// the default random windows unless they say --sampling sequential; resumes with gradient
// accumulation and from states written before either; --recompute's bits, memory and resumes.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"
#include "tests/train_files.h"

namespace {

namespace fs = std::filesystem;

// tests/train_files.h's model and text, and a run of them.
struct Setup : test::TrainFiles {
  std::vector<std::string> args(const fs::path& out, const std::string& steps) const {
    return {"train", "--init", config.string(), "--data", data.string(), "-o", out.string(),
            "--steps", steps, "--batch", "2", "--ctx", "16", "--lr", "3e-3", "--seed", "7",
            "--kernels", "cpu"};
  }
};

// args with the value after `flag` replaced.
std::vector<std::string> with(std::vector<std::string> args, const std::string& flag,
                              const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); i++)
    if (args[i] == flag) args[i + 1] = value;
  return args;
}

// args and `flag value` after them.
std::vector<std::string> with_flag(std::vector<std::string> args, const std::string& flag,
                                   const std::string& value) {
  args.insert(args.end(), {flag, value});
  return args;
}

// The "loss" of each JSON line of a --log file, as printed (full precision).
std::vector<std::string> losses(const fs::path& log) {
  std::vector<std::string> out;
  if (!fs::exists(log)) return out;
  std::istringstream in(test::read_file(log));
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"loss\":");
    if (at != std::string::npos) out.push_back(line.substr(at, line.find(',', at) - at));
  }
  return out;
}

// A copy of the checkpoint `from` at `to` with one field of its trainer_state.json set to `value`
// (JSON text).
void corrupt_copy(const fs::path& from, const fs::path& to, const std::string& field,
                  const std::string& value) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(test::read_file(to / "trainer_state.json"));
  j[field] = nlohmann::json::parse(value);
  test::write_file(to / "trainer_state.json", j.dump(2));
}

// SIGINT or SIGTERM while training: the step ends, the run saves, exits with 128 + the signal,
// and --resume goes on from there.
void interrupt_and_resume(int signal) {
  Setup s;
  std::vector<std::string> a = s.args(s.dir / "out", "100000");
  a.insert(a.end(), {"--log", (s.dir / "log.jsonl").string()});
  test::Background run(a);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int code = 0;
  while (losses(s.dir / "log.jsonl").size() < 3 && std::chrono::steady_clock::now() < deadline) {
    REQUIRE_MESSAGE(!run.exited(code), run.err());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(run.stop(signal) == 128 + signal);
  CHECK(run.err().find("interrupted; saved") != std::string::npos);
  const size_t done = losses(s.dir / "log.jsonl").size();
  REQUIRE(fs::exists(s.dir / "out" / "trainer_state.json"));
  const std::string state = test::read_file(s.dir / "out" / "trainer_state.json");
  CHECK(state.find("\"step\": " + std::to_string(done)) != std::string::npos);
  std::vector<std::string> more = with(a, "--steps", std::to_string(done + 2));
  more.insert(more.end(), {"--resume", (s.dir / "out").string()});
  const test::CliResult r = test::gpt2vk(more);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(losses(s.dir / "log.jsonl").size() == done + 2);
}

}  // namespace

TEST_CASE("gpt2vk train: a checkpoint generate reads; the same seed gives the same bits") {
  Setup s;
  std::vector<std::string> a = s.args(s.dir / "a", "8");
  a.insert(a.end(), {"--log", (s.dir / "a.jsonl").string(), "--val-data", s.val.string(),
                     "--eval-every", "4"});
  const test::CliResult r = test::gpt2vk(a);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  CHECK(r.err.find("validation loss") != std::string::npos);
  for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json", "loss.svg"})
    CHECK_MESSAGE(fs::exists(s.dir / "a" / f), f);
  const std::vector<std::string> first = losses(s.dir / "a.jsonl");
  REQUIRE(first.size() == 8);
  CHECK(test::read_file(s.dir / "a.jsonl").find("\"val_loss\"") != std::string::npos);

  const test::CliResult gen = test::gpt2vk({"generate", "-m", (s.dir / "a").string(), "-p", "In the",
                                            "-n", "8", "--temp", "0"});
  CHECK_MESSAGE(gen.exit_code == 0, gen.err);
  CHECK(gen.out.rfind("In the", 0) == 0);

  std::vector<std::string> b = s.args(s.dir / "b", "8");
  b.insert(b.end(), {"--log", (s.dir / "b.jsonl").string(), "--val-data", s.val.string(),
                     "--eval-every", "4"});
  REQUIRE(test::gpt2vk(b).exit_code == 0);
  CHECK(losses(s.dir / "b.jsonl") == first);
  CHECK(test::read_file(s.dir / "b" / "model.safetensors") == test::read_file(s.dir / "a" / "model.safetensors"));
}

TEST_CASE("gpt2vk train --resume equals an uninterrupted run") {
  Setup s;
  std::vector<std::string> whole = s.args(s.dir / "whole", "6");
  whole.insert(whole.end(), {"--log", (s.dir / "whole.jsonl").string()});
  REQUIRE(test::gpt2vk(whole).exit_code == 0);
  std::vector<std::string> part = s.args(s.dir / "part", "3");
  part.insert(part.end(), {"--log", (s.dir / "part.jsonl").string()});
  REQUIRE(test::gpt2vk(part).exit_code == 0);
  // A step the stopped run made after its last save: the resumed run makes it again, and its log
  // keeps it once.
  test::write_file(s.dir / "part.jsonl",
                   test::read_file(s.dir / "part.jsonl") + "{\"loss\":9.5,\"step\":4}\n");
  std::vector<std::string> rest = s.args(s.dir / "part", "6");
  rest.insert(rest.end(), {"--log", (s.dir / "part.jsonl").string(), "--resume", (s.dir / "part").string()});
  const test::CliResult r = test::gpt2vk(rest);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(losses(s.dir / "part.jsonl") == losses(s.dir / "whole.jsonl"));
  // The picture and the state's loss history cover the whole run, not the resumed part.
  CHECK(test::read_file(s.dir / "part" / "loss.svg") == test::read_file(s.dir / "whole" / "loss.svg"));
  CHECK(test::read_file(s.dir / "part" / "trainer_state.json") ==
        test::read_file(s.dir / "whole" / "trainer_state.json"));
  CHECK(test::read_file(s.dir / "part" / "model.safetensors") ==
        test::read_file(s.dir / "whole" / "model.safetensors"));
  CHECK(test::read_file(s.dir / "part" / "optimizer.safetensors") ==
        test::read_file(s.dir / "whole" / "optimizer.safetensors"));
  // Random windows (the default): the generator's state went on from the saved one.
  CHECK(test::read_file(s.dir / "part" / "trainer_state.json").find("\"rng_state\"") !=
        std::string::npos);
  // Other flags than the run's: refused, naming both.
  std::vector<std::string> other = with(s.args(s.dir / "part", "8"), "--lr", "1e-3");
  other.insert(other.end(), {"--resume", (s.dir / "part").string()});
  const test::CliResult bad = test::gpt2vk(other);
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("trained with other flags or data") != std::string::npos);
}

// Gradient accumulation over sequential windows: a run of 2 micro-batches resumed at step 3 ends
// on the bits of the uninterrupted one (its data position is a multiple of 2 x B x T), and the
// step's tokens are the micro-batches' (the log's tokens/s counts them).
TEST_CASE("gpt2vk train --resume equals an uninterrupted run with --grad-accum 2") {
  Setup s;
  const auto args = [&](const std::string& out, const std::string& steps) {
    std::vector<std::string> a = s.args(s.dir / out, steps);
    a.insert(a.end(), {"--grad-accum", "2", "--sampling", "sequential", "--log",
                       (s.dir / (out + ".jsonl")).string()});
    return a;
  };
  REQUIRE(test::gpt2vk(args("whole", "4")).exit_code == 0);
  REQUIRE(test::gpt2vk(args("part", "2")).exit_code == 0);
  const std::string state = test::read_file(s.dir / "part" / "trainer_state.json");
  CHECK_MESSAGE(state.find("\"position\": 128") != std::string::npos, state);  // 2 x 2 x 2 x 16
  CHECK(state.find("\"grad_accum\": 2") != std::string::npos);
  CHECK(state.find("\"rng_state\"") == std::string::npos);
  std::vector<std::string> rest = args("part", "4");
  rest.insert(rest.end(), {"--resume", (s.dir / "part").string()});
  const test::CliResult r = test::gpt2vk(rest);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(r.err.find("steps of 2 x 2 x 16 (sequential windows)") != std::string::npos, r.err);
  REQUIRE(losses(s.dir / "whole.jsonl").size() == 4);
  CHECK(losses(s.dir / "part.jsonl") == losses(s.dir / "whole.jsonl"));
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    CHECK_MESSAGE(test::read_file(s.dir / "part" / f) == test::read_file(s.dir / "whole" / f), f);
  // The micro-batches are the run's: another count is refused.
  std::vector<std::string> other = with(args("part", "6"), "--grad-accum", "1");
  other.insert(other.end(), {"--resume", (s.dir / "part").string()});
  const test::CliResult bad = test::gpt2vk(other);
  CHECK(bad.exit_code == 1);
  CHECK_MESSAGE(bad.err.find("--grad-accum 1 here, 2 in its run") != std::string::npos, bad.err);
}

// The "device_memory" of a --log file's first line: the device's peak, in bytes.
uint64_t device_memory(const fs::path& log) {
  std::istringstream in(test::read_file(log));
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line).at("device_memory").get<uint64_t>();
}

// Issue 41's --recompute, under both kernel sets with --grad-accum 2: a run with it ends on the
// bits of one without, in less device memory (the start line, the log and --bench say how much).
// It does not shape the weights, so the state records it with the flags a resume may change: a
// resume alone goes on with the run's, and one may switch it either way and still end on the bits
// of the uninterrupted run.
TEST_CASE("gpt2vk train --recompute: the same bits in less memory; a resume may switch it") {
  Setup s;
  for (const std::string kernels : {"gpu", "cpu"}) {
    const auto args = [&](const std::string& out, const std::string& steps,
                          const std::vector<std::string>& extra) {
      std::vector<std::string> a = with(s.args(s.dir / (kernels + out), steps), "--kernels", kernels);
      a.insert(a.end(), {"--grad-accum", "2", "--log", (s.dir / (kernels + out + ".jsonl")).string()});
      a.insert(a.end(), extra.begin(), extra.end());
      return a;
    };
    const auto file = [&](const std::string& out, const char* f) {
      return test::read_file(s.dir / (kernels + out) / f);
    };
    const test::CliResult whole = test::gpt2vk(args("whole", "6", {}));
    REQUIRE_MESSAGE(whole.exit_code == 0, whole.err);
    CHECK_MESSAGE(whole.err.find("gpt2vk: peak device memory ") != std::string::npos, whole.err);
    CHECK_MESSAGE(whole.err.find(" (every block's), weights ") != std::string::npos, whole.err);
    const test::CliResult re = test::gpt2vk(args("re", "6", {"--recompute"}));
    REQUIRE_MESSAGE(re.exit_code == 0, re.err);
    CHECK(test::no_validation_messages(re));
    CHECK_MESSAGE(re.err.find(" (each block's input and one block's, recomputed), ") != std::string::npos,
                  re.err);
    REQUIRE(losses(s.dir / (kernels + "whole.jsonl")).size() == 6);
    CHECK(losses(s.dir / (kernels + "re.jsonl")) == losses(s.dir / (kernels + "whole.jsonl")));
    for (const char* f : {"model.safetensors", "optimizer.safetensors"})
      CHECK_MESSAGE(file("re", f) == file("whole", f), kernels, ": ", f);
    CHECK(device_memory(s.dir / (kernels + "re.jsonl")) < device_memory(s.dir / (kernels + "whole.jsonl")));
    CHECK(file("re", "trainer_state.json").find("\"recompute\": true") != std::string::npos);

    // Half the run with it, the rest without: the uninterrupted run's bits, its state too.
    REQUIRE(test::gpt2vk(args("part", "3", {"--recompute"})).exit_code == 0);
    const std::string part = (s.dir / (kernels + "part")).string();
    const test::CliResult rest = test::gpt2vk(
        {"train", "--resume", part, "--steps", "6", "--kernels", kernels, "--no-recompute"});
    REQUIRE_MESSAGE(rest.exit_code == 0, rest.err);
    CHECK_MESSAGE(rest.err.find(" (every block's), ") != std::string::npos, rest.err);
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
      CHECK_MESSAGE(file("part", f) == file("whole", f), kernels, ": ", f);
  }
  // The other way, and a resume alone goes on with the run's.
  const auto args = [&](const std::string& out, const std::string& steps) {
    std::vector<std::string> a = s.args(s.dir / out, steps);
    a.insert(a.end(), {"--grad-accum", "2"});
    return a;
  };
  REQUIRE(test::gpt2vk(args("on", "3")).exit_code == 0);
  const std::string on = (s.dir / "on").string();
  const test::CliResult rest =
      test::gpt2vk({"train", "--resume", on, "--steps", "6", "--kernels", "cpu", "--recompute"});
  REQUIRE_MESSAGE(rest.exit_code == 0, rest.err);
  CHECK(test::read_file(s.dir / "on" / "model.safetensors") ==
        test::read_file(s.dir / "cpuwhole" / "model.safetensors"));
  CHECK(test::read_file(s.dir / "on" / "trainer_state.json").find("\"recompute\": true") !=
        std::string::npos);
  const test::CliResult more = test::gpt2vk({"train", "--resume", on, "--steps", "7", "--kernels", "cpu"});
  REQUIRE_MESSAGE(more.exit_code == 0, more.err);
  CHECK_MESSAGE(more.err.find("one block's, recomputed") != std::string::npos, more.err);

  // --bench prints the peak, less with it.
  std::vector<std::string> bench = args("unused", "2");
  bench.erase(bench.begin() + 5, bench.begin() + 7);  // "-o", out
  bench.push_back("--bench");
  const test::CliResult b1 = test::gpt2vk(bench);
  bench.push_back("--recompute");
  const test::CliResult b2 = test::gpt2vk(bench);
  REQUIRE_MESSAGE(b1.exit_code == 0, b1.err);
  REQUIRE_MESSAGE(b2.exit_code == 0, b2.err);
  CHECK_MESSAGE(b1.out.find("; peak device memory ") != std::string::npos, b1.out);
  CHECK_MESSAGE(b2.out.find("(each block's input and one block's, recomputed)") != std::string::npos, b2.out);
}

TEST_CASE("gpt2vk train refuses bad input with a message that names it") {
  Setup s;
  const auto fails = [&](std::vector<std::string> args, const std::string& message) {
    const test::CliResult r = test::gpt2vk(args);
    CHECK_MESSAGE(r.exit_code != 0, message);
    CHECK_MESSAGE(r.err.find(message) != std::string::npos, r.err);
  };
  test::write_file(s.dir / "empty.txt", "");
  test::write_file(s.dir / "short.txt", "In the beginning");
  test::write_file(s.dir / "bad.txt", std::string("ab\xff\xfe", 4));
  const std::vector<std::string> ok = s.args(s.dir / "o", "2");
  fails(with(ok, "--data", (s.dir / "empty.txt").string()), "the data holds 0 tokens");
  // Random windows need one window of T + 1 tokens; sequential ones the step's whole rows.
  fails(with(ok, "--data", (s.dir / "short.txt").string()),
        "short.txt: the data holds 16 tokens; a window of T=16 needs 17");
  std::vector<std::string> seq = with_flag(ok, "--sampling", "sequential");
  fails(with(seq, "--data", (s.dir / "short.txt").string()),
        "the data holds 16 tokens; a step of B=2 sequences of T=16 needs 33");
  // 3,300 bytes of data against a step of 128 x 2 x 16 + 1.
  fails(with_flag(seq, "--grad-accum", "128"),
        "data.txt: the data holds 3300 tokens; a step of 128 micro-batches of B=2 sequences of "
        "T=16 needs 4097");
  fails(with_flag(ok, "--grad-accum", "0"), "--grad-accum must be at least 1");
  fails(with_flag(ok, "--grad-accum", "65537"), "--grad-accum");
  fails(with_flag(ok, "--sampling", "shuffled"), "--sampling");
  CHECK(!fs::exists(s.dir / "o"));  // nothing written by any of them
  fails(with(ok, "--data", (s.dir / "bad.txt").string()), "bad.txt");
  fails(with(ok, "--ctx", "17"), "past the model's context of 16");
  fails(with(ok, "--batch", "0"), "--batch must be at least 1");
  // Validation that would silently report nothing: no text, too little text, half the flags.
  const auto validate = [&](const fs::path& val, const std::string& every) {
    std::vector<std::string> v = ok;
    if (!val.empty()) v.insert(v.end(), {"--val-data", val.string()});
    if (!every.empty()) v.insert(v.end(), {"--eval-every", every});
    return v;
  };
  fails(validate(s.dir / "empty.txt", "1"), "empty.txt: the validation text holds 0 tokens");
  fails(validate(s.dir / "short.txt", "1"), "short.txt: the validation text holds 16 tokens; an "
                                            "evaluation of B=2 windows of T=16 needs 33");
  fails(validate({}, "1"), "--eval-every needs --val-data FILE");
  fails(validate(s.val, ""), "--val-data is read only with --eval-every N");
  std::vector<std::string> a = ok;
  a.insert(a.end(), {"--resume", s.dir.path().string()});
  fails(a, "is not a training checkpoint");
  test::write_file(s.dir / "file", "x");
  fails(s.args(s.dir / "file" / "o", "2"), "cannot");
  std::vector<std::string> both = s.args(s.dir / "o", "2");
  both.insert(both.end(), {"-m", (test::source_dir() / "models" / "kjv").string()});
  fails(both, "exactly one of -m DIR");
  std::vector<std::string> bench = ok;
  bench.push_back("--bench");
  fails(bench, "--bench writes and evaluates nothing");
  bench.erase(bench.begin() + 5, bench.begin() + 7);  // "-o", out
  fails(with(bench, "--steps", "1"), "--bench needs --steps 2 or more");
  fails(with_flag(bench, "--sample-every", "1"), "--save-every and --sample-every");
  fails(with_flag(ok, "--sample-every", "often"), "--sample-every");
  fails(with_flag(ok, "--sample-every", "-1"), "--sample-every");
  std::vector<std::string> sampling = with_flag(ok, "--sample-every", "1");
  fails(with_flag(sampling, "--sample-len", "0"), "--sample-len");
  fails(with_flag(sampling, "--sample-prompt", ""), "--sample-prompt is empty");
  fails(with_flag(ok, "--sample-len", "8"), "--sample-len is read only with --sample-every N");
  fails(with_flag(ok, "--sample-prompt", "x"),
        "--sample-prompt is read only with --sample-every N");
  std::vector<std::string> no_out = ok;
  no_out.erase(no_out.begin() + 5, no_out.begin() + 7);  // "-o", out
  fails(no_out, "-o OUT is required");
}

TEST_CASE("gpt2vk train --sample-every: samples between the steps, and the same training") {
  // The shipped model's shape from --init, on its held-out text (the shipped KJV data).
  test::TempDir dir;
  const fs::path kjv = test::source_dir() / "models" / "kjv";
  const auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a = {"train", "--init", (kjv / "config.json").string(), "--data",
                                  (kjv / "heldout.txt").string(), "-o", (dir / name).string(),
                                  "--steps", "10", "--batch", "2", "--ctx", "32", "--lr", "3e-3",
                                  "--seed", "7", "--kernels", "cpu", "--log",
                                  (dir / (name + ".jsonl")).string()};
    a.insert(a.end(), extra.begin(), extra.end());
    const test::CliResult r = test::gpt2vk(a);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(test::no_validation_messages(r));
    return r.err;
  };
  // The samples a run printed: each a line of its own, the text a JSON string.
  const auto samples = [](const std::string& err) {
    std::vector<std::pair<std::string, std::string>> out;  // (step, text)
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);) {
      const std::string head = "gpt2vk: step ";
      const size_t colon = line.find(" sample: ");
      if (line.rfind(head, 0) != 0 || colon == std::string::npos) continue;
      out.emplace_back(line.substr(head.size(), colon - head.size()),
                       nlohmann::json::parse(line.substr(colon + 9)).get<std::string>());
    }
    return out;
  };
  const std::string plain = run("plain", {});
  CHECK(samples(plain).empty());
  // 8 prompt tokens (the data's first line's) and 24 more fill the context of 32 exactly.
  const std::string err = run("sampled", {"--sample-every", "5", "--sample-len", "24"});
  const auto two = samples(err);
  REQUIRE(two.size() == 2);
  CHECK(two[0].first == "5");
  CHECK(two[1].first == "10");
  for (const auto& [step, text] : two) {
    CHECK(text.rfind("And Abra", 0) == 0);  // heldout.txt's first line, its first 8 bytes
    CHECK(text.size() == 32);               // ASCII here: 8 + 24 bytes
  }
  // The same training: every loss, and the weights.
  REQUIRE(losses(dir / "plain.jsonl").size() == 10);
  CHECK(losses(dir / "sampled.jsonl") == losses(dir / "plain.jsonl"));
  CHECK(test::read_file(dir / "sampled" / "model.safetensors") ==
        test::read_file(dir / "plain" / "model.safetensors"));
  // The last sample is the saved weights' greedy text, as generate continues the prompt.
  const test::CliResult g =
      test::gpt2vk({"generate", "-m", (dir / "sampled").string(), "-p", "And Abra", "-n", "24",
                    "--temp", "0", "--precision", "f32"});
  REQUIRE_MESSAGE(g.exit_code == 0, g.err);
  CHECK(g.out == two[1].second + "\n");
  // Past the context the sample slides on (its last 32 tokens), its own prompt, the default
  // length of 64; training is still the same.
  const auto slid = samples(run("slid", {"--sample-every", "10", "--sample-prompt", "In the"}));
  REQUIRE(slid.size() == 1);
  CHECK(slid[0].second.rfind("In the", 0) == 0);
  CHECK(slid[0].second.size() == 6 + 64);
  CHECK(losses(dir / "slid.jsonl") == losses(dir / "plain.jsonl"));
}

TEST_CASE("gpt2vk train --bench times the steps and writes nothing") {
  Setup s;
  std::vector<std::string> a = s.args(s.dir / "unused", "3");
  a.erase(a.begin() + 5, a.begin() + 7);  // "-o", out
  a.push_back("--bench");
  const test::CliResult r = test::gpt2vk(a);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  CHECK_MESSAGE(r.out.find("2 x 16 tokens per step") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find("tokens/s") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find("the median of 2 steps after the first") != std::string::npos, r.out);
  CHECK(!fs::exists(s.dir / "unused"));
}

TEST_CASE("gpt2vk train: SIGINT ends the step, saves, and the run resumes from there") {
  interrupt_and_resume(SIGINT);
}

TEST_CASE("gpt2vk train: SIGTERM ends the step, saves, and the run resumes from there") {
  interrupt_and_resume(SIGTERM);
}

TEST_CASE("gpt2vk train: a diverging run stops with an error and keeps the last checkpoint") {
  Setup s;
  // A learning rate of 1e30 makes the weights of step 1 overflow the forward pass of step 2.
  std::vector<std::string> a = with(s.args(s.dir / "out", "5"), "--lr", "1e30");
  a.insert(a.end(), {"--save-every", "1", "--grad-clip", "0"});
  const test::CliResult r = test::gpt2vk(a);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("the run diverged at step 1") != std::string::npos, r.err);
  CHECK(test::read_file(s.dir / "out" / "trainer_state.json").find("\"step\": 1") != std::string::npos);
}

TEST_CASE("gpt2vk train --resume refuses a corrupt trainer_state.json, naming the field") {
  Setup s;
  // Sequential windows: the data position is the state's place in the data.
  const auto args = [&](const fs::path& out, const std::string& steps) {
    return with_flag(s.args(out, steps), "--sampling", "sequential");
  };
  REQUIRE(test::gpt2vk(args(s.dir / "out", "3")).exit_code == 0);
  const auto refused = [&](const std::string& field, const std::string& value,
                           const std::string& message) {
    corrupt_copy(s.dir / "out", s.dir / "bad", field, value);
    std::vector<std::string> a = args(s.dir / "bad", "6");
    a.insert(a.end(), {"--resume", (s.dir / "bad").string()});
    const test::CliResult r = test::gpt2vk(a);
    CHECK_MESSAGE(r.exit_code == 1, field, " = ", value, ": ", r.err);
    const std::string want = (s.dir / "bad" / "trainer_state.json").string() + ": " + message;
    CHECK_MESSAGE(r.err.find(want) != std::string::npos, r.err);
  };
  // 2^64 - 100 once wrapped the end-of-data check and read far past the tokens; -1 trained.
  refused("position", "18446744073709551516",
          "position: 18446744073709551516 is past the data's last token");
  refused("position", "-1", "position: must be a whole number from 0 to 2^64 - 1, got -1");
  refused("position", "48", "position: 48 is not a multiple of the 32 tokens a step takes");
  refused("position", "\"96\"", "position: must be a whole number");
  refused("step", "0", "step: must be at least 1");
  refused("train_loss", "[[2, 5.0], [1, 5.0]]", "train_loss[1]: step 1 does not follow step 2");
  refused("settings", "null", "settings: must be a string, got null");
  refused("rng_state", "\"0123456789abcdef\"", "rng_state: present in a run of sequential windows");
  // A step past --steps once saved again and exited 0.
  std::vector<std::string> a = args(s.dir / "out", "2");
  a.insert(a.end(), {"--resume", (s.dir / "out").string()});
  const test::CliResult past = test::gpt2vk(a);
  CHECK(past.exit_code == 1);
  const std::string want = "trainer_state.json: step: 3 is past --steps 2 (give --steps 3 or more)";
  CHECK_MESSAGE(past.err.find(want) != std::string::npos, past.err);
  // The untouched state resumes.
  const test::CliResult r = test::gpt2vk(with(a, "--steps", "4"));
  CHECK_MESSAGE(r.exit_code == 0, r.err);

  // Random windows: the generator's state is the place in the data.
  REQUIRE(test::gpt2vk(s.args(s.dir / "random", "1")).exit_code == 0);
  const auto refused_random = [&](const std::string& field, const std::string& value,
                                  const std::string& message) {
    corrupt_copy(s.dir / "random", s.dir / "bad", field, value.empty() ? "null" : value);
    if (value.empty()) {
      nlohmann::json j = nlohmann::json::parse(test::read_file(s.dir / "bad" / "trainer_state.json"));
      j.erase(field);
      test::write_file(s.dir / "bad" / "trainer_state.json", j.dump(2));
    }
    std::vector<std::string> b = s.args(s.dir / "bad", "2");
    b.insert(b.end(), {"--resume", (s.dir / "bad").string()});
    const test::CliResult bad = test::gpt2vk(b);
    CHECK_MESSAGE(bad.exit_code == 1, field, " = ", value, ": ", bad.err);
    const std::string expected = (s.dir / "bad" / "trainer_state.json").string() + ": " + message;
    CHECK_MESSAGE(bad.err.find(expected) != std::string::npos, bad.err);
  };
  refused_random("rng_state", "\"12345\"", "rng_state: must be 16 lowercase hexadecimal digits");
  refused_random("rng_state", "null", "rng_state: must be 16 lowercase hexadecimal digits, got null");
  refused_random("rng_state", "", "rng_state: missing: a run of random windows keeps");
  refused_random("position", "32", "position: 32 in a run of random windows, which keeps 0 there");
}

TEST_CASE("gpt2vk train killed at any file operation of a save: --resume finds a whole checkpoint") {
  // Each run stops with SIGKILL just before its Nth file operation (GPT2VK_TRAIN_KILL_AT_FILE_OP),
  // in the save of step 2 over step 1's checkpoint; N goes up until the run ends by itself.
  // Whichever checkpoint the kill left, the resumed run must end on the uninterrupted run's bits.
  // Every 4th operation here (each kill costs two processes that compile their pipelines, 8 s
  // with a cold shader cache); test_save.cpp kills the same save before every one of them.
  Setup s;
  REQUIRE(test::gpt2vk(s.args(s.dir / "whole", "3")).exit_code == 0);
  REQUIRE(test::gpt2vk(s.args(s.dir / "start", "1")).exit_code == 0);
  int n = 1;
  bool committed = false;
  for (;; n += 4) {
    fs::remove_all(s.dir / "out");
    fs::copy(s.dir / "start", s.dir / "out", fs::copy_options::recursive);
    std::vector<std::string> a = s.args(s.dir / "out", "2");
    a.insert(a.end(), {"--resume", (s.dir / "out").string()});
    const test::CliResult killed =
        test::gpt2vk(a, {{"GPT2VK_TRAIN_KILL_AT_FILE_OP", std::to_string(n)}});
    if (killed.exit_code == 0) break;
    const std::string what = "killed before file operation " + std::to_string(n);
    REQUIRE_MESSAGE(killed.exit_code == 128 + SIGKILL, killed.err);
    REQUIRE_MESSAGE(killed.err.find(what) != std::string::npos, killed.err);
    const test::CliResult r = test::gpt2vk(with(a, "--steps", "3"));
    REQUIRE_MESSAGE(r.exit_code == 0, what, ": ", r.err);
    // Once the new checkpoint is committed (one rename), no later kill brings back the previous.
    const bool from_new = r.err.find("step 2 of 3") != std::string::npos;
    CHECK_MESSAGE((from_new || r.err.find("step 1 of 3") != std::string::npos), what, ": ", r.err);
    CHECK_MESSAGE((from_new || !committed), what, ": the previous checkpoint after the new one");
    committed = committed || from_new;
    for (const char* f :
         {"model.safetensors", "optimizer.safetensors", "trainer_state.json", "config.json"})
      CHECK_MESSAGE(test::read_file(s.dir / "out" / f) == test::read_file(s.dir / "whole" / f),
                    what, ": ", f);
    CHECK_MESSAGE(!fs::exists(s.dir / "out" / ".complete-checkpoint"), what);
  }
  CHECK(committed);
  CHECK(n > 10);  // the save made that many operations
}

TEST_CASE("gpt2vk train --resume DIR alone goes on with the run's flags") {
  Setup s;
  REQUIRE(test::gpt2vk(s.args(s.dir / "whole", "6")).exit_code == 0);
  REQUIRE(test::gpt2vk(s.args(s.dir / "part", "3")).exit_code == 0);
  // No --data, --init, -o, --batch, ...: the state has them. --kernels is the device's choice,
  // not the run's.
  const std::string part = (s.dir / "part").string();
  const test::CliResult r =
      test::gpt2vk({"train", "--resume", part, "--steps", "6", "--kernels", "cpu"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(r.err.find("step 3 of 6") != std::string::npos, r.err);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json", "loss.svg"})
    CHECK_MESSAGE(test::read_file(s.dir / "part" / f) == test::read_file(s.dir / "whole" / f), f);
  // Without --steps, the run's total: this one is complete, and nothing is written.
  const test::CliResult done = test::gpt2vk({"train", "--resume", part});
  CHECK_MESSAGE(done.exit_code == 0, done.err);
  CHECK_MESSAGE(done.err.find(part + ": the run is complete (step 6 of 6); give --steps N") !=
                    std::string::npos,
                done.err);
  CHECK(test::read_file(s.dir / "part" / "model.safetensors") ==
        test::read_file(s.dir / "whole" / "model.safetensors"));
  // A flag given again must be the run's; another value is refused, naming the flag and both.
  const auto refused = [&](std::vector<std::string> extra, const std::string& message) {
    std::vector<std::string> a = {"train", "--resume", part, "--steps", "8"};
    a.insert(a.end(), extra.begin(), extra.end());
    const test::CliResult bad = test::gpt2vk(a);
    CHECK_MESSAGE(bad.exit_code == 1, bad.err);
    CHECK_MESSAGE(bad.err.find(message) != std::string::npos, bad.err);
  };
  refused({"--lr", "1e-3"}, part + " was trained with other flags or data: --lr 0.001 here, "
                                   "0.003 in its run (leave --lr out");
  refused({"--data", s.val.string()},
          "--data " + s.val.string() + " here, " + s.data.string() + " in its run");
  refused({"--batch", "4"}, "--batch 4 here, 2 in its run");
  refused({"--cosine"}, "--cosine true here, false in its run");
  refused({"-m", part}, "-m " + part + " here, (none) in its run");
}

TEST_CASE("gpt2vk train --resume alone reads a state from before the flags were kept") {
  // Such a run took sequential windows (issue 41's --sampling did not exist): its settings line
  // is that of --sampling sequential today.
  Setup s;
  REQUIRE(test::gpt2vk(with_flag(s.args(s.dir / "whole", "6"), "--sampling", "sequential")).exit_code == 0);
  REQUIRE(test::gpt2vk(with_flag(s.args(s.dir / "old", "3"), "--sampling", "sequential")).exit_code == 0);
  // Such a state has the settings line only; its total steps were never kept.
  nlohmann::json j = nlohmann::json::parse(test::read_file(s.dir / "old" / "trainer_state.json"));
  REQUIRE(j.contains("flags"));
  j.erase("flags");
  test::write_file(s.dir / "old" / "trainer_state.json", j.dump(2));
  const test::CliResult r = test::gpt2vk(
      {"train", "--resume", (s.dir / "old").string(), "--steps", "6", "--kernels", "cpu"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    CHECK_MESSAGE(test::read_file(s.dir / "old" / f) == test::read_file(s.dir / "whole" / f), f);
}

TEST_CASE("gpt2vk train --resume reads a state from before --sampling and --grad-accum") {
  // Written with the flags but without these two: a run of sequential windows and one
  // micro-batch, which goes on as one (the new default of random windows would change it).
  Setup s;
  REQUIRE(test::gpt2vk(with_flag(s.args(s.dir / "whole", "4"), "--sampling", "sequential")).exit_code == 0);
  REQUIRE(test::gpt2vk(with_flag(s.args(s.dir / "old", "2"), "--sampling", "sequential")).exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(test::read_file(s.dir / "old" / "trainer_state.json"));
  REQUIRE(j.at("flags").contains("sampling"));
  j["flags"].erase("sampling");
  j["flags"].erase("grad_accum");
  test::write_file(s.dir / "old" / "trainer_state.json", j.dump(2));
  const test::CliResult r = test::gpt2vk(
      {"train", "--resume", (s.dir / "old").string(), "--steps", "4", "--kernels", "cpu"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(r.err.find("(sequential windows)") != std::string::npos, r.err);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    CHECK_MESSAGE(test::read_file(s.dir / "old" / f) == test::read_file(s.dir / "whole" / f), f);
  // The state it saves names them now.
  const nlohmann::json saved = nlohmann::json::parse(test::read_file(s.dir / "old" / "trainer_state.json"));
  CHECK(saved.at("flags").at("sampling") == "sequential");
  CHECK(saved.at("flags").at("grad_accum") == 1);
}

TEST_CASE("gpt2vk train -o onto a checkpoint needs --resume or --overwrite") {
  Setup s;
  const fs::path out = s.dir / "out";
  REQUIRE(test::gpt2vk(s.args(out, "2")).exit_code == 0);
  const std::string model = test::read_file(out / "model.safetensors");
  const test::CliResult r = test::gpt2vk(with(s.args(out, "3"), "--seed", "8"));
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find(out.string() + " already holds a checkpoint (step 2): continue it with "
                           "--resume " + out.string() + ", or pass --overwrite to replace it") !=
                    std::string::npos,
                r.err);
  CHECK(test::read_file(out / "model.safetensors") == model);
  // A model folder without a run state is refused too (-m DIR -o DIR would replace it).
  fs::create_directories(s.dir / "model");
  fs::copy_file(s.config, s.dir / "model" / "config.json");
  std::vector<std::string> m = s.args(s.dir / "model", "1");
  const test::CliResult held = test::gpt2vk(m);
  CHECK(held.exit_code == 1);
  CHECK_MESSAGE(held.err.find("already holds a model, with no run state to go on from") !=
                    std::string::npos,
                held.err);
  // --overwrite replaces it; an empty folder takes a checkpoint as a missing one does.
  std::vector<std::string> again = with(s.args(out, "1"), "--seed", "8");
  again.push_back("--overwrite");
  const test::CliResult o = test::gpt2vk(again);
  CHECK_MESSAGE(o.exit_code == 0, o.err);
  CHECK(test::read_file(out / "trainer_state.json").find("\"step\": 1") != std::string::npos);
  fs::create_directories(s.dir / "empty");
  const test::CliResult e = test::gpt2vk(s.args(s.dir / "empty", "1"));
  CHECK_MESSAGE(e.exit_code == 0, e.err);
  // Without --resume, --data is still needed.
  std::vector<std::string> no_data = s.args(s.dir / "new", "1");
  no_data.erase(no_data.begin() + 3, no_data.begin() + 5);  // "--data", data
  const test::CliResult d = test::gpt2vk(no_data);
  CHECK(d.exit_code == 1);
  CHECK_MESSAGE(d.err.find("--data FILE is required") != std::string::npos, d.err);
}
