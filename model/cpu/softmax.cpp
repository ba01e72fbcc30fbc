#include "model/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cpu {

void softmax(float* out, const float* x, size_t R, size_t N, float inv_temperature) {
  const auto t = static_cast<double>(inv_temperature);
  std::vector<double> e(N);
  for (size_t r = 0; r < R; r++) {
    const float* row = x + r * N;
    const auto m = static_cast<double>(*std::max_element(row, row + N));
    double sum = 0;
    for (size_t i = 0; i < N; i++) sum += e[i] = std::exp((static_cast<double>(row[i]) - m) * t);
    for (size_t i = 0; i < N; i++) out[r * N + i] = static_cast<float>(e[i] / sum);
  }
}

}  // namespace cpu
