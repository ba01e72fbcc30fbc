// gpt2vk bench's output: llama-bench's table and JSON, and --profile's tables of GPU time per op
// kind and of the recorder's counters.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/bench.h"
#include "model/formats/checkpoint.h"

namespace app::bench {
namespace {

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string human_bytes(uint64_t b) {
  const auto d = static_cast<double>(b);
  return d >= 1024.0 * 1024 * 1024 ? format("%.2f GiB", d / (1024.0 * 1024 * 1024))
                                   : format("%.2f MiB", d / (1024.0 * 1024));
}

std::string human_count(uint64_t n) {
  const auto d = static_cast<double>(n);
  return d >= 1e9   ? format("%.2f B", d / 1e9)
         : d >= 1e6 ? format("%.2f M", d / 1e6)
                    : format("%.2f K", d / 1e3);
}

// Display width: '±' is two bytes and one column.
size_t columns(const std::string& x) {
  size_t n = 0;
  for (char ch : x) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// A Markdown table, as llama-bench prints: text left-aligned, numbers (right[i]) right-aligned.
void print_markdown(FILE* out, const std::vector<std::string>& head, const std::vector<bool>& right,
                    const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(head.size());
  for (size_t i = 0; i < head.size(); i++) {
    width[i] = columns(head[i]);
    for (const auto& r : rows) width[i] = std::max(width[i], columns(r[i]));
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string text = "|";
    for (size_t i = 0; i < r.size(); i++) {
      const std::string pad(width[i] - columns(r[i]), ' ');
      text += " " + (right[i] ? pad + r[i] : r[i] + pad) + " |";
    }
    std::fprintf(out, "%s\n", text.c_str());
  };
  line(head);
  std::string rule = "|";
  for (size_t i = 0; i < head.size(); i++)
    rule += right[i] ? " " + std::string(width[i] - 1, '-') + ": |"
                     : " " + std::string(width[i], '-') + " |";
  std::fprintf(out, "%s\n", rule.c_str());
  for (const auto& r : rows) line(r);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      out += format("\\u%04.0f", u);  // control characters; everything else is UTF-8 as is
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The sample standard deviation (n - 1), as llama-bench reports it; 0 for one run.
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}
// Bytes of the weights as the model holds them: matrices at the chosen precision, LayerNorm
// parameters and biases in fp32 (as model/forward/gpu_model.cpp uploads them).
uint64_t weight_bytes(const model::Config& c, model::Precision p) {
  uint64_t bytes = 0;
  for (const model::ExpectedTensor& e : model::expected_tensors(c))
    bytes += e.elements() * (e.shape.size() == 2 && p == model::Precision::F16 ? 2 : 4);
  return bytes;
}

std::string folder_name(std::filesystem::path dir) {
  dir = dir.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  return dir.filename().string();
}
void print_table(const Subject& s, const std::vector<Test>& tests) {
  std::vector<std::vector<std::string>> rows;
  for (const Test& t : tests)
    rows.push_back({s.model, human_bytes(s.size), human_count(s.params), s.backend, s.device,
                    s.precision + (s.kv_cache == "f32" ? "" : ", KV " + s.kv_cache), t.name,
                    format("%.2f", mean(t.samples)) + " ± " + format("%.2f", stddev(t.samples))});
  print_markdown(stdout,
                 {"model", "size", "params", "backend", "device", "precision", "test", "t/s"},
                 {false, true, true, false, false, false, true, true}, rows);
}
// One object per test, the field names of llama-bench's JSON where it has them.
void print_json(const Subject& s, const std::vector<Test>& tests) {
  std::printf("[\n");
  for (size_t i = 0; i < tests.size(); i++) {
    const Test& t = tests[i];
    std::string samples;
    for (size_t k = 0; k < t.samples.size(); k++)
      samples += (k ? ", " : "") + format("%.6g", t.samples[k]);
    std::printf(
        "  {\"model\": %s, \"backend\": %s, \"device\": %s, \"precision\": %s, "
        "\"kv_cache\": %s, \"size\": %llu, \"params\": %llu, \"test\": %s, \"n_prompt\": %u, "
        "\"n_gen\": %u, \"avg_ts\": %.6g, "
        "\"stddev_ts\": %.6g, \"samples_ts\": [%s]}%s\n",
        json_string(s.model).c_str(), json_string(s.backend).c_str(), json_string(s.device).c_str(),
        json_string(s.precision).c_str(), json_string(s.kv_cache).c_str(),
        static_cast<unsigned long long>(s.size), static_cast<unsigned long long>(s.params),
        json_string(t.name).c_str(), t.n_prompt, t.n_gen, mean(t.samples), stddev(t.samples),
        samples.c_str(), i + 1 < tests.size() ? "," : "");
  }
  std::printf("]\n");
}

void Profile::add(const std::vector<vk::DispatchTime>& timings, const vk::RecorderStats& st,
                  double seconds) {
  std::map<std::string, double> longest;
  for (const vk::DispatchTime& d : timings) {
    ops[d.shader].ms += d.ms;
    ops[d.shader].dispatches++;
    // The embedding binds the whole table and gathers T rows of it, and attention binds the
    // whole caches and reads the rows up to the position it reads at run time: their bindings
    // say nothing about what they read, so they count no bytes.
    if (d.shader.rfind("embedding", 0) != 0 && d.shader.rfind("attention", 0) != 0)
      ops[d.shader].read_bytes += d.read_bytes;
    ops[d.shader].flops += d.flops;
    longest[d.shader] = std::max(longest[d.shader], d.ms);
  }
  for (const auto& [name, ms] : longest) ops[name].longest += ms;
  stats += st;
  passes++;
  wall_s += seconds;
}

void print_profile(FILE* out, const std::string& title, const Profile& p, const std::string& unit,
                   double bandwidth) {
  const double n = p.passes;
  std::vector<std::pair<std::string, Profile::Op>> ops(p.ops.begin(), p.ops.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0, bytes = 0, flops = 0;
  for (const auto& [name, op] : ops) {
    total += op.ms;
    bytes += static_cast<double>(op.read_bytes);
    flops += op.flops;
  }
  // GB/s reached, and its fraction of `bandwidth`.
  const auto reached = [&](double b, double ms) {
    const double gbs = ms > 0 ? b / (ms * 1e-3) / 1e9 : 0;
    return std::vector<std::string>{format("%.3f", b / n / 1e6), format("%.3g", gbs),
                                    bandwidth > 0 ? format("%.1f%%", 100 * gbs / bandwidth) : "-"};
  };
  // GFLOP per unit and GFLOP/s reached, where the ops counted their arithmetic.
  const auto computed = [&](double f, double ms) {
    if (f <= 0) return std::vector<std::string>{"-", "-"};
    return std::vector<std::string>{format("%.4g", f / n / 1e9),
                                    format("%.4g", ms > 0 ? f / (ms * 1e-3) / 1e9 : 0)};
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, op] : ops) {
    rows.push_back({name, format("%.4g", op.dispatches / n), format("%.3f", op.ms / n),
                    format("%.1f%%", total > 0 ? 100 * op.ms / total : 0),
                    format("%.3f", op.longest / n)});
    for (std::string& s : reached(static_cast<double>(op.read_bytes), op.ms))
      rows.back().push_back(s);
    for (std::string& s : computed(op.flops, op.ms)) rows.back().push_back(s);
  }
  rows.push_back({"all (GPU)", format("%.4g", p.stats.dispatches / n), format("%.3f", total / n),
                  "100.0%", ""});
  for (std::string& s : reached(bytes, total)) rows.back().push_back(s);
  for (std::string& s : computed(flops, total)) rows.back().push_back(s);
  rows.push_back(
      {"wall, timestamps on", "", format("%.3f", 1e3 * p.wall_s / n), "", "", "", "", "", "", ""});
  std::fprintf(out, "\n%s\n\n", title.c_str());
  print_markdown(out,
                 {"op kind", "dispatches/" + unit, "ms/" + unit, "share", "longest ms",
                  "MB read/" + unit, "GB/s", "of bandwidth", "GFLOP/" + unit, "GFLOP/s"},
                 {false, true, true, true, true, true, true, true, true, true}, rows);
  const vk::RecorderStats& st = p.stats;
  std::fprintf(out, "\n");
  print_markdown(out, {"counter", "per " + unit}, {false, true},
                 {{"submits", format("%.4g", st.submits / n)},
                  {"fence waits", format("%.4g", st.waits / n)},
                  {"replays of a recording", format("%.4g", st.replays / n)},
                  {"commands recorded", format("%.4g", st.commands / n)},
                  {"descriptor writes", format("%.4g", st.descriptor_writes / n)},
                  {"pipeline binds recorded", format("%.4g", st.pipeline_binds / n)},
                  {"barriers recorded", format("%.4g", st.barriers / n)},
                  {"dispatches run", format("%.4g", st.dispatches / n)}});
}
}  // namespace app::bench
