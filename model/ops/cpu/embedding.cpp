#include "model/ops/cpu/embedding.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/ops/cpu/common.h"

namespace model::cpu {

double sinusoid(size_t pos, size_t c, size_t C, model::PositionKind layout) {
  const size_t half = (C + 1) / 2;
  const bool halves = layout == model::PositionKind::SinusoidalHalves;
  const bool is_sin = halves ? c < half : (c & 1) == 0;
  const size_t even = halves ? 2 * (is_sin ? c : c - half) : c & ~size_t{1};  // 2i
  const double angle = static_cast<double>(pos) /
                       std::pow(10000.0, static_cast<double>(even) / static_cast<double>(C));
  return is_sin ? std::sin(angle) : std::cos(angle);
}

void embedding(float* out, const int32_t* ids, const float* wte, const float* wpe, size_t T,
               size_t C, size_t V, size_t n_pos, size_t pos_offset, model::PositionKind position,
               const int32_t* types, const float* wtt, size_t n_types, float scale) {
  if (position == model::PositionKind::Learned && pos_offset + T > n_pos)
    throw std::out_of_range("cpu::embedding: positions past n_pos " + std::to_string(n_pos));
  for (size_t t = 0; t < T; t++) {
    if (ids[t] < 0 || static_cast<size_t>(ids[t]) >= V)
      throw std::out_of_range("cpu::embedding: id " + std::to_string(ids[t]) + " at " +
                              std::to_string(t));
    if (types && (types[t] < 0 || static_cast<size_t>(types[t]) >= n_types))
      throw std::out_of_range("cpu::embedding: token type " + std::to_string(types[t]) + " at " +
                              std::to_string(t));
    const float* row = wte + static_cast<size_t>(ids[t]) * C;
    const float* type_row = types ? wtt + static_cast<size_t>(types[t]) * C : nullptr;
    const size_t pos = pos_offset + t;
    for (size_t c = 0; c < C; c++) {
      double x = static_cast<double>(row[c]) * static_cast<double>(scale);
      if (type_row) x += static_cast<double>(type_row[c]);
      if (position == model::PositionKind::Learned) x += static_cast<double>(wpe[pos * C + c]);
      if (position == model::PositionKind::Sinusoidal ||
          position == model::PositionKind::SinusoidalHalves)
        x += sinusoid(pos, c, C, position);
      out[t * C + c] = static_cast<float>(x);
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, size_t B,
                        size_t T, size_t C, float scale) {
  std::map<int32_t, std::vector<double>> rows;  // the touched rows of dwte
  std::vector<double> pos(dwpe ? T * C : 0, 0.0);
  for (size_t i = 0; i < B * T; i++) {
    std::vector<double>& r = rows[ids[i]];
    r.resize(C, 0.0);
    for (size_t c = 0; c < C; c++) {
      r[c] += wide(scale) * wide(dout[i * C + c]);
      if (dwpe) pos[(i % T) * C + c] += wide(dout[i * C + c]);
    }
  }
  for (const auto& [id, r] : rows)
    for (size_t c = 0; c < C; c++) dwte[size_t(id) * C + c] = narrow(wide(dwte[size_t(id) * C + c]) + r[c]);
  for (size_t i = 0; i < pos.size(); i++) dwpe[i] = narrow(wide(dwpe[i]) + pos[i]);
}

}  // namespace model::cpu
