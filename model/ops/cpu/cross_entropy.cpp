#include "model/ops/cpu/cross_entropy.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "model/ops/cpu/common.h"

namespace model::cpu {

double cross_entropy(float* dlogits, const float* logits, const int32_t* targets, size_t N,
                     size_t V) {
  double loss = 0;
  for (size_t r = 0; r < N; r++) {
    if (targets[r] < 0 || size_t(targets[r]) >= V)
      throw std::out_of_range("cross_entropy: target " + std::to_string(targets[r]) +
                              " outside the vocabulary of " + std::to_string(V));
    const float* l = logits + r * V;
    double mx = -INFINITY;
    for (size_t v = 0; v < V; v++) mx = std::max(mx, wide(l[v]));
    double sum = 0;
    for (size_t v = 0; v < V; v++) sum += std::exp(wide(l[v]) - mx);
    const double lse = mx + std::log(sum);
    loss += lse - wide(l[targets[r]]);
    for (size_t v = 0; v < V; v++)
      dlogits[r * V + v] = narrow((std::exp(wide(l[v]) - lse) - (v == size_t(targets[r]) ? 1.0 : 0.0)) /
                             static_cast<double>(N));
  }
  return loss / static_cast<double>(N);
}

}  // namespace model::cpu
