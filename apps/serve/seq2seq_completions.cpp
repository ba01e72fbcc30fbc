#include "apps/serve/seq2seq_completions.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "model/generation/seq2seq_generate.h"

namespace app {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, param);
}

bool given(const json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && !it->is_null();
}

// The source ids of "prompt": text through the source tokenizer, or ids as given.
std::vector<int32_t> read_source(const json& j, const model::Tokenizer& source, uint32_t V) {
  if (!given(j, "prompt")) throw bad("prompt", "prompt is required: the source text");
  const json& p = j["prompt"];
  const json* text = p.is_string() ? &p : nullptr;
  if (p.is_array() && p.size() == 1 && p[0].is_string()) text = &p[0];
  std::vector<int32_t> ids;
  if (text) {
    const std::string& s = text->get_ref<const std::string&>();
    if (s.empty()) throw bad("prompt", "prompt is empty: nothing to translate");
    try {
      ids = source.encode(s);
    } catch (const std::exception& e) {
      throw bad("prompt", std::string("prompt cannot be tokenized: ") + e.what());
    }
    return ids;
  }
  if (!p.is_array())
    throw bad("prompt", "prompt must be a string or an array of token ids, got " + json_type(p));
  for (size_t i = 0; i < p.size(); i++) {
    const json& id = p[i];
    if (id.is_string() || id.is_array())
      throw bad("prompt",
                "prompt: batches of prompts are not supported; send one string or one "
                "array of token ids per request");
    const bool ok = id.is_number_unsigned()  ? id.get<uint64_t>() < V
                    : id.is_number_integer() ? id.get<int64_t>() >= 0 && id.get<int64_t>() < V
                                             : false;
    if (!ok)
      throw bad("prompt", "prompt[" + std::to_string(i) + "] is " + json_type(id) +
                              ", not a token id of this model (0 to " + std::to_string(V - 1) +
                              ")");
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  if (ids.empty())
    throw bad("prompt", "prompt is an empty array of token ids: nothing to translate");
  return ids;
}

// early_stopping as generate() takes it: true, false or "never".
model::BeamSettings::Stop read_early_stopping(const json& j, model::BeamSettings::Stop fallback) {
  if (!given(j, "early_stopping")) return fallback;
  const json& e = j["early_stopping"];
  if (e.is_boolean())
    return e.get<bool>() ? model::BeamSettings::Stop::Early : model::BeamSettings::Stop::Heuristic;
  if (e.is_string() && e.get_ref<const std::string&>() == "never")
    return model::BeamSettings::Stop::Never;
  throw bad("early_stopping",
            "early_stopping must be true, false or \"never\", got " + json_type(e));
}

}  // namespace

Seq2SeqRequest parse_seq2seq(const std::string& body, const model::Tokenizer& source,
                             const model::Config& c, const model::BeamSettings& defaults) {
  const json j = parse_body(body);
  Seq2SeqRequest r;
  if (given(j, "model") && !j["model"].is_string())
    throw bad("model", "model must be a string, got " + json_type(j["model"]));
  for (const char* n : {"n", "best_of"})
    if (get_integer(j, n, 1, 1, int64_t{1} << 30) != 1)
      throw bad(n, std::string(n) +
                       ": one completion per request; num_beams searches several and "
                       "returns the best");
  if (given(j, "logprobs"))
    throw bad("logprobs", "logprobs is not supported by an encoder-decoder's search");
  if (get_bool(j, "echo", false))
    throw bad("echo",
              "echo is not supported: the prompt is the source, not the completion's start");
  for (const char* n : {"stop", "suffix"})
    if (given(j, n) && !(j[n].is_string() && j[n].get_ref<const std::string&>().empty()) &&
        !(j[n].is_array() && j[n].empty()))
      throw bad(n, std::string(n) +
                       " is not supported by an encoder-decoder: it generates until "
                       "its end of sequence or max_tokens");
  // Checked as OpenAI's API takes them, then ignored: the search is greedy or beams.
  get_number(j, "temperature", 1.0, 0.0, 2.0);
  get_number(j, "top_p", 1.0, 0.0, 1.0);

  r.source = read_source(j, source, c.n_vocab);
  if (r.source.size() > c.n_ctx)
    throw ApiError(400,
                   "prompt is " + std::to_string(r.source.size()) +
                       " tokens, more than the model's maximum of " + std::to_string(c.n_ctx) +
                       " (max_position_embeddings)",
                   "prompt", "context_length_exceeded");
  r.search = defaults;
  // The decoder's context holds the start token and the new ids.
  const uint32_t most = c.n_ctx - 1;
  r.search.max_new_tokens = static_cast<uint32_t>(
      get_integer(j, "max_tokens", std::min(defaults.max_new_tokens, most), 1, most));
  const uint32_t beams = std::min(kMaxServeBeams, c.n_vocab / 2);
  r.search.beams =
      static_cast<uint32_t>(get_integer(j, "num_beams", std::min(defaults.beams, beams), 1, beams));
  r.search.length_penalty = get_number(j, "length_penalty", defaults.length_penalty, -100, 100);
  r.search.no_repeat_ngram = static_cast<uint32_t>(
      get_integer(j, "no_repeat_ngram_size", defaults.no_repeat_ngram, 0, c.n_ctx));
  r.search.early_stopping = read_early_stopping(j, defaults.early_stopping);
  r.stream = get_bool(j, "stream", false);
  return r;
}

std::string seq2seq_response(const Seq2SeqResult& r, bool stream, const std::string& id,
                             std::time_t created, const std::string& model_name) {
  const json out = {{"id", id},
                    {"object", "text_completion"},
                    {"created", created},
                    {"model", model_name},
                    {"choices", json::array({{{"text", r.text},
                                              {"index", 0},
                                              {"logprobs", nullptr},
                                              {"finish_reason", r.finish_reason}}})},
                    {"usage",
                     {{"prompt_tokens", r.prompt_tokens},
                      {"completion_tokens", r.completion_tokens},
                      {"total_tokens", r.prompt_tokens + r.completion_tokens}}}};
  const std::string s = out.dump(-1, ' ', false, json::error_handler_t::replace);
  return stream ? "data: " + s + "\n\ndata: [DONE]\n\n" : s;
}

Seq2SeqRunner::Seq2SeqRunner(Seq2SeqSession& session, Metrics& metrics, uint32_t max_queue)
    : session_(session),
      metrics_(metrics),
      max_queue_(max_queue),
      round_(session.model->decoder().slot_sources()) {}

void Seq2SeqRunner::update_metrics() {
  uint32_t running = 0, waiting = 0;
  for (const Waiter* w : queue_) (w->taken ? running : waiting)++;
  metrics_.set_queue(waiting, running);
}

std::optional<Seq2SeqResult> Seq2SeqRunner::run(const Seq2SeqRequest& request,
                                                const std::function<bool()>& gone) {
  Waiter w{&request};
  std::unique_lock lock(mutex_);
  const auto waiting = static_cast<uint32_t>(
      std::count_if(queue_.begin(), queue_.end(), [](const Waiter* q) { return !q->taken; }));
  if ((busy_ ? 1 : 0) + waiting > max_queue_) {  // a round runs; the rest wait
    ApiError e(503, "the server is busy: " + std::to_string(max_queue_) +
                        " requests are waiting (--max-queue); retry later");
    e.retry_after = 1;
    throw e;
  }
  queue_.push_back(&w);
  // However this call ends (a client gone, or a throw), w is out of the queue by then: a round
  // removes what it took, this what no round took. The lock is held at every exit.
  struct Leave {
    Seq2SeqRunner& r;
    Waiter& w;
    ~Leave() {
      if (w.taken) return;
      r.queue_.erase(std::find(r.queue_.begin(), r.queue_.end(), &w));
      r.update_metrics();
      r.turn_.notify_all();
    }
  } leave{*this, w};
  update_metrics();
  const auto first_waiting = [&] {
    return *std::find_if(queue_.begin(), queue_.end(), [](const Waiter* q) { return !q->taken; });
  };
  while (!w.done) {
    if (!busy_ && !w.taken && first_waiting() == &w) {
      // This request's round: it, and the greedy ones right after it where it is greedy.
      std::vector<Waiter*> round;
      round.reserve(round_);  // the one allocation, before anything is taken
      busy_ = true;
      for (Waiter* q : queue_) {
        if (q->taken) continue;
        const bool greedy = q->request->search.beams == 1;
        if (!round.empty() &&
            (!greedy || round.size() == round_ || round.front()->request->search.beams != 1))
          break;
        q->taken = true;
        round.push_back(q);
      }
      update_metrics();
      lock.unlock();
      run_round(round);  // each waiter's result or error; throws nothing
      lock.lock();
      for (Waiter* q : round) {
        q->done = true;
        queue_.erase(std::find(queue_.begin(), queue_.end(), q));
      }
      busy_ = false;
      update_metrics();
      turn_.notify_all();
      break;
    }
    turn_.wait_for(lock, std::chrono::milliseconds(200));
    if (!w.taken && gone()) return std::nullopt;  // its client left before its round began
  }
  if (w.error) std::rethrow_exception(w.error);
  return std::move(w.result);
}

void Seq2SeqRunner::run_round(std::span<Waiter* const> round) noexcept {
  if (round.size() > 1) {
    try {
      metrics_.seq2seq_round(static_cast<uint32_t>(round.size()));
      std::vector<std::vector<int32_t>> sources;
      std::vector<uint32_t> limits;
      for (const Waiter* w : round) {
        sources.push_back(w->request->source);
        limits.push_back(w->request->search.max_new_tokens);
      }
      const std::vector<std::vector<int32_t>> ids = model::decode_batch(
          *session_.model, sources, limits, static_cast<uint32_t>(round.size()));
      for (size_t i = 0; i < round.size(); i++)
        round[i]->result = result_of(*round[i]->request, ids[i]);
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpt2vk: a round of %zu requests failed (%s); each runs alone\n",
                   round.size(), e.what());
    } catch (...) {
      std::fprintf(stderr, "gpt2vk: a round of %zu requests failed; each runs alone\n",
                   round.size());
    }
  }
  for (Waiter* w : round) {
    try {
      if (round.size() == 1) metrics_.seq2seq_round(1);
      w->result = generate(*w->request);
    } catch (...) {
      w->error = std::current_exception();
    }
  }
}

Seq2SeqResult Seq2SeqRunner::generate(const Seq2SeqRequest& r) {
  model::Seq2Seq& m = *session_.model;
  return result_of(r, r.search.beams == 1 ? model::greedy(m, r.source, r.search.max_new_tokens)
                                          : model::beam(m, r.source, r.search));
}

Seq2SeqResult Seq2SeqRunner::result_of(const Seq2SeqRequest& r, const std::vector<int32_t>& ids) {
  const model::Config& c = session_.model->config();
  Seq2SeqResult out;
  out.text = session_.target->decode_generated(ids, c.n_vocab);
  out.prompt_tokens = r.source.size();
  out.completion_tokens = ids.size();
  // An eos before the limit ended it; at the limit a forced eos is the limit's doing.
  const bool eos = !ids.empty() && model::ends_decoding(c, ids.back());
  const bool at_limit = ids.size() >= model::new_token_limit(c, r.search.max_new_tokens);
  out.finish_reason = eos && !(at_limit && c.forced_eos_token_id) ? "stop" : "length";
  metrics_.tokens(out.prompt_tokens, out.completion_tokens);
  return out;
}

}  // namespace app
