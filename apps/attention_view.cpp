#include "apps/attention_view.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/formats/dtype.h"
#include "model/text/utf8.h"

namespace app {

// apps/attention_page.html, embedded at build time (cmake/embed.cmake).
extern const char kAttentionPage[];

namespace {

// The placeholder the page's script holds where the data goes.
constexpr std::string_view kPlaceholder = "/*GPT2VK_DATA*/null";

std::string hex_byte(unsigned char b) {
  char s[5];
  std::snprintf(s, sizeof s, "\\x%02X", b);
  return s;
}

// Text columns of a UTF-8 string: its code points (close enough for a label).
size_t columns(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// The first `width` columns of s, or its first width - 1 and an ellipsis; padded to width.
std::string fit(const std::string& s, size_t width) {
  std::string out;
  size_t cols = 0, i = 0;
  const size_t total = columns(s);
  while (i < s.size() && cols < (total > width ? width - 1 : width)) {
    size_t len = 1;
    while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80) len++;
    out.append(s, i, len);
    i += len;
    cols++;
  }
  if (total > width) {
    out += "\u2026";
    cols++;
  }
  out.append(width - cols, ' ');
  return out;
}

std::string base64(std::span<const uint8_t> bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = uint32_t{bytes[i]} << 16 |
                       (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t{bytes[i + 2]} : 0);
    out += k[n >> 18 & 63];
    out += k[n >> 12 & 63];
    out += i + 1 < bytes.size() ? k[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? k[n & 63] : '=';
  }
  return out;
}

std::vector<std::vector<std::string>> summaries(const AttentionMap& map) {
  std::vector<std::vector<std::string>> out(map.layers.size());
  for (size_t l = 0; l < map.layers.size(); l++)
    for (size_t h = 0; h < map.heads.size(); h++)
      out[l].push_back(map.key_ids.empty()
                           ? summarize_head(map.head(l, h), map.ids, map.tokens, map.causal)
                           : summarize_cross(map.head(l, h), map.T(), map.key_tokens));
  return out;
}

// Everything but the weights, as both the JSON file and the page carry it.
nlohmann::json header(const AttentionMap& map) {
  nlohmann::json j = {{"title", map.title},       {"model", map.model},
                      {"device", map.device},     {"precision", map.precision},
                      {"n_layer", map.n_layer},   {"n_head", map.n_head},
                      {"layers", map.layers},     {"heads", map.heads},
                      {"causal", map.causal},     {"T", map.T()},
                      {"tokens", map.tokens},     {"ids", map.ids},
                      {"summary", summaries(map)}};
  if (!map.key_ids.empty()) {
    j["K"] = map.K();
    j["key_tokens"] = map.key_tokens;
    j["key_ids"] = map.key_ids;
  }
  return j;
}

// "focused 0.91, mostly on ␣" where each query's largest weight is 0.5 or more on average, else
// "spread out, entropy 2.3 bits", over each query's visible keys (row t's first visible(t));
// empty for no queries.
template <class Visible>
std::string focus(const float* probs, size_t T, size_t K, std::span<const std::string> keys,
                  Visible visible) {
  double entropy = 0, top = 0;
  std::map<std::string, size_t> top_tokens;  // how often each token takes a query's top weight
  for (size_t t = 0; t < T; t++) {
    const float* row = probs + t * K;
    size_t best = 0;
    for (size_t j = 0; j < visible(t); j++) {
      if (row[j] > row[best]) best = j;
      if (row[j] > 0) entropy -= double{row[j]} * std::log2(double{row[j]});
    }
    top += double{row[best]};
    top_tokens[keys[best]]++;
  }
  char buf[64];
  if (T == 0) return "";
  if (top / double(T) >= 0.5) {
    const auto most =
        std::max_element(top_tokens.begin(), top_tokens.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    std::snprintf(buf, sizeof buf, "focused %.2f, mostly on ", top / double(T));
    return buf + most->first;
  }
  std::snprintf(buf, sizeof buf, "spread out, entropy %.1f bits", entropy / double(T));
  return buf;
}

}  // namespace

std::string display_token(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const model::Utf8Char c = model::decode_utf8(bytes, i);
    if (!c.ok) {
      for (size_t k = 0; k < c.len; k++) out += hex_byte(static_cast<unsigned char>(bytes[i + k]));
    } else if (c.cp == ' ') {
      out += "\u2423";
    } else if (c.cp == '\n') {
      out += "\u21b5";
    } else if (c.cp == '\t') {
      out += "\u2192";
    } else if (c.cp < 0x20) {
      model::append_utf8(out, 0x2400 + c.cp);  // the control pictures block
    } else if (c.cp == 0x7f) {
      out += "\u2421";
    } else {
      out.append(bytes.substr(i, c.len));
    }
    i += c.len;
  }
  return out;
}

std::string summarize_head(const float* probs, std::span<const int32_t> ids,
                           std::span<const std::string> tokens, bool causal) {
  const size_t T = ids.size();
  struct Pattern {
    const char* name;
    double sum = 0;
    size_t queries = 0;
    double mean() const { return queries ? sum / double(queries) : 0; }
  };
  Pattern first{"first token"}, previous{"previous token"}, itself{"itself"}, next{"next token"},
      same{"same token elsewhere"};
  for (size_t t = 0; t < T; t++) {
    const float* row = probs + t * T;
    const size_t n = causal ? t + 1 : T;  // visible keys
    itself.sum += double{row[t]};
    itself.queries++;
    if (t >= 1) {
      first.sum += double{row[0]};
      first.queries++;
      previous.sum += double{row[t - 1]};
      previous.queries++;
    }
    if (!causal && t + 1 < T) {
      next.sum += double{row[t + 1]};
      next.queries++;
    }
    double s = 0;
    bool any = false;
    for (size_t j = 0; j < n; j++)
      if (j != t && ids[j] == ids[t]) {
        s += double{row[j]};
        any = true;
      }
    if (any) {
      same.sum += s;
      same.queries++;
    }
  }
  std::vector<const Pattern*> ps{&first, &previous, &itself, &next, &same};
  std::stable_sort(ps.begin(), ps.end(),
                   [](const Pattern* a, const Pattern* b) { return a->mean() > b->mean(); });
  std::string out;
  char buf[64];
  for (size_t i = 0; i < 2 && ps[i]->mean() >= 0.3; i++) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f", out.empty() ? "" : ", ", ps[i]->name,
                  ps[i]->mean());
    out += buf;
  }
  if (!out.empty()) return out;
  return focus(probs, T, T, tokens, [&](size_t t) { return causal ? t + 1 : T; });
}

std::string summarize_cross(const float* probs, size_t T, std::span<const std::string> keys) {
  return focus(probs, T, keys.size(), keys, [&](size_t) { return keys.size(); });
}

std::string text_view(const AttentionMap& map, size_t layer, size_t head) {
  const size_t T = map.T(), K = map.K();
  const float* p = map.head(layer, head);
  const std::string summary = map.key_ids.empty()
                                  ? summarize_head(p, map.ids, map.tokens, map.causal)
                                  : summarize_cross(p, T, map.key_tokens);
  std::string out = "layer " + std::to_string(map.layers[layer]) + ", head " +
                    std::to_string(map.heads[head]) + " (of " + std::to_string(map.n_layer) +
                    " x " + std::to_string(map.n_head) + "): " + summary + "\n";
  out +=
      "weights: \u00b7 < 0.05 \u2264 \u2591 < 0.25 \u2264 \u2592 < 0.5 \u2264 \u2593 < 0.75 "
      "\u2264 \u2588; rows are queries, columns keys\n";
  const size_t label = 12, lead = 5 + label + 1;
  if (K >= 10) {  // the keys' tens digit, then their units
    out += std::string(lead, ' ');
    for (size_t j = 0; j < K; j++) out += j % 10 == 0 ? char('0' + j / 10 % 10) : ' ';
    out += '\n';
  }
  out += std::string(lead, ' ');
  for (size_t j = 0; j < K; j++) out += char('0' + j % 10);
  out += '\n';
  for (size_t t = 0; t < T; t++) {
    char num[24];  // 20 digits of a size_t, a space and the end
    std::snprintf(num, sizeof num, "%4zu ", t);
    out += num + fit(map.tokens[t], label) + " ";
    const size_t n = map.causal ? t + 1 : K;
    for (size_t j = 0; j < n; j++) {  // a causal query's row ends at itself
      const float w = p[t * K + j];
      out += w < 0.05f   ? "\u00b7"
             : w < 0.25f ? "\u2591"
             : w < 0.5f  ? "\u2592"
             : w < 0.75f ? "\u2593"
                         : "\u2588";
    }
    out += '\n';
  }
  return out;
}

std::string to_json(const AttentionMap& map) {
  std::string out = header(map).dump();
  out.pop_back();  // the closing brace: the weights follow
  out += ",\"attention\":[";
  const size_t T = map.T(), K = map.K();
  char buf[32];
  for (size_t l = 0; l < map.layers.size(); l++) {
    out += l ? ",[" : "[";
    for (size_t h = 0; h < map.heads.size(); h++) {
      out += h ? ",[" : "[";
      const float* p = map.head(l, h);
      for (size_t t = 0; t < T; t++) {
        out += t ? ",[" : "[";
        for (size_t j = 0; j < K; j++) {
          if (j) out += ',';
          // The shortest text that reads back as the same float.
          const auto r = std::to_chars(buf, buf + sizeof buf, p[t * K + j]);
          out.append(buf, r.ptr);
        }
        out += ']';
      }
      out += ']';
    }
    out += ']';
  }
  out += "]}\n";
  return out;
}

std::string html_page(const AttentionMap& map) {
  std::vector<uint8_t> half(map.probs.size() * 2);
  for (size_t i = 0; i < map.probs.size(); i++) {
    const uint16_t b = model::f32_to_f16(map.probs[i]);
    half[2 * i] = static_cast<uint8_t>(b & 0xff);
    half[2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  nlohmann::json data = header(map);
  data["probs"] = base64(half);
  std::string json = data.dump();
  // Inside <script>, "</script" would end the element early and "<!--" change how the rest is
  // read; '<' occurs only within JSON strings, where \u003c is the same character.
  for (size_t i = 0; (i = json.find('<', i)) != std::string::npos; i += 6)
    json.replace(i, 1, "\\u003c");
  std::string page = kAttentionPage;
  const size_t at = page.find(kPlaceholder);
  if (at == std::string::npos)
    throw std::logic_error("the embedded attention page has no data placeholder");
  page.replace(at, kPlaceholder.size(), json);
  return page;
}

}  // namespace app
