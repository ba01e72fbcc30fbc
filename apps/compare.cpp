// gpt2vk compare: the GPU and the CPU reference on the same tokens, position by position.
//
// Tolerance: |gpu - cpu| <= tol * max(1, max |cpu logit| of the row), tol = 1e-4 by default.
// The CPU reference uses the same stored weights (rounded to fp16 for --precision f16), so what
// differs is only fp32 accumulation order against double: a few ulps per op, growing with depth,
// far below 1e-4 of the logits' scale for every model we ship or test. A real bug (a wrong
// index, a missing barrier) moves logits by whole units. With --kv-cache f16 both sides round
// their own keys and values to fp16, and where the two straddle a rounding boundary the halves
// differ by an ulp: 2e-3 by default then (tests/test_model.cpp, kKvFlipTol).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "model/forward/cpu_model.h"
#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/seq2seq_session.h"
#include "apps/session.h"
#include "model/generation/generate.h"
#include "model/generation/seq2seq_generate.h"
#include "model/forward/gpu_model.h"
#include "model/text/utf8.h"

namespace app {
namespace {

struct CompareArgs {
  ModelArgs model;
  std::string prompt, file;
  // Relative to the row's largest |logit| (see compare() below); 0: 1e-4, or 2e-3 with
  // --kv-cache f16.
  double tolerance = 0;
};

// The top id of a row, and by how much it leads the second.
std::pair<size_t, double> top(const float* row, size_t V) {
  size_t best = 0;
  for (size_t v = 1; v < V; v++)
    if (row[v] > row[best]) best = v;
  double second = -INFINITY;
  for (size_t v = 0; v < V; v++)
    if (v != best) second = std::max(second, double{row[v]});
  return {best, double{row[best]} - second};
}

// The largest |gpu - cpu| over rows of width w, each relative to max(1, the row's max |cpu|).
double worst_relative(std::span<const float> g, std::span<const float> r, size_t w) {
  double worst = 0;
  for (size_t row = 0; row * w < r.size(); row++) {
    double d = 0, m = 1;
    for (size_t i = row * w; i < (row + 1) * w; i++) {
      d = std::max(d, std::fabs(double{g[i]} - double{r[i]}));
      m = std::max(m, std::fabs(double{r[i]}));
    }
    worst = std::max(worst, std::isfinite(d) ? d / m : double{INFINITY});
  }
  return worst;
}

// The logits [T, V] of each position, GPU against CPU, a line each: the row's largest |diff|
// against tolerance x max(1, max |logit|), and both top ids, which may differ only where the
// reference's own top two are within tolerance. True when every row passes.
bool compare_logits(std::span<const float> g, std::span<const float> r, size_t V,
                    std::span<const int32_t> ids, const model::Tokenizer& tokenizer,
                    double tolerance) {
  std::printf("%5s %-16s %12s %12s %5s %5s\n", "pos", "token", "max|diff|", "allowed", "gpu", "cpu");
  bool ok = true;
  for (size_t t = 0; t < ids.size(); t++) {
    const float *gr = &g[t * V], *rr = &r[t * V];
    double d = 0, m = 0;
    for (size_t v = 0; v < V; v++) {
      d = std::max(d, std::fabs(double{gr[v]} - double{rr[v]}));
      m = std::max(m, std::fabs(double{rr[v]}));
    }
    const double allowed = tolerance * std::max(1.0, m);
    const size_t gt = top(gr, V).first;
    const auto [rt, rmargin] = top(rr, V);
    const bool agree = gt == rt || rmargin <= 2 * allowed;
    const bool row_ok = std::isfinite(d) && d <= allowed && agree;
    ok = ok && row_ok;
    // An id past the tokenizer (t5-small's padded rows) has no text.
    std::string tok = static_cast<uint32_t>(ids[t]) < tokenizer.vocab_size()
                          ? model::sanitize_utf8(tokenizer.token_bytes(ids[t]))
                          : "";
    for (char& ch : tok)
      if (ch == '\n' || ch == '\t' || ch == '\r') ch = ' ';
    std::printf("%5zu %-16.16s %12.3e %12.3e %5zu %5zu%s\n", t, tok.c_str(), d, allowed, gt, rt,
                row_ok ? "" : (agree ? "  <- over tolerance" : "  <- top token differs"));
  }
  return ok;
}

// An encoder's: the hidden states and the head's logits, each row against the tolerance.
int compare_encoder(const CompareArgs& args, const std::string& text, double tolerance) {
  EncoderSession s = open_encoder(args.model);
  const model::Config& c = s.checkpoint->config();
  const std::unique_ptr<model::Encoder> cpu =
      model::make_cpu_encoder(*s.checkpoint, s.encoder->precision());
  const model::WordPieceEncoding e = encode_text(s, text, "the prompt");
  const model::Encoded g = s.encoder->encode(e.ids, e.type_ids), r = cpu->encode(e.ids, e.type_ids);
  std::printf("%s vs CPU reference, %s weights, %zu tokens, tolerance %.1e x max(1, max|x|) of a "
              "row\n",
              s.encoder->device_name().c_str(), model::precision_name(s.encoder->precision()),
              e.ids.size(), tolerance);
  const double hidden = worst_relative(g.hidden, r.hidden, c.n_embd);
  std::printf("hidden states [%zu, %u]: max relative |diff| %.3e\n", e.ids.size(), c.n_embd, hidden);
  bool ok = hidden <= tolerance;
  if (!r.logits.empty()) {
    const double head = worst_relative(g.logits, r.logits, c.head_width());
    std::printf("%s head [%u, %u]: max relative |diff| %.3e\n", model::encoder_head_name(c.head),
                c.head_rows(static_cast<uint32_t>(e.ids.size())), c.head_width(), head);
    ok = ok && head <= tolerance;
  }
  std::printf("%s\n", ok ? "OK: the GPU matches the CPU reference" : "FAIL: the GPU differs from the CPU reference");
  return ok ? 0 : 2;
}

// An encoder-decoder's: the encoder's output, then the decoder's logits teacher-forced over the
// start token and the CPU reference's greedy translation (at most kSeq2SeqTarget tokens), each
// position against the tolerance. Both sides read the same source ids.
constexpr uint32_t kSeq2SeqTarget = 32;

int compare_seq2seq(const CompareArgs& args, const std::string& text, double tolerance) {
  Seq2SeqSession s = open_seq2seq(args.model);
  const model::Config& c = s.checkpoint->config();
  model::Seq2Seq& gpu = *s.model;
  const std::unique_ptr<model::Seq2Seq> cpu =
      model::make_cpu_seq2seq(*s.checkpoint, gpu.decoder().precision());
  const std::vector<int32_t> source = encode_source(s, text, "the prompt");
  std::vector<int32_t> ids = {c.decoder_start_token_id.value_or(0)};
  for (int32_t id : model::greedy(*cpu, source, std::min(kSeq2SeqTarget, c.n_ctx - 1)))
    ids.push_back(id);
  std::printf("%s vs CPU reference, %s weights, a source of %zu tokens, %zu target tokens "
              "(the reference's greedy), tolerance %.1e x max(1, max|x|) of a row\n",
              gpu.decoder().device_name().c_str(), model::precision_name(gpu.decoder().precision()),
              source.size(), ids.size(), tolerance);
  const std::vector<float> gh = gpu.set_source(source), rh = cpu->set_source(source);
  const double hidden = worst_relative(gh, rh, c.n_embd);
  std::printf("encoder output [%zu, %u]: max relative |diff| %.3e\n", source.size(), c.n_embd,
              hidden);
  const std::vector<float> g = gpu.decoder().logits(ids), r = cpu->decoder().logits(ids);
  const bool ok = compare_logits(g, r, c.n_vocab, ids, *s.target, tolerance) && hidden <= tolerance;
  std::printf("%s\n", ok ? "OK: the GPU matches the CPU reference" : "FAIL: the GPU differs from the CPU reference");
  return ok ? 0 : 2;
}

int compare(const CompareArgs& args) {
  const std::string text = read_text(args.prompt, args.file);
  double tolerance =
      args.tolerance > 0 ? args.tolerance : args.model.kv_cache == "f16" ? 2e-3 : 1e-4;
  ModelArgs gpu_args = args.model;
  if (gpu_args.device == "cpu") throw std::runtime_error("compare runs a GPU against the CPU: --device cpu makes no sense here");
  if (encoder_folder(gpu_args))
    return compare_encoder(args, text, tolerance);
  if (seq2seq_folder(gpu_args)) return compare_seq2seq(args, text, tolerance);
  Session s = open_checkpoint(gpu_args);
  open_gpu(s, gpu_args);
  const model::Precision precision = s.model->precision();
  // The matrix units round x to fp16 as an fp16 cache rounds keys and values: on an H100, GPT-2
  // small's logits differed by up to 6.8e-4 of their scale (docs/benchmark.md).
  if (args.tolerance <= 0 && s.model->matrix_units()) tolerance = 2e-3;
  // The reference caches keys and values as the GPU does (--kv-cache).
  std::unique_ptr<model::Model> cpu =
      model::make_cpu_model(*s.checkpoint, precision, model::parse_precision(gpu_args.kv_cache));
  const std::vector<int32_t> ids = s.tokenizer->encode(text);
  const model::Config& c = s.model->config();
  model::check_prompt(c, ids.size());

  s.model->set_taps(true);
  cpu->set_taps(true);
  const std::vector<float> g = s.model->logits(ids), r = cpu->logits(ids);
  const size_t V = c.n_vocab;
  std::printf("%s vs CPU reference, %s weights, %s KV cache, %zu tokens, tolerance %.1e x max(1, "
              "max|logit|)\n",
              s.model->device_name().c_str(), model::precision_name(precision),
              gpu_args.kv_cache.c_str(), ids.size(), tolerance);
  for (uint32_t l = 0; l < c.n_layer; l++) {
    double d = 0, m = 0;
    for (size_t i = 0; i < cpu->taps()[l].size(); i++) {
      d = std::max(d, std::fabs(double{s.model->taps()[l][i]} - double{cpu->taps()[l][i]}));
      m = std::max(m, std::fabs(double{cpu->taps()[l][i]}));
    }
    std::printf("block %3u: max |diff| %.3e (max |x| %.3e)\n", l, d, m);
  }
  const bool ok = compare_logits(g, r, V, ids, *s.tokenizer, tolerance);
  std::printf("%s\n", ok ? "OK: the GPU matches the CPU reference" : "FAIL: the GPU differs from the CPU reference");
  return ok ? 0 : 2;
}

}  // namespace

Command add_compare(CLI::App& cli) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "compare", "run the GPU and the CPU reference on a prompt and compare logits");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "the text to run");
  cmd->add_option("-f,--file", args->file, "read the text from a file");
  cmd->add_option("--tolerance", args->tolerance,
                  "allowed |diff| relative to max(1, max|logit|) of a row (default 1e-4; "
                  "2e-3 with --kv-cache f16 or where prompts run on the matrix units)")
      ->check(CLI::PositiveNumber);
  return {cmd, [args] { return compare(*args); }};
}

}  // namespace app
