// gpt2vk serve: OpenAI's completions API over HTTP (cpp-httplib), answered by the engine's
// thread (apps/serve/engine.h) for a decoder, chat as a completion (apps/serve/chat.h); by the
// runner of apps/serve/seq2seq_completions.h for an encoder-decoder; embeddings for an
// encoder. Every refusal is a 4xx/5xx with OpenAI's error object.
#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/options.h"
#include "apps/seq2seq_session.h"
#include "apps/serve/chat.h"
#include "apps/serve/connections.h"
#include "apps/serve/embeddings.h"
#include "apps/serve/encode_queue.h"
#include "apps/serve/engine.h"
#include "apps/serve/request_log.h"
#include "apps/serve/seq2seq_completions.h"
#include "apps/session.h"
#include "model/text/utf8.h"

namespace app {

using json = nlohmann::json;

namespace {

struct ServeArgs {
  ModelArgs model;
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 8080;             // 0: any free port (the line on stderr names it)
  uint32_t parallel = 1;            // requests decoding at once
  uint32_t ctx_per_slot = 0;        // tokens of prompt + completion per request; 0: n_ctx
  std::string api_key;              // "": no key needed
  uint32_t max_queue = 16;          // requests waiting beyond this get 503 + Retry-After
  size_t max_body = 1 << 20;        // bytes of a request body
  uint32_t request_timeout = 10;    // seconds for a request's headers, and again for its body
  uint32_t drain_timeout = 30;      // seconds SIGTERM waits for requests in flight
  uint32_t max_connections = 512;   // connections served at once (a thread each)
  bool prefix_reuse = true;         // a request may start from the cache a slot kept
  LogFormat log_format = LogFormat::Text;  // of the line each request gets on stderr
};

// JSON out: text the tokenizer made is valid UTF-8, but a token's own bytes may not be.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after) res.set_header("Retry-After", std::to_string(e.retry_after));
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(e.body(), "application/json");
}

// OpenAI's logprobs object for some tokens; `offset` is the text's length before them (bytes).
json logprobs_json(const std::vector<TokenLogprob>& tokens, const model::Tokenizer& tok,
                   uint32_t model_vocab, size_t& offset) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const TokenLogprob& t : tokens) {
    const std::string bytes = tok.generated_bytes(t.id, model_vocab);
    out["tokens"].push_back(model::sanitize_utf8(bytes));
    out["token_logprobs"].push_back(t.logprob ? json(*t.logprob) : json(nullptr));
    if (!t.logprob) {
      out["top_logprobs"].push_back(nullptr);
    } else {
      json top = json::object();
      // Best first: where two ids print the same (bytes of a split character), the better stays.
      for (auto [id, lp] : t.top) top.emplace(model::sanitize_utf8(tok.generated_bytes(id, model_vocab)), lp);
      out["top_logprobs"].push_back(top);
    }
    out["text_offset"].push_back(offset);
    offset += bytes.size();
  }
  return out;
}

// The connection of the request this thread handles (httplib runs a request's handlers, a
// stream's content provider, and then its logger on the connection's thread): its socket, found
// by the guard, whether it must close after the response, and the figures its handler gives
// the log line.
struct Current {
  int fd = -1;
  bool close = false;
  RequestRecord record;
};
thread_local Current current;

// A completion's figures for the log, from its engine's last event.
void log_figures(const Event& done) {
  current.record.completion = CompletionFigures{
      done.prompt_tokens, done.completion_tokens, done.queued_s * 1000,
      done.first_token_s ? std::optional(*done.first_token_s * 1000) : std::nullopt,
      done.total_s * 1000, done.finish_reason};
}

struct Server {
  Server(const ServeArgs& a, Session& s, std::string name, uint32_t ctx)
      : args(a), session(s), model_name(std::move(name)), context(ctx) {}
  const ServeArgs& args;
  Session& session;  // a decoder's (completions); empty for an encoder or an encoder-decoder
  // An encoder's (embeddings), or null, and its queue: the requests that wait while it runs
  // are encoded together in its next round.
  EncoderSession* encoder = nullptr;
  Pooling pooling;
  std::unique_ptr<EncodeQueue> encode_queue;
  // An encoder-decoder's (completions of a source text), or null; its runner generates the
  // requests in rounds, in arrival order (greedy ones together), with the folder's
  // generation_config.json as defaults.
  Seq2SeqSession* seq2seq = nullptr;
  std::unique_ptr<Seq2SeqRunner> runner;
  model::BeamSettings search;
  const std::string model_name;
  const uint32_t context;
  Metrics metrics;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ConnectionGuard> guard;  // once the port is known
  std::atomic<bool> draining{false};
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  // Completion responses not yet written out: a shutdown stops the server only after them.
  std::mutex inflight_mutex;
  std::condition_variable inflight_done;
  uint32_t inflight = 0;
  void begin_response() {
    std::lock_guard lock(inflight_mutex);
    inflight++;
  }
  void end_response() {
    std::lock_guard lock(inflight_mutex);
    inflight--;
    inflight_done.notify_all();
  }
  // Drains the engine, waits for the responses in flight to be written, stops listening.
  void shut_down() {
    if (engine) engine->drain();
    std::unique_lock lock(inflight_mutex);
    inflight_done.wait(lock, [&] { return inflight == 0; });
    lock.unlock();
    // stop() does nothing before listening has begun: wait for that (a signal soon after start).
    while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
  }

  json chunk(const std::string& id, std::time_t created, const std::string& text,
             const json& logprobs, const json& finish) const {
    return {{"id", id},
            {"object", "text_completion"},
            {"created", created},
            {"model", model_name},
            {"choices",
             json::array({{{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish}}})}};
  }

  // The API key, where one is set: false after answering 401.
  bool authorized(const httplib::Request& req, httplib::Response& res) const {
    if (args.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + args.api_key)
      return true;
    send_error(res, ApiError(401, "a valid API key is required: send the header "
                                  "'Authorization: Bearer <key>' (the server's --api-key)"));
    return false;
  }

  // The body, read here rather than by httplib: the same --max-body limit whatever the
  // framing (a length, chunks) or content type (curl -d sends a form's), and the key checked
  // only after the body is off the connection.
  // A body that does not arrive within --request-timeout is cut off too (408), so that a
  // client trickling bytes holds its thread no longer; an unread rest closes the connection.
  std::string read_body(const httplib::ContentReader& reader, httplib::Response& res) const {
    std::string body;
    bool over = false, late = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(args.request_timeout);
    const bool read = reader([&](const char* data, size_t n) {
      if (body.size() + n > args.max_body) {
        over = true;
        return false;
      }
      if (std::chrono::steady_clock::now() > until) {
        late = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (!read || over || late) {
      current.close = true;
      res.set_header("Connection", "close");
    }
    if (over)
      throw ApiError(413, "the request body is larger than this server's limit of " +
                              std::to_string(args.max_body) + " bytes (--max-body)");
    if (late)
      throw ApiError(408, "the request body did not arrive within " +
                              std::to_string(args.request_timeout) + " s (--request-timeout)");
    if (!read)
      throw ApiError(400, "the request body could not be read (cut short, or malformed chunks)");
    return body;
  }

  const model::Config& config() const {
    return encoder ? encoder->checkpoint->config()
           : seq2seq ? seq2seq->checkpoint->config()
                     : session.model->config();
  }
  std::string device_name() const {
    return encoder ? encoder->encoder->device_name()
           : seq2seq ? seq2seq->model->decoder().device_name()
                     : session.model->device_name();
  }
  bool device_lost() const {
    const vk::Device* d = encoder ? encoder->device.get()
                          : seq2seq ? seq2seq->device.get()
                                    : session.device.get();
    return d && d->lost();
  }

  // /v1/embeddings: each input encoded whole and pooled as the folder says.
  void embeddings(const std::string& body, httplib::Response& res) {
    if (!encoder)
      throw ApiError(400, std::string("this server runs ") +
                              (seq2seq ? "an encoder-decoder (Marian, T5), which translates"
                                       : "a decoder (GPT-2)") +
                              ": /v1/embeddings needs an encoder (a BERT folder); use "
                              "/v1/completions");
    if (draining) throw ApiError(503, "the server is shutting down");
    const EmbeddingsRequest r = parse_embeddings(body, *encoder->wordpiece, config());
    begin_response();
    struct End {
      Server& s;
      ~End() { s.end_response(); }
    } end{*this};
    std::vector<std::vector<float>> out;
    size_t tokens = 0;
    {
      std::vector<model::EncoderInput> inputs;
      for (const EmbeddingsRequest::Input& in : r.inputs) inputs.push_back({in.ids, in.types});
      const std::vector<std::vector<float>> hidden = encode_queue->encode(inputs);
      for (size_t i = 0; i < r.inputs.size(); i++) {
        out.push_back(pool(hidden[i], r.inputs[i].ids.size(), config().n_embd, pooling));
        tokens += r.inputs[i].ids.size();
      }
    }
    current.record.embeddings = EmbeddingFigures{r.inputs.size(), tokens};
    res.set_content(embeddings_response(out, r.base64, model_name, tokens), "application/json");
  }

  // /v1/completions of an encoder-decoder: the prompt is the source; the whole text is known
  // only once the search ends, so a stream is that one chunk.
  void seq2seq_completions(const std::string& body, httplib::Response& res) {
    if (draining) throw ApiError(503, "the server is shutting down");
    const Seq2SeqRequest r = parse_seq2seq(body, *seq2seq->source, config(), search);
    begin_response();
    struct End {
      Server& s;
      ~End() { s.end_response(); }
    } end{*this};
    const std::time_t created = std::time(nullptr);
    const auto arrived = std::chrono::steady_clock::now();
    using ms = std::chrono::duration<double, std::milli>;
    const std::optional<Seq2SeqResult> out = runner->run(r, [] {
      return current.fd >= 0 && ConnectionGuard::peer_closed(current.fd);
    });
    if (!out) {  // the client left while it waited
      res.status = 499;
      return;
    }
    // A search's text comes whole at its end: no first-token time; the wait is in the total.
    current.record.completion = CompletionFigures{
        out->prompt_tokens, out->completion_tokens, std::nullopt, std::nullopt,
        ms(std::chrono::steady_clock::now() - arrived).count(),
        out->finish_reason};
    res.set_content(seq2seq_response(*out, r.stream, "cmpl-" + std::to_string(next_id++), created,
                                     model_name),
                    r.stream ? "text/event-stream" : "application/json");
  }

  // How a decoder's answer is written: OpenAI's object for the whole text (and its tokens'
  // log-probabilities, where asked), or the server-sent events of each event of a stream.
  struct Answer {
    std::function<json(const std::string& text, const std::vector<TokenLogprob>& tokens,
                       const Event& done)> whole;
    std::function<std::string(const Event& e)> events;  // "data: ...\n\n" lines; [DONE] last
  };

  void completions(const std::string& body, httplib::Response& res) {
    if (seq2seq) return seq2seq_completions(body, res);
    if (encoder)
      throw ApiError(400, "this server runs an encoder (BERT): it has no next token to "
                          "complete; use /v1/embeddings");
    CompletionRequest r = parse_completion(body, *session.tokenizer, session.model->config(), context);
    const std::string id = "cmpl-" + std::to_string(next_id++);
    const std::time_t created = std::time(nullptr);
    const bool with_logprobs = r.logprobs.has_value();
    auto offset = std::make_shared<size_t>(0);  // the stream's text so far, in bytes
    const uint32_t V = session.model->config().n_vocab;
    Answer a;
    a.whole = [=, this](const std::string& text, const std::vector<TokenLogprob>& tokens,
                        const Event& done) {
      size_t at = 0;
      const json lp = with_logprobs ? logprobs_json(tokens, *session.tokenizer, V, at) : json(nullptr);
      json out = chunk(id, created, text, lp, done.finish_reason);
      out["usage"] = usage(done);
      return out;
    };
    a.events = [=, this](const Event& e) {
      if (e.error) return "data: " + e.error->body() + "\n\n";
      const json lp = with_logprobs ? logprobs_json(e.logprobs, *session.tokenizer, V, *offset)
                                    : json(nullptr);
      json part = chunk(id, created, e.text, lp, e.done ? json(e.finish_reason) : json(nullptr));
      if (e.done) part["usage"] = usage(e);
      std::string out = "data: " + dump(part) + "\n\n";
      if (e.done) out += "data: [DONE]\n\n";
      return out;
    };
    respond(std::move(r), res, std::move(a));
  }

  // /v1/chat/completions: the messages rendered with the plain template, then run as a
  // completion.
  void chat_completions(const std::string& body, httplib::Response& res) {
    if (seq2seq || encoder)
      throw ApiError(404, std::string("this server runs ") +
                              (seq2seq ? "an encoder-decoder (Marian, T5): it has no chat "
                                         "template; send the source text as the prompt of "
                                         "/v1/completions"
                                       : "an encoder (BERT): it has no next token to chat "
                                         "with; use /v1/embeddings"));
    CompletionRequest r = parse_chat(body, *session.tokenizer, session.model->config(), context);
    const std::string id = "chatcmpl-" + std::to_string(next_id++);
    const std::time_t created = std::time(nullptr);
    auto stream = std::make_shared<ChatStream>(id, created, model_name);
    Answer a;
    a.whole = [=, this](const std::string& text, const std::vector<TokenLogprob>&, const Event& done) {
      return chat_response(id, created, model_name, text, done);
    };
    a.events = [stream](const Event& e) { return stream->events(e); };
    respond(std::move(r), res, std::move(a));
  }

  // The job's next event, or none once the client has gone (it is then cancelled, which frees
  // the engine at its next token, and the status is 499: nginx's "client closed request", for
  // the log and the metrics).
  static std::optional<Event> next_unless_gone(Job& job, httplib::Response& res) {
    while (true) {
      std::optional<Event> e = job.next(std::chrono::milliseconds(200));
      if (current.fd >= 0 && ConnectionGuard::peer_closed(current.fd)) {
        job.cancel();
        res.status = 499;
        return std::nullopt;
      }
      if (e) return e;
    }
  }

  // Runs a decoder's request on the engine and writes its answer, whole or streamed.
  void respond(CompletionRequest r, httplib::Response& res, Answer answer) {
    // Counted before it can start, so that a shutdown waits for its response.
    begin_response();
    // Ends the response's count where the handler returns, unless a stream's writer took it.
    struct Pending {
      Server& s;
      bool owned = true;
      ~Pending() {
        if (owned) s.end_response();
      }
    } pending{*this};
    std::shared_ptr<Job> job = engine->submit(std::move(r));
    // Nothing is sent before the first event, streamed or not: a request refused before its
    // first token (the queue drained by SIGTERM, the GPU lost) is a 503 of its own, which a
    // proxy in front (deploy/haproxy.cfg) retries on another replica. Only a stream that has
    // begun ends with its error as an event.
    std::optional<Event> first = next_unless_gone(*job, res);
    if (!first) return;
    if (first->error) throw *first->error;
    if (!job->request.stream) {
      std::string text;
      std::vector<TokenLogprob> tokens;
      for (std::optional<Event> e = std::move(first); e; e = next_unless_gone(*job, res)) {
        if (e->error) throw *e->error;
        tokens.insert(tokens.end(), e->logprobs.begin(), e->logprobs.end());
        text += e->text;
        if (!e->done) continue;
        log_figures(*e);
        res.set_content(dump(answer.whole(text, tokens, *e)), "application/json");
        return;
      }
      return;  // the client left
    }
    // Server-sent events, then [DONE]. A write that fails (the client left) cancels the job,
    // which frees the engine at its next token; while nothing comes (a long prompt's pass), a
    // comment line every second finds a closed connection too.
    res.set_header("Cache-Control", "no-cache");
    pending.owned = false;  // the writer's release ends it
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, events = std::move(answer.events),
         held = std::make_shared<std::optional<Event>>(std::move(first))](size_t,
                                                                          httplib::DataSink& sink) {
          std::optional<Event> e = std::exchange(*held, std::nullopt);
          if (!e) e = job->next(std::chrono::milliseconds(1000));
          if (!e) {
            static const std::string ping = ": waiting\n\n";
            if (!sink.write(ping.data(), ping.size())) return false;
            return true;
          }
          // Nothing to send (a piece the chat template took) must not reach the sink: an empty
          // chunk is the end of a chunked response.
          const std::string out = events(*e);
          if (e->done && !e->error) log_figures(*e);
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (e->done) sink.done();
          return true;
        },
        [this, job](bool success) {
          if (!success) job->cancel();
          end_response();
        });
  }

  void routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response&) {
      current = {guard ? guard->started(req.remote_addr, req.remote_port) : -1, false};
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
      try {
        const std::string body = read_body(reader, res);
        if (authorized(req, res)) completions(body, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
      try {
        const std::string body = read_body(reader, res);
        if (authorized(req, res)) chat_completions(body, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) {
      try {
        const std::string body = read_body(reader, res);
        if (authorized(req, res)) embeddings(body, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const model::Config& c = config();
      json m = {{"id", model_name},         {"object", "model"},
                {"created", 0},             {"owned_by", "gpt2vk"},
                {"context_length", context}, {"n_ctx", c.n_ctx},
                {"n_vocab", c.n_vocab},     {"device", device_name()}};
      if (encoder) m["embedding_dimension"] = c.n_embd;
      if (seq2seq) m["max_beams"] = std::min(kMaxServeBeams, c.n_vocab / 2);
      res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining) {  // a load balancer stops sending here at once
        res.status = 503;
        res.set_content(dump({{"status", "draining"}, {"reason", "the server is shutting down"}}),
                        "application/json");
      } else if (std::optional<std::string> failure = engine ? engine->failure() : std::nullopt) {
        res.status = 503;
        res.set_content(dump({{"status", "error"}, {"reason", *failure}}), "application/json");
      } else if (device_lost()) {
        res.status = 503;
        res.set_content(dump({{"status", "error"}, {"reason", "the GPU is lost"}}), "application/json");
      } else {
        res.set_content(dump({{"status", "ok"}}), "application/json");
      }
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(metrics.text(), "text/plain; version=0.0.4");
    });
    // Statuses httplib sets itself (404, 413, 400 for an unreadable request) get a body too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404)
        send_error(res, ApiError(404, "no such endpoint: " + req.method + " " + req.path));
      else if (res.status == 413)
        send_error(res, ApiError(413, "the request is larger than this server accepts"));
      else
        send_error(res, ApiError(res.status, "the request could not be read (HTTP " +
                                                 std::to_string(res.status) + ")"));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "internal error: " + what));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const bool known = req.path == "/v1/completions" || req.path == "/v1/chat/completions" ||
                         req.path == "/v1/embeddings" ||
                         req.path == "/v1/models" ||
                         req.path == "/health" || req.path == "/metrics";
      metrics.request(known ? req.path : "other", res.status);
      RequestRecord& r = current.record;
      r.method = req.method, r.path = req.path, r.status = res.status;
      r.remote_addr = req.remote_addr, r.remote_port = req.remote_port;
      std::fprintf(stderr, "%s\n",
                   request_line(r, args.log_format, std::chrono::system_clock::now()).c_str());
      if (guard) guard->finished(req.remote_addr, req.remote_port, current.close);
      current = {};
    });
  }
};

int serve_on(const ServeArgs& args, Session& s, EncoderSession* enc, Seq2SeqSession* s2s,
             uint32_t context, sigset_t signals);

int serve(const ServeArgs& args) {
  // SIGINT and SIGTERM go to one thread that drains the engine and stops the server; every
  // thread made from here on inherits the mask. A client gone mid-write is an error, not SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // An encoder's folder serves embeddings; a decoder's or an encoder-decoder's, completions.
  Session s;
  EncoderSession enc;
  if (encoder_folder(args.model)) {
    if (args.parallel > 1)
      throw std::runtime_error("--parallel is for decoders: an encoder batches the requests "
                               "that wait for it by itself");
    ModelArgs margs = args.model;
    margs.encoder_batch = kServeEncoderBatch;  // a round's inputs, that many to a pass
    enc = open_encoder(margs);
    return serve_on(args, s, &enc, nullptr, enc.checkpoint->config().n_ctx, signals);
  }
  if (seq2seq_folder(args.model)) {
    if (args.parallel > 1)
      throw std::runtime_error(
          "--parallel is for decoders: an encoder-decoder decodes greedy "
          "requests together on its own, a request's beams together");
    ModelArgs margs = args.model;
    // A slot per beam on a GPU, or per greedy request of a round, with a source of its own.
    margs.slots = margs.sources = kMaxServeBeams;
    Seq2SeqSession s2s = open_seq2seq(margs);
    return serve_on(args, s, nullptr, &s2s, s2s.checkpoint->config().n_ctx, signals);
  }
  s = open_checkpoint(args.model);
  const model::Config& c = s.checkpoint->config();
  if (!c.causal)
    throw std::runtime_error("serve needs a causal model: a bidirectional one has no next token to predict");
  const uint32_t context = args.ctx_per_slot ? args.ctx_per_slot : c.n_ctx;
  if (context > c.n_ctx)
    throw std::runtime_error("--ctx-per-slot " + std::to_string(context) +
                             " is longer than the model's context of " + std::to_string(c.n_ctx));
  ModelArgs margs = args.model;
  margs.slots = args.parallel;  // a KV cache of `context` tokens per request decoding at once
  margs.slot_context = args.parallel > 1 ? context : 0;
  open_model(s, margs);
  // The pipelines of a prompt chunk and of decoding (the engine reads every logit), and with
  // slots of every batch, before the first request (an echo's every-row pass compiles at first
  // use).
  s.model->prepare(std::min<uint32_t>(context, Engine::kPrefillChunk), context, 0);
  return serve_on(args, s, nullptr, nullptr, context, signals);
}

// Serves a decoder's session (its engine made here), an encoder's, or an encoder-decoder's (its
// runner made here).
int serve_on(const ServeArgs& args, Session& s, EncoderSession* enc, Seq2SeqSession* s2s,
             uint32_t context, sigset_t signals) {
  std::string name = model_dir(args.model).filename().string();
  Server server(args, s, name.empty() ? "model" : name, context);
  if (enc) {
    server.encoder = enc;
    server.pooling = folder_pooling(enc->checkpoint->dir(), {});
    server.encode_queue =
        std::make_unique<EncodeQueue>(*enc->encoder, server.metrics, kMaxEmbeddingInputs);
  } else if (s2s) {
    server.seq2seq = s2s;
    server.search = generation_config(s2s->checkpoint->dir());
    if (server.search.beams > kMaxServeBeams)
      std::fprintf(stderr, "gpt2vk: note: generation_config.json asks for %u beams; this server "
                           "searches with at most %u\n", server.search.beams, kMaxServeBeams);
    server.runner = std::make_unique<Seq2SeqRunner>(*s2s, server.metrics, args.max_queue);
  } else {
    server.engine = std::make_unique<Engine>(*s.model, *s.tokenizer, server.metrics,
                                             args.max_queue, args.prefix_reuse,
                                             [&s] { return s.device && s.device->lost(); });
  }
  server.routes();
  // A thread for each connection, up to --max-connections: slow or idle clients cannot leave
  // /health or a running request waiting for a worker. httplib's read timeout bounds each read;
  // the guard bounds a request's headers as a whole, and read_body its body.
  const uint32_t max_connections = args.max_connections;
  server.http.new_task_queue = [max_connections] { return new ConnectionPool(max_connections); };
  server.http.set_read_timeout(args.request_timeout, 0);
  server.http.set_keep_alive_timeout(1);  // an idle connection holds a thread no longer
  // SO_REUSEADDR only: a restart binds a port still in TIME_WAIT, but a second server on a port
  // in use fails (httplib's default adds SO_REUSEPORT, and two servers then share the port).
  int listen_fd = -1;
  server.http.set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  errno = 0;
  const int port = args.port ? (server.http.bind_to_port(args.host, args.port) ? args.port : -1)
                             : server.http.bind_to_any_port(args.host);
  if (port <= 0)
    throw std::runtime_error(
        "cannot listen on " + args.host + ":" + std::to_string(args.port) +
        (errno == EADDRINUSE ? ": the port is in use (another server there?); pick another "
                               "with --port, or --port 0 for any free one"
                             : ": not an address of this machine, or not allowed"));
  // httplib listens with a backlog of 5; listening again sets the queue the kernel keeps for
  // connections not yet accepted (Linux and the BSDs take a second listen()).
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  server.guard = std::make_unique<ConnectionGuard>(port, std::chrono::seconds(args.request_timeout));
  std::fprintf(stderr, "gpt2vk: serving %s (%s) on http://%s:%d, context %u per request\n",
               server.model_name.c_str(), server.device_name().c_str(), args.host.c_str(), port,
               context);

  std::atomic<bool> listening{true};
  std::thread stopper([&server, &listening, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (!listening) return;  // the server stopped by itself; main woke this thread
    std::fprintf(stderr, "gpt2vk: %s: finishing the requests in flight (at most %u s), then "
                         "stopping (again to stop at once)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 server.args.drain_timeout);
    // /health says 503 from now on, and idle or slow connections are closed; new requests are
    // refused (engine drain); past --drain-timeout the process exits anyway.
    server.draining = true;
    server.guard->drain();
    const uint32_t limit = server.args.drain_timeout;
    std::thread([limit] {
      std::this_thread::sleep_for(std::chrono::seconds(limit));
      std::fprintf(stderr, "gpt2vk: --drain-timeout of %u s passed: requests in flight cut off\n",
                   limit);
      std::_Exit(1);
    }).detach();
    // A second signal ends the process without waiting.
    std::thread([signals] {
      int again = 0;
      sigwait(&signals, &again);
      std::fprintf(stderr, "gpt2vk: stopped at once, requests in flight cut off\n");
      std::_Exit(1);
    }).detach();
    server.shut_down();
  });
  const bool ok = server.http.listen_after_bind();
  if (listening.exchange(false)) pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  server.guard.reset();
  server.engine.reset();
  std::fprintf(stderr, "gpt2vk: server stopped\n");
  return ok ? 0 : 1;
}

}  // namespace

Command add_serve(CLI::App& cli) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server: /v1/completions and /v1/chat/completions (a "
               "GPT-2 folder, chat with gpt2vk's plain template, docs/chat.md), /v1/completions (an "
               "encoder-decoder's (Marian, T5): the prompt is the source text, translated by "
               "greedy or beam search, num_beams per request), or /v1/embeddings (a BERT "
               "folder); /v1/models, /health, /metrics");
  add_model_options(*cmd, args->model);
  cmd->add_option("--host", args->host,
                  "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", args->port, "port (default 8080; 0: any free port)")
      ->check(whole_number(0, 65535, " (0: any free port)"));
  cmd->add_option(
         "--parallel", args->parallel,
         "requests decoding together, each with a KV cache of --ctx-per-slot tokens "
         "(default 1, at most 8; more than 1 needs a GPU model of a decoder: an "
         "encoder's and an encoder-decoder's requests that wait share rounds on their own)")
      ->check(whole_number(1, 8));
  cmd->add_option("--ctx-per-slot", args->ctx_per_slot,
                  "tokens of prompt plus completion a request may use (default: the model's "
                  "context)")
      ->check(whole_number(1, 1u << 20));
  cmd->add_flag_callback(
      "--no-prefix-reuse", [args] { args->prefix_reuse = false; },
      "compute every prompt whole; by default a request whose prompt starts with the tokens a "
      "free slot's cache holds takes them from it, in whole 64-token chunks (the same tokens "
      "and log-probabilities either way; a request's cache_prompt: false does the same)");
  cmd->add_option("--api-key", args->api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health");
  cmd->add_option("--max-queue", args->max_queue,
                  "requests that may wait for a slot; more get 503 with Retry-After (default 16)")
      ->check(whole_number(1, 4096));
  cmd->add_option("--max-body", args->max_body, "largest request body in bytes (default 1 MiB)")
      ->check(whole_number(64, uint64_t{1} << 30));
  cmd->add_option("--request-timeout", args->request_timeout,
                  "seconds a client may take to send a request's headers, and again its body "
                  "(default 10); slower ones are cut off")
      ->check(whole_number(1, 3600));
  cmd->add_option("--drain-timeout", args->drain_timeout,
                  "seconds SIGTERM waits for the requests in flight before exiting anyway "
                  "(default 30)")
      ->check(whole_number(0, 86400));
  cmd->add_option("--max-connections", args->max_connections,
                  "connections served at once, a thread each; more wait (default 512)")
      ->check(whole_number(8, 65536));
  cmd->add_option_function<std::string>(
         "--log-format",
         [args](const std::string& v) {
           args->log_format = v == "json" ? LogFormat::Json : LogFormat::Text;
         },
         "each request's line on stderr: text (default) or json, an object a line (ts, method, "
         "path, status, remote; a completion's prompt_tokens, completion_tokens, queue_ms, "
         "ttft_ms, total_ms, tokens_per_s, finish_reason; embeddings' inputs, tokens)")
      ->check(CLI::IsMember({"text", "json"}));
  return {cmd, [args] { return serve(*args); }};
}

}  // namespace app
