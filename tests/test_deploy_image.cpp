// deploy/Dockerfile (issue 42), without a container runtime (none runs on the machines this
// suite runs on, and their network reaches no image registry): the file passes the Docker
// language server's linter (dockerfile-utils), has a Debian 12 build stage and a Debian 12
// runtime stage that runs as a user other than root, and that stage installs exactly the
// packages of what the built binary loads (its ldd, the Vulkan loader volk opens, lavapipe's
// driver; each file's package by dpkg -S). Then the steps that can run here run: the build
// installed where the runtime stage copies it from (cmake --install, into a temporary root),
// its entrypoint run from there with the image's environment, once with the image's CMD and
// once with deploy/kubernetes/deployment.yaml's args, as a pod would: /health (the probes'),
// /metrics (the scrapes') with the gauge the autoscaler reads, a completion, and an exit 0 on
// the image's STOPSIGNAL; and the build's context, the ignore file applied, configures. What an
// image build would add (apt-get in a bare Debian 12, the Release build in the build stage, the
// user's rights in the container) is not tried here.
#include <doctest/doctest.h>
#include <fnmatch.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/deploy.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The words of the runtime stage's `apt-get install` line, options left out.
std::set<std::string> apt_installed(const json& stage) {
  std::set<std::string> out;
  for (const json& i : stage.at("instructions")) {
    if (i["keyword"] != "RUN") continue;
    const std::vector<std::string> words = i["args"];
    for (size_t w = 0; w + 1 < words.size(); w++) {
      if (words[w] != "apt-get" || words[w + 1] != "install") continue;
      for (size_t v = w + 2; v < words.size() && words[v] != "&&"; v++)
        if (words[v][0] != '-' && words[v] != "\\") out.insert(words[v]);
    }
  }
  return out;
}

// The Debian package that holds `file` (dpkg -S; by its real path too: Debian 12's /lib is
// /usr/lib, and dpkg knows each file by one of the two).
std::string package_of(const fs::path& file) {
  for (const fs::path& p : {file, fs::canonical(file)}) {
    const test::CliResult r = test::run({"dpkg", "-S", p.string()});
    if (r.exit_code != 0) continue;
    const std::string line = r.out.substr(0, r.out.find('\n'));
    const std::string names = line.substr(0, line.find(": "));
    return names.substr(0, names.find(':'));  // "libc6:amd64" -> "libc6"
  }
  FAIL("no Debian package holds " << file);
  return "";
}

// What the binary loads: the libraries ldd lists, the Vulkan loader (volk opens
// libvulkan.so.1 at run time, as ldconfig finds it) and lavapipe's driver manifest.
std::vector<fs::path> loaded_files(const fs::path& binary) {
  std::vector<fs::path> out;
  const test::CliResult ldd = test::run({"ldd", binary.string()});
  REQUIRE(ldd.exit_code == 0);
  std::istringstream lines(ldd.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t arrow = line.find("=> /");
    if (arrow != std::string::npos)
      out.emplace_back(line.substr(arrow + 3, line.find(" (", arrow) - arrow - 3));
  }
  REQUIRE(!out.empty());
  const fs::path libraries = fs::canonical(out[0]).parent_path();  // this machine's ABI's
  const test::CliResult cache = test::run({"ldconfig", "-p"});
  std::istringstream entries(cache.out);
  size_t loaders = 0;
  for (std::string line; std::getline(entries, line);) {
    const size_t arrow = line.find(" => ");
    if (line.find("libvulkan.so.1 (") == std::string::npos || arrow == std::string::npos) continue;
    const fs::path loader = line.substr(arrow + 4);
    if (fs::canonical(loader).parent_path() == libraries) out.push_back(loader), loaders++;
  }
  CHECK_MESSAGE(loaders == 1,
                "ldconfig -p lists " << loaders << " libvulkan.so.1 beside " << libraries);
  for (const auto& e : fs::directory_iterator("/usr/share/vulkan/icd.d"))
    if (e.path().filename().string().rfind("lvp_icd", 0) == 0) out.push_back(e.path());
  return out;
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : " ") + x;
  return out;
}

}  // namespace

TEST_CASE(
    "deploy/Dockerfile: lint-clean, Debian 12, not root, the runtime packages the binary needs") {
  if (!test::have_program("dpkg") || !test::have_program("ldd")) return;
  const auto files = test::deploy_files(test::source_dir() / "deploy");
  if (!files) return;
  const json& dockerfile = files->at("dockerfile");
  CHECK_MESSAGE(dockerfile["problems"] == json::array(), dockerfile["problems"].dump(1));
  const json& stages = dockerfile.at("stages");
  REQUIRE(stages.size() == 2);
  CHECK(test::instruction(stages[0], "FROM")->at("args") ==
        json::array({"debian:12", "AS", "build"}));
  CHECK(test::instruction(stages[1], "FROM")->at("args") == json::array({"debian:12"}));
  const json& runtime = stages[1];
  const json* user = test::instruction(runtime, "USER");
  REQUIRE(user);
  const std::string uid = (*user)["args"][0];
  CHECK(uid.rfind("0:", 0) != 0);
  CHECK(uid != "0");
  CHECK(uid.rfind("root", 0) != 0);
  REQUIRE(test::instruction(runtime, "STOPSIGNAL"));
  CHECK(test::instruction(runtime, "STOPSIGNAL")->at("args") == json::array({"SIGTERM"}));

  std::set<std::string> needed;
  for (const fs::path& file : loaded_files(GPT2VK_BINARY)) needed.insert(package_of(file));
  CHECK(needed.count("libvulkan1") == 1);
  CHECK(needed.count("mesa-vulkan-drivers") == 1);
  const std::set<std::string> listed = apt_installed(runtime);
  std::set<std::string> missing, extra;
  for (const std::string& p : needed)
    if (!listed.count(p)) missing.insert(p);
  for (const std::string& p : listed)
    if (!needed.count(p)) extra.insert(p);
  MESSAGE("the binary needs: " << joined(needed));
  CHECK_MESSAGE(missing.empty(), "the runtime stage does not install: " << joined(missing));
  CHECK_MESSAGE(extra.empty(), "the runtime stage installs what nothing loads: " << joined(extra));
}

TEST_CASE("deploy/Dockerfile: its entrypoint, installed as the image has it, serves as a pod") {
  if (!test::have_program("cmake")) return;
  const auto files = test::deploy_files(test::source_dir() / "deploy");
  if (!files) return;
  const json& build = files->at("dockerfile").at("stages").at(0);
  const json& runtime = files->at("dockerfile").at("stages").back();

  // The prefix the runtime stage copies from the build stage, where the build installs.
  std::string prefix;
  for (const json& i : runtime["instructions"])
    if (i["keyword"] == "COPY" && i["flags"].value("from", "") == "build") {
      REQUIRE(i["args"].size() == 2);
      CHECK(i["args"][0] == i["args"][1]);
      prefix = i["args"][1];
    }
  REQUIRE_MESSAGE(!prefix.empty(), "the runtime stage copies nothing from the build stage");
  const json* run = test::instruction(build, "RUN");
  REQUIRE(run);
  CHECK((*run)["text"].get<std::string>().find("cmake --install /build --prefix " + prefix) !=
        std::string::npos);

  // That install, under a temporary root.
  test::TempDir root;
  const fs::path build_dir = fs::path(GPT2VK_BINARY).parent_path();
  const test::CliResult install = test::run(
      {"cmake", "--install", build_dir.string(), "--prefix", (root / prefix.substr(1)).string()});
  REQUIRE_MESSAGE(install.exit_code == 0, install.out << install.err);

  // The image's environment, its absolute paths under the root (the Dockerfile makes them).
  // Mesa's shader cache stays where it is: a cold one would compile every pipeline again.
  test::Env env;
  for (const json& i : runtime["instructions"]) {
    if (i["keyword"] != "ENV") continue;
    for (const json& arg : i["args"]) {
      const std::string kv = arg;
      const std::string name = kv.substr(0, kv.find('=')), value = kv.substr(kv.find('=') + 1);
      env.emplace_back(name, value[0] == '/' ? (root / value.substr(1)).string() : value);
      if (value[0] == '/') fs::create_directories(root / value.substr(1));
    }
  }
  const char* mesa = std::getenv("MESA_SHADER_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  env.emplace_back(
      "MESA_SHADER_CACHE_DIR",
      mesa ? mesa
           : (xdg ? fs::path(xdg) : fs::path(home ? home : "/") / ".cache") / "mesa_shader_cache");

  const json* entry = test::instruction(runtime, "ENTRYPOINT");
  REQUIRE(entry);
  const std::vector<std::string> entrypoint = (*entry)["json"];
  REQUIRE(entrypoint.size() > 1);
  REQUIRE(entrypoint[0].rfind(prefix + "/", 0) == 0);
  const std::string models = test::flag_value(entrypoint, "-m");
  const std::string metric = test::manifest(*files, "HorizontalPodAutoscaler")
                                 .at("spec")
                                 .at("metrics")
                                 .at(0)
                                 .at("pods")
                                 .at("metric")
                                 .at("name");
  const json& container = test::manifest(*files, "Deployment")
                              .at("spec")
                              .at("template")
                              .at("spec")
                              .at("containers")
                              .at(0);
  const std::string health = container.at("readinessProbe").at("httpGet").at("path");
  const std::string scrape =
      test::manifest(*files, "PodMonitor").at("spec").at("podMetricsEndpoints").at(0).at("path");

  const std::map<std::string, std::vector<std::string>> runs = {
      {"the image's CMD", test::instruction(runtime, "CMD")->at("json")},
      {"deployment.yaml's args", container.at("args")}};
  for (const auto& [what, args] : runs) {
    CAPTURE(what);
    // The entrypoint and the arguments as the container runs them, but for the model (the
    // shipped one where the image mounts one), the address and the port (loopback, a free one).
    const int port = test::free_port();
    std::vector<std::string> argv = {(root / entrypoint[0].substr(1)).string()};
    std::vector<std::string> all(entrypoint.begin() + 1, entrypoint.end());
    all.insert(all.end(), args.begin(), args.end());
    for (size_t i = 0; i < all.size(); i++) {
      const std::string& before = i ? all[i - 1] : "";
      if (all[i] == models)
        argv.push_back((test::source_dir() / "models/kjv").string());
      else if (before == "--host")
        argv.push_back("127.0.0.1");
      else if (before == "--port")
        argv.push_back(std::to_string(port));
      else
        argv.push_back(all[i]);
    }
    test::Background server(test::Program{argv}, env);
    int code = 0;
    test::Timed ready;
    for (int i = 0; i < 1200 && ready.status != 200; i++) {
      REQUIRE_MESSAGE(!server.exited(code), "it exited " << code << ": " << server.err());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ready = test::timed_request(port, "GET", health);
    }
    REQUIRE_MESSAGE(ready.status == 200, server.err());
    const test::Timed metrics = test::timed_request(port, "GET", scrape);
    CHECK(metrics.status == 200);
    CHECK_MESSAGE(metrics.body.find("# TYPE " + metric + " gauge\n") != std::string::npos,
                  "/metrics has no gauge " << metric);
    const test::Timed completion = test::timed_request(
        port, "POST", "/v1/completions", R"({"prompt": "And God said", "max_tokens": 4})");
    CHECK(completion.status == 200);
    CHECK(server.stop(SIGTERM, 60) == 0);
  }
}

TEST_CASE("deploy/Dockerfile: the build's context, its ignore file applied, configures") {
  if (!test::have_program("cmake") || !test::have_program("git")) return;
  // The ignore file's patterns: a name or a glob at the top (".git", "build*"), or "**/NAME"
  // anywhere. The build stage copies what is left and builds it: here it is configured only
  // (a second build of the project would double CI's time) without the tests and the fuzz
  // targets, which proves CMakeLists.txt needs neither folder.
  std::vector<std::string> top, anywhere;
  std::istringstream lines(test::read_file(test::source_dir() / "deploy/Dockerfile.dockerignore"));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const bool deep = line.rfind("**/", 0) == 0;
    const bool plain = line.find('/') == std::string::npos;
    REQUIRE_MESSAGE((deep || plain), "a pattern this test does not read: " << line);
    if (deep)
      anywhere.push_back(line.substr(3));
    else
      top.push_back(line);
  }
  auto ignored = [&](const fs::path& relative) {
    const std::string first = relative.begin()->string();
    for (const std::string& p : top)
      if (fnmatch(p.c_str(), first.c_str(), 0) == 0) return true;
    for (const auto& part : relative)
      for (const std::string& p : anywhere)
        if (fnmatch(p.c_str(), part.c_str(), 0) == 0) return true;
    return false;
  };
  test::TempDir context;
  const fs::path source = test::source_dir();
  for (auto it = fs::recursive_directory_iterator(source); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path relative = fs::relative(it->path(), source);
    if (ignored(relative)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory())
      fs::create_directories(context / relative.string());
    else if (it->is_regular_file())
      fs::copy_file(it->path(), context / relative.string());
  }
  CHECK(!fs::exists(context / "build"));
  CHECK(!fs::exists(context / "tests"));
  // What git tracks is all there but the tests and the fuzz targets: configuring finds no
  // shader or data folder missing (it globs them), so this is what holds those in.
  const test::CliResult tracked = test::run({"git", "-C", source.string(), "ls-files"});
  REQUIRE(tracked.exit_code == 0);
  std::istringstream paths(tracked.out);
  std::set<std::string> left_out;
  for (std::string path; std::getline(paths, path);)
    if (!fs::exists(context / path) && path.rfind("tests/", 0) != 0 && path.rfind("fuzz/", 0) != 0)
      left_out.insert(path);
  CHECK_MESSAGE(left_out.empty(), "the context leaves out: " << joined(left_out));
  const test::CliResult configure =
      test::run({"cmake", "-S", context.path().string(), "-B", (context / "build").string(),
                 "-DCMAKE_BUILD_TYPE=Release"});
  CHECK_MESSAGE(configure.exit_code == 0, configure.out << configure.err);
}
