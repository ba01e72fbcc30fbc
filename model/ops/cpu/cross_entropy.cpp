#include "model/ops/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/ops/cpu/common.h"
#include "model/ops/types.h"

namespace model::cpu {

double cross_entropy(float* dlogits, const float* logits, const int32_t* targets, size_t N,
                     size_t V) {
  size_t n = 0;  // the rows with a target
  for (size_t r = 0; r < N; r++) n += targets[r] != ignore_target;
  double loss = 0;
  for (size_t r = 0; r < N; r++) {
    if (targets[r] == ignore_target) {
      std::fill_n(dlogits + r * V, V, 0.0f);
      continue;
    }
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
      dlogits[r * V + v] =
          narrow((std::exp(wide(l[v]) - lse) - (v == size_t(targets[r]) ? 1.0 : 0.0)) /
                 static_cast<double>(n));
  }
  return n ? loss / static_cast<double>(n) : 0.0;
}

}  // namespace model::cpu
