// A matmul problem for the tests: random host data, its CPU reference and the magnitudes the
// tolerance is relative to, run on the GPU with a chosen kernel or weight layout.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul.h"

namespace test {

constexpr double kMatmulTol = 1e-5;  // relative to mag (see tests/test_matmul.cpp)

enum class Residual { None, Separate, InPlace };

struct MatmulCase {
  uint32_t T, K, N;
  bool bias = false;
  model::Activation act = model::Activation::None;
  Residual residual = Residual::None;
  model::WeightLayout layout = model::WeightLayout::KN;  // of the data, and of the reference
  model::DType dtype = model::DType::F32;
  bool interleave = false;  // the GPU reads W repacked by model::gpu::interleave()
};

std::string describe(const MatmulCase& c, model::gpu::MatmulKernel kernel);

// GPT-2's matmul shapes at decode and short-prompt sizes, all of whose K are whole texels; each
// kernel's test adds its own awkward shapes.
std::vector<MatmulCase> gpt2_matmul_shapes();

// One case's host data and its CPU reference.
struct MatmulProblem {
  MatmulCase c;
  std::vector<float> x, w, w_used, bias, residual, ref, mag;
};

MatmulProblem make_problem(const MatmulCase& c, unsigned seed);
// The reference and magnitudes of p's case for p's own x, W, bias and residual.
MatmulProblem make_problem_from(const MatmulProblem& p);

// Runs the GPU op for `p` with `kernel` and returns out; `stats` gets the recorder's counters.
// norm: a LayerNorm fused in front (interleaved weights or the wide kernel). shaders: the
// shaders dispatched, named by timestamps (left empty on a device without them). x_row: the
// first row of p.x read (p.x holds x_row + T rows).
std::vector<float> run_gpu(const vk::Device& dev, const model::gpu::Ops& kernels, const MatmulProblem& p,
                           model::gpu::MatmulKernel kernel, vk::RecorderStats* stats = nullptr,
                           const model::gpu::MatmulNorm* norm = nullptr,
                           std::set<std::string>* shaders = nullptr, uint32_t x_row = 0);

// GPU against the reference, both divided by mag so one absolute tolerance is "relative to the
// row's magnitude".
bool matches(const MatmulProblem& p, const std::vector<float>& got, const std::string& what);

vk::BufferSpan upload(const vk::Device& dev, vk::Arena& arena, const void* data, size_t bytes);

}  // namespace test
