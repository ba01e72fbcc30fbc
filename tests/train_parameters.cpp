#include "tests/train_parameters.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/compare.h"

namespace test {

model::training::Parameters random_parameters(const model::Config& config, unsigned seed) {
  model::training::Parameters p(config);
  p.init_gpt2(seed);
  for (const model::ExpectedTensor& e : p.tensors()) {
    std::vector<float>& v = p.tensor(e.name);
    const std::vector<float> noise = random_floats(v.size(), ++seed, -0.2f, 0.2f);
    for (size_t i = 0; i < v.size(); i++) v[i] += noise[i];
  }
  return p;
}

void check_step_gradients(const std::string& what, model::training::Parameters& params,
                          const model::training::Parameters& grads,
                          const std::function<double()>& loss) {
  double peak = 0;
  for (const model::ExpectedTensor& e : grads.tensors())
    for (float g : grads.tensor(e.name)) peak = std::max(peak, std::abs(double(g)));
  for (const model::ExpectedTensor& e : params.tensors()) {
    std::vector<float>& v = params.tensor(e.name);
    const std::vector<float>& g = grads.tensor(e.name);
    std::vector<float> numeric, analytic;
    for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / 6)) {
      const float x0 = v[i], h = 1e-3f, up = x0 + h, down = x0 - h;
      v[i] = up;
      const double l_up = loss();
      v[i] = down;
      const double l_down = loss();
      v[i] = x0;
      numeric.push_back(float((l_up - l_down) / (double(up) - double(down))));
      analytic.push_back(g[i]);
    }
    CHECK(close(what + ": d loss / d " + e.name, analytic, numeric, {2e-3 * peak, 2e-2}));
  }
}

}  // namespace test
