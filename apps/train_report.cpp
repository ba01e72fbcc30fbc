#include "apps/train_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

namespace app {

namespace fs = std::filesystem;

void write_plot(const fs::path& file, const std::vector<std::pair<uint64_t, double>>& train,
                const std::vector<std::pair<uint64_t, double>>& val) {
  if (train.empty()) return;
  double lo = train[0].second, hi = lo;
  uint64_t last = train.back().first;
  for (const auto& series : {train, val})
    for (const auto& [s, l] : series) lo = std::min(lo, l), hi = std::max(hi, l), last = std::max(last, s);
  if (hi - lo < 1e-9) hi = lo + 1;
  const double W = 640, H = 360, m = 48;
  const auto x = [&](uint64_t s) { return m + (W - 2 * m) * double(s) / double(std::max<uint64_t>(last, 1)); };
  const auto y = [&](double l) { return H - m - (H - 2 * m) * (l - lo) / (hi - lo); };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<line x1=\"" << m << "\" y1=\"" << H - m << "\" x2=\"" << W - m << "\" y2=\"" << H - m << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << m << "\" y1=\"" << m << "\" x2=\"" << m << "\" y2=\"" << H - m << "\" stroke=\"black\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">step (0 .. " << last << ")</text>\n"
      << "<text x=\"6\" y=\"" << m - 8 << "\">loss " << hi << "</text>\n<text x=\"6\" y=\"" << H - m + 16 << "\">" << lo << "</text>\n";
  const auto line = [&](const std::vector<std::pair<uint64_t, double>>& s, const char* color, const char* name, int row) {
    if (s.empty()) return;
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (const auto& [step, l] : s) svg << x(step) << "," << y(l) << " ";
    svg << "\"/>\n<text x=\"" << W - m - 120 << "\" y=\"" << m + 16 * row << "\" fill=\"" << color << "\">" << name << "</text>\n";
  };
  line(train, "#1f77b4", "training loss", 0);
  line(val, "#d62728", "validation loss", 1);
  svg << "</svg>\n";
  // Under another name first, so that a kill never leaves half a picture.
  const fs::path tmp = file.parent_path() / ("." + file.filename().string() + ".tmp");
  std::ofstream(tmp, std::ios::trunc) << svg.str();
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec)
    std::fprintf(stderr, "gpt2vk: %s: cannot write it: %s\n", file.c_str(), ec.message().c_str());
}

void print_profile(const model::training::GpuTrainer& trainer) {
  std::map<std::string, std::pair<double, int>> by_op;
  double total = 0;
  for (const vk::DispatchTime& d : trainer.timings()) {
    by_op[d.shader].first += d.ms;
    by_op[d.shader].second++;
    total += d.ms;
  }
  if (by_op.empty()) {
    std::fprintf(stderr, "gpt2vk: --profile: this device's queue has no timestamps\n");
    return;
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [op, t] : by_op) rows.emplace_back(t.first, op);
  std::sort(rows.rbegin(), rows.rend());
  std::printf("| op (last step) | dispatches | ms | share |\n| --- | ---: | ---: | ---: |\n");
  for (const auto& [ms, op] : rows)
    std::printf("| %s | %d | %.3f | %.1f%% |\n", op.c_str(), by_op[op].second, ms, 100 * ms / total);
  std::printf("| all | | %.3f | 100%% |\n", total);
  const size_t timed = trainer.timings().size();
  if (timed < trainer.dispatches())
    std::printf("(timestamps ran out: the table covers the first %zu of the step's %llu dispatches)\n",
                timed, static_cast<unsigned long long>(trainer.dispatches()));
}

std::string bytes_text(uint64_t bytes) {
  char s[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(s, sizeof s, "%.2f GiB", b / 1073741824.0);
  else if (bytes >= (uint64_t{1} << 20)) std::snprintf(s, sizeof s, "%.1f MiB", b / 1048576.0);
  else std::snprintf(s, sizeof s, "%.1f KiB", b / 1024.0);
  return s;
}

std::string memory_text(const model::training::GpuTrainer& trainer, const vk::Device& device) {
  const model::training::GpuTrainer::Memory m = trainer.memory();
  return "peak device memory " + bytes_text(device.peak_allocated()) + ": activations " +
         bytes_text(m.activations) +
         (trainer.recomputes() ? " (each block's input and one block's, recomputed)"
                               : " (every block's)") +
         ", weights " + bytes_text(m.weights) + ", gradients " + bytes_text(m.gradients) +
         ", AdamW moments " + bytes_text(m.moments) +
         (m.packed ? ", interleaved weights " + bytes_text(m.packed) : std::string()) +
         ", ids and losses " + bytes_text(m.io);
}

void print_bench(std::vector<double> step_s, uint32_t M, uint32_t B, uint32_t T,
                 uint64_t parameters, const std::string& device, const std::string& memory) {
  const size_t skip = step_s.size() > 1 ? 1 : 0;  // one step only after a SIGINT
  std::vector<double> timed(step_s.begin() + static_cast<std::ptrdiff_t>(skip), step_s.end());
  std::sort(timed.begin(), timed.end());
  const size_t n = timed.size();
  const double median = n % 2 ? timed[n / 2] : (timed[n / 2 - 1] + timed[n / 2]) / 2;
  const std::string micro = M > 1 ? std::to_string(M) + " x " : "";
  std::printf("train: %llu parameters, %s%u x %u tokens per step on %s: %.0f tokens/s "
              "(%.1f ms per step, the median of %zu step%s%s); %s\n",
              static_cast<unsigned long long>(parameters), micro.c_str(), B, T, device.c_str(),
              double(M) * B * T / median,
              median * 1000, n, n == 1 ? "" : "s", skip ? " after the first" : "", memory.c_str());
}

}  // namespace app
