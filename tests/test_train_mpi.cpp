// gpt2vk train over MPI (issue 41): `mpirun -np 2` on one machine, loopback only, against one
// process with --grad-accum 2: the same checkpoint bytes and losses under both kernel sets; a
// resume of the group, and of its checkpoint in one process; a rank killed mid-run, which ends
// the job and leaves the last checkpoint whole; and the jobs refused at the start (ranks given
// other flags or data, micro-batches the ranks cannot share, a resume at another rank count, a
// build without MPI started as several ranks).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/ci.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"
#include "tests/train_files.h"

namespace {

namespace fs = std::filesystem;

// tests/train_files.h's model and text, and a run of them.
struct Setup : test::TrainFiles {
  // A run of `steps` writing `out` and its log out.jsonl.
  std::vector<std::string> args(const std::string& out, const std::string& steps,
                                const std::string& kernels = "cpu") const {
    return {"train", "--init", config.string(), "--data", data.string(), "-o",
            (dir / out).string(), "--steps", steps, "--batch", "2", "--ctx", "16", "--lr", "3e-3",
            "--seed", "7", "--kernels", kernels, "--log", (dir / (out + ".jsonl")).string()};
  }
};

// mpirun on this machine only, over loopback TCP, as root where the tests run as root, more
// ranks than cores allowed; its ranks run gpt2vk under the validation layer, and a job that
// hangs is ended after 300 s.
test::CliResult mpirun(const std::vector<std::vector<std::string>>& ranks, const test::Env& env = {}) {
  std::vector<std::string> argv = {"timeout", "300", GPT2VK_MPIEXEC, "--oversubscribe", "--mca",
                                   "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"};
  for (size_t i = 0; i < ranks.size(); i++) {
    if (i) argv.push_back(":");
    argv.insert(argv.end(), {"-np", "1", GPT2VK_BINARY});
    argv.insert(argv.end(), ranks[i].begin(), ranks[i].end());
  }
  test::Env e = test::with_validation(env);
  e.insert(e.end(), {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
  return test::run(argv, e);
}
// Both ranks given `args`.
test::CliResult mpirun2(const std::vector<std::string>& args, const test::Env& env = {}) {
  return mpirun({args, args}, env);
}

// The log's lines without tokens_per_s (the one field that is a timing).
std::vector<std::string> log_lines(const fs::path& log) {
  std::vector<std::string> out;
  if (!fs::exists(log)) return out;
  std::istringstream in(test::read_file(log));
  for (std::string line; std::getline(in, line);) out.push_back(line.substr(0, line.find(",\"tokens_per_s\"")));
  return out;
}

void check_same_run(const fs::path& a, const fs::path& b) {
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    CHECK_MESSAGE(test::read_file(a / f) == test::read_file(b / f), a.filename().string() << " "
                                                                      << b.filename().string() << " " << f);
}

bool mpi_build() {
  if (GPT2VK_MPI_BUILD) return true;
  if (test::in_ci())
    FAIL("gpt2vk was built without MPI (bash scripts/setup.sh installs libopenmpi-dev; CI=true "
         "makes this a failure)");
  MESSAGE("gpt2vk was built without MPI: its MPI runs are not tested");
  return false;
}

}  // namespace

TEST_CASE("mpirun -np 2 gpt2vk train equals --grad-accum 2 to the bit, resumed too") {
  if (!mpi_build()) return;
  Setup s;
  for (const std::string kernels : {"gpu", "cpu"}) {
    CAPTURE(kernels);
    std::vector<std::string> one = s.args("one-" + kernels, "4", kernels);
    one.insert(one.end(), {"--grad-accum", "2"});
    const test::CliResult a = test::gpt2vk(one);
    REQUIRE_MESSAGE(a.exit_code == 0, a.err);
    const test::CliResult b = mpirun2(s.args("two-" + kernels, "4", kernels));
    REQUIRE_MESSAGE(b.exit_code == 0, b.err);
    CHECK_MESSAGE(test::no_validation_messages(b), b.err);
    CHECK_MESSAGE(b.err.find("rank 1 of 2 on") != std::string::npos, b.err);
    check_same_run(s.dir / ("one-" + kernels), s.dir / ("two-" + kernels));
    REQUIRE(log_lines(s.dir / ("one-" + kernels + ".jsonl")).size() == 4);
    CHECK(log_lines(s.dir / ("two-" + kernels + ".jsonl")) == log_lines(s.dir / ("one-" + kernels + ".jsonl")));
  }
  // Two rounds of two micro-batches a step: the sum's order is still one process's.
  std::vector<std::string> four = s.args("four", "2");
  four.insert(four.end(), {"--grad-accum", "4"});
  const test::CliResult f1 = test::gpt2vk(four);
  REQUIRE_MESSAGE(f1.exit_code == 0, f1.err);
  std::vector<std::string> four2 = s.args("four2", "2");
  four2.insert(four2.end(), {"--grad-accum", "4"});
  const test::CliResult f2 = mpirun2(four2);
  REQUIRE_MESSAGE(f2.exit_code == 0, f2.err);
  check_same_run(s.dir / "four", s.dir / "four2");
  // Rank 0 alone writes: one progress line a step, one checkpoint.
  const test::CliResult again = mpirun2(s.args("half", "2"));
  REQUIRE_MESSAGE(again.exit_code == 0, again.err);
  CHECK(again.err.find("step 2/2") == again.err.rfind("step 2/2"));
  // The group goes on from its checkpoint, and so does one process (--grad-accum 2 from the
  // state): both end on the uninterrupted run's bits.
  fs::copy(s.dir / "half", s.dir / "half1", fs::copy_options::recursive);
  const test::CliResult group = mpirun2({"train", "--resume", (s.dir / "half").string(), "--steps", "4",
                                         "--kernels", "cpu"});
  REQUIRE_MESSAGE(group.exit_code == 0, group.err);
  check_same_run(s.dir / "half", s.dir / "one-cpu");
  const test::CliResult alone =
      test::gpt2vk({"train", "--resume", (s.dir / "half1").string(), "--steps", "4", "--kernels", "cpu"});
  REQUIRE_MESSAGE(alone.exit_code == 0, alone.err);
  CHECK_MESSAGE(alone.err.find("steps of 2 x 2 x 16") != std::string::npos, alone.err);
  check_same_run(s.dir / "half1", s.dir / "one-cpu");
}

TEST_CASE("a rank killed mid-run ends the MPI job and leaves the last checkpoint") {
  if (!mpi_build()) return;
  Setup s;
  std::vector<std::string> args = s.args("cut", "4");
  args.insert(args.end(), {"--save-every", "2"});
  const test::CliResult r = mpirun2(args, {{"GPT2VK_TRAIN_KILL_RANK", "1:3"}});
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // ended, not timed out: no rank waits for the dead one
  CHECK_MESSAGE(r.err.find("rank 1 killed before step 3") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find("exited on signal 9") != std::string::npos, r.err);  // mpirun's word
  const std::string state = test::read_file(s.dir / "cut" / "trainer_state.json");
  CHECK_MESSAGE(state.find("\"step\": 2") != std::string::npos, state);
  // Its checkpoint goes on to the bits of a run never cut.
  std::vector<std::string> whole = s.args("whole", "4");
  whole.insert(whole.end(), {"--grad-accum", "2", "--save-every", "2"});
  REQUIRE(test::gpt2vk(whole).exit_code == 0);
  const test::CliResult resumed =
      test::gpt2vk({"train", "--resume", (s.dir / "cut").string(), "--kernels", "cpu"});
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.err);
  check_same_run(s.dir / "cut", s.dir / "whole");
}

TEST_CASE("an MPI job whose ranks disagree, or cannot share a step, is refused at the start") {
  Setup s;
  if (!GPT2VK_MPI_BUILD) {
    // Started as two ranks, a build without MPI would train the run twice over.
    const test::CliResult r = test::gpt2vk(s.args("o", "2"), {{"OMPI_COMM_WORLD_SIZE", "2"}});
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find("built without MPI") != std::string::npos, r.err);
    CHECK(!fs::exists(s.dir / "o"));
  }
  if (!mpi_build()) return;
  const auto refused = [&](const test::CliResult& r, const std::string& message) {
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find(message) != std::string::npos, r.err);
  };
  const std::vector<std::string> ok = s.args("o", "2");
  std::vector<std::string> other_lr = ok;
  REQUIRE(ok[13] == "--lr");
  other_lr[14] = "1e-3";
  refused(mpirun({ok, other_lr}), "rank 1 of 2 has another --lr than rank 0");
  test::write_file(s.dir / "other.txt", "And the earth was without form, and void. " + test::read_file(s.data));
  std::vector<std::string> other_data = ok;
  other_data[4] = (s.dir / "other.txt").string();
  refused(mpirun({ok, other_data}), "has another --data, training text (--data) than rank 0");
  std::vector<std::string> three = ok;
  three.insert(three.end(), {"--grad-accum", "3"});
  refused(mpirun2(three), "--grad-accum 3 is a step's micro-batches, shared by the ranks");
  CHECK(!fs::exists(s.dir / "o"));  // nothing written by any of them
  // A run of one micro-batch a step cannot go on as two ranks (a run of 2 can go on as 1 or 2).
  REQUIRE(test::gpt2vk(s.args("single", "2")).exit_code == 0);
  const std::string before = test::read_file(s.dir / "single" / "model.safetensors");
  refused(mpirun2({"train", "--resume", (s.dir / "single").string(), "--steps", "4"}),
          "'s run takes 1 micro-batch a step (--grad-accum 1), which 2 ranks cannot share");
  CHECK(test::read_file(s.dir / "single" / "model.safetensors") == before);
}
