// The CPU references of training's backward ops (issue 17) against central differences of their
// forward references: for a loss L = sum(out * w) with fixed random w (w is the dout the backward
// gets), dL/dx_i ~ (L(x_i + h) - L(x_i - h)) / (2h), at up to 48 elements of each input.
// Tolerance: |numeric - analytic| <= 2e-3 * max(1, max|analytic|) + 2e-3 |analytic|. The forward
// references round their outputs to float (relative 6e-8 each), which over the sum and the
// quotient's 2h = 0.02 gives errors near 1e-4; the central difference's own error is O(h^2 f''')
// ~1e-4 at these magnitudes. A wrong term in a gradient (a missing mean, a transposed index)
// errs by O(1).
//
// The optimizers have no backward: they are checked against torch.optim.AdamW's and SGD's update
// written out for the first two steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/ops/cpu/activation.h"
#include "model/ops/cpu/attention.h"
#include "model/ops/cpu/cross_entropy.h"
#include "model/ops/cpu/embedding.h"
#include "model/ops/cpu/layernorm.h"
#include "model/ops/cpu/matmul.h"
#include "model/ops/cpu/optimizer.h"
#include "model/ops/types.h"
#include "tests/compare.h"

namespace {

using Floats = std::vector<float>;

// sum(out * w) in double.
double dot(std::span<const float> out, std::span<const float> w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += double(out[i]) * double(w[i]);
  return s;
}

// Checks grad, the analytic gradient of loss at x, by central differences at up to 48 evenly
// spread elements. x is perturbed in place and restored.
void check_grad(const std::string& what, Floats& x, const Floats& grad,
                const std::function<double()>& loss, float h = 1e-2f) {
  REQUIRE(x.size() == grad.size());
  const size_t step = std::max<size_t>(1, x.size() / 48);
  Floats numeric, analytic;
  double scale = 1.0;
  for (float g : grad) scale = std::max(scale, std::abs(double(g)));
  for (size_t i = 0; i < x.size(); i += step) {
    const float x0 = x[i], up = x0 + h, down = x0 - h;
    x[i] = up;
    const double l_up = loss();
    x[i] = down;
    const double l_down = loss();
    x[i] = x0;
    // The step the floats actually took, not 2h.
    numeric.push_back(float((l_up - l_down) / (double(up) - double(down))));
    analytic.push_back(grad[i]);
  }
  CHECK(test::close(what, analytic, numeric, {2e-3 * scale, 2e-3}));
}

}  // namespace

TEST_CASE("layernorm_backward against central differences") {
  for (model::LayerNormKind kind : {model::LayerNormKind::Standard,
                                    model::LayerNormKind::StdPlusEps, model::LayerNormKind::Rms}) {
    const bool rms = kind == model::LayerNormKind::Rms;  // no beta: null, and no dbeta
    const size_t T = 3, C = 17;
    Floats x = test::random_floats(T * C, 10, -2, 2), gamma = test::random_floats(C, 11, 0.5f, 1.5f),
           beta = test::random_floats(C, 12), w = test::random_floats(T * C, 13);
    Floats dx(T * C), dgamma(C, 0.0f), dbeta(C, 0.0f), out(T * C);
    float* db = rms ? nullptr : dbeta.data();
    model::cpu::layernorm_backward(dx.data(), dgamma.data(), db, w.data(), x.data(),
                                   gamma.data(), T, C, 1e-5f, kind);
    const auto loss = [&] {
      model::cpu::layernorm(out.data(), x.data(), gamma.data(), rms ? nullptr : beta.data(), T, C,
                            1e-5f, kind);
      return dot(out, w);
    };
    const std::string k = kind == model::LayerNormKind::Standard ? "standard"
                          : rms                                  ? "rms"
                                                                 : "std + eps";
    check_grad("layernorm " + k + ": dx", x, dx, loss);
    check_grad("layernorm " + k + ": dgamma", gamma, dgamma, loss);
    if (!rms) check_grad("layernorm " + k + ": dbeta", beta, dbeta, loss);
    // dgamma and dbeta accumulate: a second call adds the same again.
    Floats again = dgamma;
    model::cpu::layernorm_backward(dx.data(), again.data(), db, w.data(), x.data(),
                                   gamma.data(), T, C, 1e-5f, kind);
    for (size_t c = 0; c < C; c++) CHECK(again[c] == doctest::Approx(2 * dgamma[c]).epsilon(1e-6));
  }
}

TEST_CASE("matmul_backward against central differences, both layouts, with and without bias") {
  for (model::WeightLayout layout : {model::WeightLayout::KN, model::WeightLayout::NK})
    for (bool with_bias : {true, false}) {
      const size_t T = 3, K = 7, N = 5;
      Floats x = test::random_floats(T * K, 20), wt = test::random_floats(K * N, 21),
             bias = test::random_floats(N, 22), w = test::random_floats(T * N, 23);
      Floats dx(T * K), dwt(K * N, 0.0f), dbias(N, 0.0f), out(T * N);
      model::cpu::matmul_backward(dx.data(), dwt.data(), with_bias ? dbias.data() : nullptr,
                                  w.data(), x.data(), wt.data(), T, K, N, layout);
      const auto loss = [&] {
        model::cpu::matmul(out.data(), x.data(), wt.data(), with_bias ? bias.data() : nullptr,
                           nullptr, T, K, N, layout);
        return dot(out, w);
      };
      const std::string what = std::string(layout == model::WeightLayout::KN ? "KN" : "NK") +
                               (with_bias ? " with bias" : " without bias");
      check_grad("matmul " + what + ": dx", x, dx, loss);
      check_grad("matmul " + what + ": dw", wt, dwt, loss);
      if (with_bias) check_grad("matmul " + what + ": dbias", bias, dbias, loss);
    }
  Floats a(4), b(4);
  CHECK_THROWS_AS(model::cpu::matmul_backward(a.data(), b.data(), nullptr, a.data(), a.data(),
                                              b.data(), 2, 2, 2, model::WeightLayout::Interleaved),
                  std::invalid_argument);
}

TEST_CASE("activation_backward against central differences") {
  for (model::Activation kind : {model::Activation::GeluTanh, model::Activation::GeluErf,
                                 model::Activation::Relu, model::Activation::Silu,
                                 model::Activation::None}) {
    const size_t n = 40;
    Floats x = test::random_floats(n, 30, -4, 4), w = test::random_floats(n, 31), dx(n), out(n);
    // ReLU's kink: keep every x at least 0.05 from it (h = 0.01).
    for (float& v : x) v = v < 0 ? std::min(v, -0.05f) : std::max(v, 0.05f);
    model::cpu::activation_backward(dx.data(), w.data(), x.data(), n, kind);
    check_grad("activation " + std::to_string(int(kind)), x, dx, [&] {
      model::cpu::activation(out.data(), x.data(), n, kind);
      return dot(out, w);
    });
  }
}

TEST_CASE("attention_backward against central differences") {
  // B = 2 sequences of T = 5 tokens, C = 12 in H = 3 heads (D = 4); causal and bidirectional, the
  // default scale and a given one.
  const uint32_t B = 2, T = 5, C = 12, H = 3;
  const model::SequenceRows rows = model::self_attention_rows(B, T, C, H);
  for (const model::AttentionSpec spec :
       {model::AttentionSpec{true, 0}, model::AttentionSpec{false, 0}, model::AttentionSpec{true, 0.7f}}) {
    Floats qkv = test::random_floats(size_t{B} * T * 3 * C, 40, -1.5f, 1.5f),
           w = test::random_floats(size_t{B} * T * C, 41), dqkv(qkv.size()), out(size_t{B} * T * C);
    model::cpu::attention_backward(dqkv.data(), dqkv.data(), dqkv.data(), w.data(), qkv.data(),
                                   qkv.data(), qkv.data(), rows, spec);
    const auto loss = [&] {
      model::cpu::attention_sequences(out.data(), qkv.data(), qkv.data(), qkv.data(), rows, spec);
      return dot(out, w);
    };
    check_grad(std::string(spec.causal ? "causal" : "bidirectional") + " attention, scale " +
                   std::to_string(spec.scale) + ": dqkv",
               qkv, dqkv, loss);
  }
}

TEST_CASE("cross-attention's backward against central differences") {
  // B = 2 sequences of T = 4 queries over S = 6 source rows each, C = 12 in H = 3 heads; q, k and
  // v in three tensors, with rows wider than C (k and v side by side in one, as strides allow).
  const uint32_t B = 2, T = 4, S = 6, C = 12, H = 3;
  for (const bool packed : {false, true}) {
    model::SequenceRows rows = model::cross_attention_rows(B, T, S, C, H);
    if (packed) rows.kv_stride = 2 * C, rows.v_col = C;  // k and v in one [B, S, 2C]
    Floats q = test::random_floats(size_t{B} * T * C, 42, -1.5f, 1.5f),
           kv = test::random_floats(size_t{B} * S * rows.kv_stride, 43, -1.5f, 1.5f),
           v2 = test::random_floats(size_t{B} * S * C, 44, -1.5f, 1.5f),
           w = test::random_floats(size_t{B} * T * C, 45), out(size_t{B} * T * C);
    Floats& v = packed ? kv : v2;
    Floats dq(q.size()), dkv(kv.size()), dv2(v2.size());
    Floats& dv = packed ? dkv : dv2;
    const model::AttentionSpec spec{false, 0};
    model::cpu::attention_backward(dq.data(), dkv.data(), dv.data(), w.data(), q.data(), kv.data(),
                                   v.data(), rows, spec);
    const auto loss = [&] {
      model::cpu::attention_sequences(out.data(), q.data(), kv.data(), v.data(), rows, spec);
      return dot(out, w);
    };
    const std::string what =
        packed ? "cross-attention, k and v in one tensor: " : "cross-attention: ";
    check_grad(what + "dq", q, dq, loss);
    check_grad(what + (packed ? "dk and dv" : "dk"), kv, dkv, loss);
    if (!packed) check_grad(what + "dv", v2, dv2, loss);
  }
  // Causal attention needs S = T.
  Floats x(1024);
  CHECK_THROWS_AS(model::cpu::attention_sequences(x.data(), x.data(), x.data(), x.data(),
                                                  model::cross_attention_rows(1, 2, 3, 4, 1)),
                  std::invalid_argument);
}

// A padded batch (key lengths, not causal): sequence b's queries see its first key_lens[b] keys.
// Bidirectional self-attention over B = 3 sequences of 6 tokens with 6, 3 and 1 real ones, and
// cross-attention over sources of 6 rows with 6 and 2 real ones. The padding keys get exact
// zeros, and the loss does not move with them (the central differences there are 0).
TEST_CASE("attention_backward over a padded batch against central differences") {
  const uint32_t C = 12, H = 3;
  const model::AttentionSpec spec{false, 0};
  {
    const uint32_t B = 3, T = 6, lens[B] = {6, 3, 1};
    const model::SequenceRows rows = model::self_attention_rows(B, T, C, H);
    Floats qkv = test::random_floats(size_t{B} * T * 3 * C, 46, -1.5f, 1.5f),
           w = test::random_floats(size_t{B} * T * C, 47), dqkv(qkv.size()), out(size_t{B} * T * C);
    model::cpu::attention_backward(dqkv.data(), dqkv.data(), dqkv.data(), w.data(), qkv.data(),
                                   qkv.data(), qkv.data(), rows, spec, lens);
    for (uint32_t b = 0; b < B; b++)
      for (uint32_t j = lens[b]; j < T; j++)
        for (uint32_t i = C; i < 3 * C; i++) CHECK(dqkv[(b * T + j) * 3 * C + i] == 0.0f);
    check_grad("padded bidirectional attention: dqkv", qkv, dqkv, [&] {
      model::cpu::attention_sequences(out.data(), qkv.data(), qkv.data(), qkv.data(), rows, spec,
                                      lens);
      return dot(out, w);
    });
  }
  {
    const uint32_t B = 2, T = 4, S = 6, lens[B] = {6, 2};
    const model::SequenceRows rows = model::cross_attention_rows(B, T, S, C, H);
    Floats q = test::random_floats(size_t{B} * T * C, 48, -1.5f, 1.5f),
           k = test::random_floats(size_t{B} * S * C, 49, -1.5f, 1.5f),
           v = test::random_floats(size_t{B} * S * C, 50, -1.5f, 1.5f),
           w = test::random_floats(size_t{B} * T * C, 51), out(size_t{B} * T * C);
    Floats dq(q.size()), dk(k.size()), dv(v.size());
    model::cpu::attention_backward(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(),
                                   v.data(), rows, spec, lens);
    for (size_t i = (S + 2) * C; i < dk.size(); i++) CHECK((dk[i] == 0.0f && dv[i] == 0.0f));
    const auto loss = [&] {
      model::cpu::attention_sequences(out.data(), q.data(), k.data(), v.data(), rows, spec, lens);
      return dot(out, w);
    };
    check_grad("padded cross-attention: dq", q, dq, loss);
    check_grad("padded cross-attention: dk", k, dk, loss);
    check_grad("padded cross-attention: dv", v, dv, loss);
    // What key lengths refuse: none (0), more than S, and causal attention.
    const uint32_t none[B] = {6, 0}, past[B] = {7, 1};
    for (const uint32_t* bad : {none, past})
      CHECK_THROWS_AS(model::cpu::attention_sequences(out.data(), q.data(), k.data(), v.data(),
                                                      rows, spec, bad),
                      std::invalid_argument);
    Floats qkv(size_t{B} * T * 3 * C);
    CHECK_THROWS_AS(
        model::cpu::attention_sequences(out.data(), qkv.data(), qkv.data(), qkv.data(),
                                        model::self_attention_rows(B, T, C, H), {true, 0}, lens),
        std::invalid_argument);
  }
}

TEST_CASE("embedding_backward against central differences, repeated ids") {
  const size_t B = 2, T = 4, C = 6, V = 5, n_pos = 8;
  const int32_t ids[B * T] = {3, 1, 3, 0, 4, 3, 1, 1};
  for (bool learned : {true, false}) {
    // With sinusoidal positions, wte's rows scaled as Marian's are (sqrt(C)).
    const float scale = learned ? 1.0f : std::sqrt(float(C));
    const auto position = learned ? model::PositionKind::Learned : model::PositionKind::Sinusoidal;
    Floats wte = test::random_floats(V * C, 50), wpe = test::random_floats(n_pos * C, 51),
           w = test::random_floats(B * T * C, 52), out(B * T * C);
    Floats dwte(V * C, 0.0f), dwpe(n_pos * C, 0.0f);
    model::cpu::embedding_backward(dwte.data(), learned ? dwpe.data() : nullptr, w.data(), ids, B,
                                   T, C, scale);
    const auto loss = [&] {
      for (size_t b = 0; b < B; b++)
        model::cpu::embedding(out.data() + b * T * C, ids + b * T, wte.data(), wpe.data(), T, C, V,
                              n_pos, 0, position, nullptr, nullptr, 0, scale);
      return dot(out, w);
    };
    const std::string what = learned ? "learned positions" : "sinusoidal positions";
    check_grad("embedding, " + what + ": dwte", wte, dwte, loss);
    if (learned) check_grad("embedding, " + what + ": dwpe", wpe, dwpe, loss);
    // Row 2 of wte is no token's: its gradient stays 0.
    for (size_t c = 0; c < C; c++) CHECK(dwte[2 * C + c] == 0.0f);
  }
}

TEST_CASE("cross_entropy: the mean loss and its gradient") {
  const size_t N = 4, V = 7;
  Floats logits = test::random_floats(N * V, 60, -3, 3), dlogits(N * V), scratch(N * V);
  const int32_t targets[N] = {0, 6, 3, 3};
  const double loss = model::cpu::cross_entropy(dlogits.data(), logits.data(), targets, N, V);
  // The loss, written out for row 0 and checked as a whole against a second evaluation.
  double expected = 0;
  for (size_t r = 0; r < N; r++) {
    double sum = 0;
    for (size_t v = 0; v < V; v++) sum += std::exp(double(logits[r * V + v]));
    expected += std::log(sum) - double(logits[r * V + size_t(targets[r])]);
  }
  CHECK(loss == doctest::Approx(expected / N).epsilon(1e-12));
  check_grad("cross_entropy: dlogits", logits, dlogits, [&] {
    return model::cpu::cross_entropy(scratch.data(), logits.data(), targets, N, V);
  });
  // Each row's gradient sums to 0 (softmax minus a one-hot, over N).
  for (size_t r = 0; r < N; r++) {
    double s = 0;
    for (size_t v = 0; v < V; v++) s += double(dlogits[r * V + v]);
    CHECK(std::abs(s) < 1e-7);
  }
  const int32_t bad[1] = {7};
  CHECK_THROWS_AS(model::cpu::cross_entropy(dlogits.data(), logits.data(), bad, 1, V),
                  std::out_of_range);
  // Padding rows (ignore_target): the mean is over the other two, which the central differences
  // see; the padded rows' gradients are 0.
  const int32_t padded[N] = {5, model::ignore_target, 2, model::ignore_target};
  const double mean_of_two = model::cpu::cross_entropy(dlogits.data(), logits.data(), padded, N, V);
  const int32_t two[2] = {5, 2};
  Floats rows_02(2 * V);
  std::copy_n(logits.begin(), V, rows_02.begin());
  std::copy_n(logits.begin() + 2 * V, V, rows_02.begin() + V);
  CHECK(mean_of_two ==
        doctest::Approx(model::cpu::cross_entropy(scratch.data(), rows_02.data(), two, 2, V))
            .epsilon(1e-12));
  check_grad("cross_entropy with padding: dlogits", logits, dlogits, [&] {
    return model::cpu::cross_entropy(scratch.data(), logits.data(), padded, N, V);
  });
  for (size_t v = 0; v < V; v++) CHECK((dlogits[V + v] == 0.0f && dlogits[3 * V + v] == 0.0f));
}

TEST_CASE("adamw and sgd: torch.optim's updates, written out") {
  const model::cpu::AdamW o{0.01f, 0.9f, 0.95f, 1e-8f, 0.1f};
  Floats p = {1.0f, -2.0f, 0.5f}, m(3, 0.0f), v(3, 0.0f);
  const Floats g1 = {0.5f, -1.0f, 0.0f}, g2 = {-0.25f, 2.0f, 1.0f};
  const Floats p0 = p;
  model::cpu::adamw(p.data(), m.data(), v.data(), g1.data(), 3, o, 1);
  model::cpu::adamw(p.data(), m.data(), v.data(), g2.data(), 3, o, 2, 0.5f);  // clipped by half
  for (size_t i = 0; i < 3; i++) {
    // Step 1: m = 0.1 g, v = 0.05 g^2, so m-hat = g and v-hat = g^2.
    double pi = double(p0[i]) * (1 - 0.01 * 0.1);
    pi -= 0.01 * double(g1[i]) / (std::abs(double(g1[i])) + 1e-8);
    // Step 2, with g = 0.5 g2.
    const double g = 0.5 * double(g2[i]);
    const double mi = 0.9 * 0.1 * double(g1[i]) + 0.1 * g;
    const double vi = 0.95 * 0.05 * double(g1[i]) * double(g1[i]) + 0.05 * g * g;
    pi *= 1 - 0.01 * 0.1;
    pi -= 0.01 * (mi / (1 - 0.81)) / (std::sqrt(vi / (1 - 0.9025)) + 1e-8);
    CHECK(p[i] == doctest::Approx(pi).epsilon(1e-6));
    CHECK(m[i] == doctest::Approx(mi).epsilon(1e-6));
    CHECK(v[i] == doctest::Approx(vi).epsilon(1e-6));
  }
  Floats q = {1.0f, -2.0f};
  const Floats gq = {0.5f, 4.0f};
  model::cpu::sgd(q.data(), gq.data(), 2, 0.1f, 0.01f, 0.5f);
  CHECK(q[0] == doctest::Approx(1.0 * (1 - 0.001) - 0.1 * 0.5 * 0.5));
  CHECK(q[1] == doctest::Approx(-2.0 * (1 - 0.001) - 0.1 * 0.5 * 4.0));
  CHECK(model::cpu::grad_sum_squares(gq.data(), 2) == doctest::Approx(16.25));
}
