// deploy/kubernetes/ (issue 42), without a cluster: every manifest parses and passes its kind's
// schema (Kubernetes' OpenAPI schemas through npm's kubernetes-models, prometheus-operator's
// CRD schemas through @kubernetes-models/prometheus-operator: tests/node/deploy_manifests.mjs)
// with no field the schema does not name, a copy broken on purpose does not, and the files agree
// with each other and with deploy/Dockerfile: the pods' labels, one port, the probes' and the
// scrape's paths, the user, the model's and the caches' mounts, the grace period against the drain,
// the autoscaler's metric against prometheus-adapter's rule. tests/test_deploy_image.cpp runs the
// image's entrypoint with the Deployment's arguments and reads that metric from the server.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/deploy.h"
#include "tests/files.h"

namespace {

using json = nlohmann::json;

// Whether `labels` has every label `selector` asks for (and it asks for one at least).
bool selects(const json& selector, const json& labels) {
  for (const auto& [key, value] : selector.items())
    if (!labels.contains(key) || labels[key] != value) return false;
  return !selector.empty();
}

// The number of a port given by number or by the name of one of the container's ports.
int port_number(const json& container, const json& port) {
  if (port.is_number_integer()) return port.get<int>();
  for (const json& p : container.at("ports"))
    if (p.value("name", "") == port) return p.at("containerPort").get<int>();
  FAIL("the container has no port named " << port);
  return 0;
}

}  // namespace

TEST_CASE("deploy/kubernetes: every manifest passes its kind's schema") {
  const auto files = test::deploy_files(test::source_dir() / "deploy");
  if (!files) return;
  std::set<std::string> kinds;
  for (const json& m : files->at("manifests")) {
    CAPTURE(m["file"].get<std::string>());
    CHECK(m["errors"] == json::array());
    if (m["object"].is_object()) kinds.insert(m["object"]["kind"].get<std::string>());
  }
  CHECK(kinds ==
        std::set<std::string>{"Deployment", "HorizontalPodAutoscaler", "PodMonitor", "Service"});
}

TEST_CASE("deploy/kubernetes: a copy broken on purpose fails, each file") {
  test::TempDir dir;
  std::filesystem::copy(test::source_dir() / "deploy", dir.path(),
                        std::filesystem::copy_options::recursive);
  auto edit = [&](const std::string& file, const std::string& from, const std::string& to) {
    std::string text = test::read_file(dir / file);
    const size_t at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, file << " has no '" << from << "'");
    test::write_file(dir / file, text.replace(at, from.size(), to));
  };
  // What each file's errors must name: a port that is not a number and a misspelt optional
  // field (which the schemas alone let through), a target port that is neither a name nor a
  // number, a required list misspelt, an API version that does not exist.
  const std::map<std::string, std::vector<std::string>> expected = {
      {"deployment.yaml", {"containerPort must be integer", "readinesProbe: no such field"}},
      {"service.yaml", {"targetPort must match exactly one schema"}},
      {"podmonitor.yaml",
       {"required property podMetricsEndpoints", "podMetricEndpoints: no such field"}},
      {"hpa.yaml", {"no schema here for autoscaling/v9"}}};
  edit("kubernetes/deployment.yaml", "containerPort: 8080", "containerPort: \"8080x\"");
  edit("kubernetes/deployment.yaml", "readinessProbe:", "readinesProbe:");
  edit("kubernetes/service.yaml", "targetPort: http", "targetPort: [http]");
  edit("kubernetes/podmonitor.yaml", "podMetricsEndpoints:", "podMetricEndpoints:");
  edit("kubernetes/hpa.yaml", "apiVersion: autoscaling/v2", "apiVersion: autoscaling/v9");
  const auto files = test::deploy_files(dir.path());
  if (!files) return;
  REQUIRE(files->at("manifests").size() == expected.size());
  for (const json& m : files->at("manifests")) {
    const std::string file = m["file"], errors = m["errors"].dump();
    CAPTURE(file);
    CAPTURE(errors);
    REQUIRE(expected.count(file) == 1);
    for (const std::string& e : expected.at(file)) CHECK(errors.find(e) != std::string::npos);
  }
}

TEST_CASE("deploy/: the manifests agree with each other and with the Dockerfile") {
  const auto files = test::deploy_files(test::source_dir() / "deploy");
  if (!files) return;
  const json& deployment = test::manifest(*files, "Deployment");
  const json& service = test::manifest(*files, "Service");
  const json& monitor = test::manifest(*files, "PodMonitor");
  const json& hpa = test::manifest(*files, "HorizontalPodAutoscaler");
  const json& pod = deployment.at("spec").at("template");
  const json& labels = pod.at("metadata").at("labels");
  REQUIRE(pod.at("spec").at("containers").size() == 1);
  const json& container = pod["spec"]["containers"][0];
  const std::vector<std::string> args = container.at("args");

  // The image's runtime stage: `gpt2vk serve` with its port, the model's folder, the user.
  const json& runtime = files->at("dockerfile").at("stages").back();
  const json* entry = test::instruction(runtime, "ENTRYPOINT");
  REQUIRE(entry);
  REQUIRE((*entry)["json"].is_array());
  const std::vector<std::string> entrypoint = (*entry)["json"];
  const std::string port_text = test::flag_value(entrypoint, "--port");
  REQUIRE(!port_text.empty());
  const int port = std::stoi(port_text);

  // The Deployment, the Service and the PodMonitor select the pods; the autoscaler scales the
  // Deployment.
  CHECK(selects(deployment["spec"]["selector"]["matchLabels"], labels));
  CHECK(selects(service["spec"]["selector"], labels));
  CHECK(selects(monitor["spec"]["selector"]["matchLabels"], labels));
  CHECK(hpa["spec"]["scaleTargetRef"] == json{{"apiVersion", "apps/v1"},
                                              {"kind", "Deployment"},
                                              {"name", deployment["metadata"]["name"]}});

  // One port: the server's, the image's EXPOSE, the container's, the Service's target, the
  // probes', the scrapes'. /health for the probes, /metrics for the scrapes.
  const json* expose = test::instruction(runtime, "EXPOSE");
  REQUIRE(expose);
  CHECK((*expose)["args"] == json::array({port_text}));
  REQUIRE(container.at("ports").size() == 1);
  CHECK(container["ports"][0]["containerPort"] == port);
  REQUIRE(service["spec"]["ports"].size() == 1);
  CHECK(port_number(container, service["spec"]["ports"][0]["targetPort"]) == port);
  for (const char* probe : {"readinessProbe", "livenessProbe", "startupProbe"}) {
    CAPTURE(probe);
    const json& get = container.at(probe).at("httpGet");
    CHECK(get["path"] == "/health");
    CHECK(port_number(container, get["port"]) == port);
  }
  REQUIRE(monitor["spec"]["podMetricsEndpoints"].size() == 1);
  const json& endpoint = monitor["spec"]["podMetricsEndpoints"][0];
  CHECK(endpoint["path"] == "/metrics");
  CHECK(port_number(container, endpoint["port"]) == port);
  const json& annotations = pod["metadata"]["annotations"];
  CHECK(annotations["prometheus.io/port"] == port_text);
  CHECK(annotations["prometheus.io/path"] == "/metrics");

  // The Dockerfile's user, not root, is the pod's.
  const json* user = test::instruction(runtime, "USER");
  REQUIRE(user);
  const std::string user_group = (*user)["args"][0];
  const std::string uid = user_group.substr(0, user_group.find(':'));
  CHECK(uid != "0");
  CHECK(uid != "root");
  CHECK(pod["spec"]["securityContext"]["runAsNonRoot"] == true);
  CHECK(std::to_string(pod["spec"]["securityContext"]["runAsUser"].get<int>()) == uid);

  // The model folder the entrypoint reads is a read-only mount; the caches' folder (the image's
  // XDG_CACHE_HOME) a writable one, the root filesystem being read-only.
  std::string cache;
  for (const json& env : runtime["instructions"])
    if (env["keyword"] == "ENV" &&
        env["args"][0].get<std::string>().rfind("XDG_CACHE_HOME=", 0) == 0)
      cache = env["args"][0].get<std::string>().substr(15);
  CHECK(container["securityContext"]["readOnlyRootFilesystem"] == true);
  const std::string models = test::flag_value(entrypoint, "-m");
  bool models_mounted = false, cache_mounted = false;
  for (const json& mount : container.at("volumeMounts")) {
    if (mount["mountPath"] == models) models_mounted = mount.value("readOnly", false);
    if (mount["mountPath"] == cache) cache_mounted = !mount.value("readOnly", false);
  }
  CHECK_MESSAGE(models_mounted, "no read-only mount at the entrypoint's -m " << models);
  CHECK_MESSAGE(cache_mounted, "no writable mount at XDG_CACHE_HOME '" << cache << "'");

  // The drain fits the grace period: preStop's sleep, then SIGTERM and at most --drain-timeout
  // of requests finishing, before the kubelet's kill. The Deployment's arguments replace the
  // image's CMD, so they carry the drain themselves, the same as the CMD's; liveness gives up
  // only after a whole drain (a draining server's /health says 503).
  const std::string drain_text = test::flag_value(args, "--drain-timeout");
  REQUIRE_MESSAGE(!drain_text.empty(), "the Deployment's args have no --drain-timeout");
  const int drain = std::stoi(drain_text);
  const json* cmd = test::instruction(runtime, "CMD");
  REQUIRE(cmd);
  CHECK(test::flag_value((*cmd)["json"].get<std::vector<std::string>>(), "--drain-timeout") ==
        drain_text);
  const json& command = container.at("lifecycle").at("preStop").at("exec").at("command");
  REQUIRE(command.size() == 2);
  CHECK(command[0] == "sleep");
  const int sleep = std::stoi(command[1].get<std::string>());
  const int grace = pod["spec"].at("terminationGracePeriodSeconds");
  CHECK(grace > sleep + drain);
  const json& live = container["livenessProbe"];
  CHECK(live.at("periodSeconds").get<int>() * live.at("failureThreshold").get<int>() > drain);

  // The autoscaler's metric is a pod's, served by prometheus-adapter under the name its rule
  // gives it, from the series of the same name.
  REQUIRE(hpa["spec"]["metrics"].size() == 1);
  const json& metric = hpa["spec"]["metrics"][0];
  CHECK(metric["type"] == "Pods");
  CHECK(metric["pods"]["target"]["type"] == "AverageValue");
  const std::string name = metric["pods"]["metric"]["name"];
  const json& rules = files->at("adapter").at("rules").at("custom");
  REQUIRE(rules.size() == 1);
  CHECK(rules[0]["name"]["as"] == name);
  CHECK(rules[0]["seriesQuery"].get<std::string>().rfind(name + "{", 0) == 0);
}
