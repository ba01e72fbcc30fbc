#include "tests/ci.h"
#include "tests/deploy.h"

#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "tests/process.h"

namespace test {

bool have_program(const std::string& program) {
  if (on_path(program)) return true;
  if (test::in_ci())
    FAIL(program << " is not installed (bash scripts/setup.sh --tests; CI=true makes this a failure)");
  MESSAGE("skipped: " << program << " is not installed (bash scripts/setup.sh --tests)");
  return false;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

Timed timed_request(int port, const std::string& method, const std::string& path,
                    const std::string& body) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  Timed out;
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(120);
  client.set_url_encode(false);  // a path is sent as the caller encoded it
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.body = body;
  if (!body.empty()) req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.body.empty()) out.first_s = since();
    out.body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error)) out.status = 0;
  out.total_s = since();
  return out;
}

std::string haproxy_stat(const std::string& csv, const std::string& px, const std::string& sv,
                         const std::string& column) {
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    for (std::string cell; std::getline(s, cell, ',');) cells.push_back(cell);
    return cells;
  };
  std::stringstream lines(csv);
  std::string line;
  if (!std::getline(lines, line) || line.rfind("# ", 0) != 0) return "";
  const std::vector<std::string> head = split(line.substr(2));
  size_t at = 0;
  while (at < head.size() && head[at] != column) at++;
  while (std::getline(lines, line)) {
    const std::vector<std::string> cells = split(line);
    if (cells.size() > at && cells[0] == px && cells[1] == sv) return cells[at];
  }
  return "";
}

std::optional<nlohmann::json> deploy_files(const std::filesystem::path& dir) {
  const auto modules = source_dir() / "tests/node/node_modules";
  if (!on_path("node") || !std::filesystem::exists(modules / "kubernetes-models/package.json") ||
      !std::filesystem::exists(modules / "dockerfile-utils/package.json")) {
    if (test::in_ci())
      FAIL("node or the npm packages of tests/node are missing (bash scripts/setup.sh --tests)");
    MESSAGE("skipped: node or the npm packages of tests/node are missing (setup.sh --tests)");
    return std::nullopt;
  }
  const CliResult r =
      run({"node", (source_dir() / "tests/node/deploy_manifests.mjs").string(), dir.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

const nlohmann::json* instruction(const nlohmann::json& stage, const std::string& keyword) {
  for (const nlohmann::json& i : stage.at("instructions"))
    if (i.at("keyword") == keyword) return &i;
  return nullptr;
}

const nlohmann::json& manifest(const nlohmann::json& files, const std::string& kind) {
  const nlohmann::json* found = nullptr;
  for (const nlohmann::json& m : files.at("manifests")) {
    if (!m.at("object").is_object() || m["object"].value("kind", "") != kind) continue;
    REQUIRE_MESSAGE(found == nullptr, "two " << kind << "s in deploy/kubernetes/");
    found = &m["object"];
  }
  REQUIRE_MESSAGE(found != nullptr, "no " << kind << " in deploy/kubernetes/");
  return *found;
}

std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); i++)
    if (args[i] == flag) return args[i + 1];
  return "";
}

}  // namespace test
