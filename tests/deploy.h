// What the deploy/ tests share: the programs they run (HAProxy, Prometheus), free loopback ports,
// HTTP requests made in the test's own process, timed, and deploy/'s files as node reads them.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace test {

// Whether `program` is on PATH; if not, a skip with a message, or a failure where CI=true
// (setup.sh --tests installs it).
bool have_program(const std::string& program);

// A port nothing listens on now, on 127.0.0.1 (the kernel's pick; free until someone takes it).
int free_port();

// One HTTP request on loopback: the status, the body, and the seconds until its first byte of
// body and its end (a stream's first event through a proxy comes well before its end). `path`
// is sent as it is: a query is percent-encoded by the caller.
struct Timed {
  int status = 0;  // 0: no response (the connection failed)
  std::string body;
  double first_s = 0, total_s = 0;
};
Timed timed_request(int port, const std::string& method, const std::string& path,
                    const std::string& body = "");

// The value of `column` in the CSV of HAProxy's stats page (`stats uri` ;csv) for the row of
// proxy `px` and server `sv`; "" where there is none.
std::string haproxy_stat(const std::string& csv, const std::string& px, const std::string& sv,
                         const std::string& column);

// deploy/'s Dockerfile, Kubernetes manifests and prometheus-adapter rule as
// tests/node/deploy_manifests.mjs reads them from `dir` (a copy of deploy/, or deploy/ itself):
// the Dockerfile's lint problems and stages, each manifest with its schema errors. nullopt (a
// skip, or a failure where CI=true) where node or the npm packages are missing.
std::optional<nlohmann::json> deploy_files(const std::filesystem::path& dir);

// The arguments of a Dockerfile instruction of a stage of deploy_files()' "dockerfile" (the
// first with `keyword`), or null where the stage has none.
const nlohmann::json* instruction(const nlohmann::json& stage, const std::string& keyword);

// The one object of `kind` among deploy_files()' manifests (fails where none or several).
const nlohmann::json& manifest(const nlohmann::json& files, const std::string& kind);

// The value after `flag` in an argument list ("--port", "8080" -> "8080"); "" where absent.
std::string flag_value(const std::vector<std::string>& args, const std::string& flag);

}  // namespace test
