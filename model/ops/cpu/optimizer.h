// CPU references of the optimizer ops of training (issue 17): the gradient norm, AdamW, SGD.
#pragma once
#include <cstddef>
#include <cstdint>

namespace model::cpu {

// The sum of squares of n gradient values, in double (the global norm is the square root of
// every tensor's sum).
double grad_sum_squares(const float* g, size_t n);

// One step of torch.optim.AdamW on n parameters: p *= 1 - lr * wd; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps).
// g is scaled by grad_scale first (gradient clipping). step counts from 1.
struct AdamW {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};
void adamw(float* p, float* m, float* v, const float* g, size_t n, const AdamW& o, uint64_t step,
           float grad_scale = 1.0f);

// One step of SGD with decoupled weight decay: p *= 1 - lr * wd; p -= lr * grad_scale * g.
void sgd(float* p, const float* g, size_t n, float lr, float weight_decay, float grad_scale = 1.0f);

}  // namespace model::cpu
