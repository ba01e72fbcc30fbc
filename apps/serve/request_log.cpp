#include "apps/serve/request_log.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "model/text/utf8.h"

namespace app {

std::optional<double> CompletionFigures::tokens_per_s() const {
  if (completion_tokens < 2 || !ttft_ms || total_ms <= *ttft_ms) return std::nullopt;
  return double(completion_tokens - 1) / ((total_ms - *ttft_ms) / 1000);
}

namespace {

// To a tenth: what a log needs of a millisecond or a rate.
double tenth(double x) { return std::round(x * 10) / 10; }

// One word of a text line: valid UTF-8, and nothing that ends the word or the line ("-" for
// nothing: a request line that did not parse).
std::string word(const std::string& bytes) {
  if (bytes.empty()) return "-";
  std::string out;
  for (const char c : model::sanitize_utf8(bytes)) {
    const auto ch = static_cast<unsigned char>(c);
    if (ch <= ' ' || ch == 0x7f || ch == '%') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", ch);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

std::string remote(const RequestRecord& r) {
  if (r.remote_addr.empty()) return "-";
  const bool v6 = r.remote_addr.find(':') != std::string::npos;
  return (v6 ? "[" + r.remote_addr + "]" : r.remote_addr) + ":" + std::to_string(r.remote_port);
}

std::string iso8601(std::chrono::system_clock::time_point now) {
  using std::chrono::milliseconds;
  const auto ms = std::chrono::duration_cast<milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return buf;
}

// The figures as (name, value) pairs in the order both formats write them.
nlohmann::ordered_json figures(const RequestRecord& r) {
  nlohmann::ordered_json f = nlohmann::ordered_json::object();
  if (const auto& c = r.completion) {
    f["prompt_tokens"] = c->prompt_tokens;
    f["completion_tokens"] = c->completion_tokens;
    if (c->queue_ms) f["queue_ms"] = tenth(*c->queue_ms);
    if (c->ttft_ms) f["ttft_ms"] = tenth(*c->ttft_ms);
    f["total_ms"] = tenth(c->total_ms);
    if (const auto rate = c->tokens_per_s()) f["tokens_per_s"] = tenth(*rate);
    f["finish_reason"] = c->finish_reason;
  }
  if (const auto& e = r.embeddings) {
    f["inputs"] = e->inputs;
    f["tokens"] = e->tokens;
  }
  return f;
}

}  // namespace

std::string request_line(const RequestRecord& r, LogFormat format,
                         std::chrono::system_clock::time_point now) {
  const nlohmann::ordered_json f = figures(r);
  if (format == LogFormat::Json) {
    nlohmann::ordered_json j = {{"ts", iso8601(now)},
                                {"method", model::sanitize_utf8(r.method)},
                                {"path", model::sanitize_utf8(r.path)},
                                {"status", r.status},
                                {"remote", remote(r)}};
    j.update(f);
    return j.dump();
  }
  std::string line = "gpt2vk: " + word(r.method) + " " + word(r.path) + " " +
                     std::to_string(r.status) + " remote=" + remote(r);
  for (const auto& [name, value] : f.items())
    line += " " + name + "=" + (value.is_string() ? word(value.get<std::string>()) : value.dump());
  return line;
}

}  // namespace app
