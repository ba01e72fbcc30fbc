// gpt2vk: run GPT-2-style transformers on any Vulkan GPU.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "apps/commands.h"

int main(int argc, char** argv) {
  CLI::App cli{"gpt2vk: GPT-2-style transformers on any Vulkan GPU"};
  cli.require_subcommand(1);

  app::DevicesArgs devices_args;
  CLI::App* devices = cli.add_subcommand("devices", "list every Vulkan device with its limits and features");
  devices->add_flag("--validation", devices_args.validation,
                    "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");

  app::OpbenchArgs opbench_args;
  CLI::App* opbench = cli.add_subcommand("opbench", "GPU time of every op at GPT-2 small shapes (timestamps)");
  opbench->add_option("--device", opbench_args.device, "device index or name (default: first GPU)");
  opbench->add_option("--precision", opbench_args.precision, "weight storage")
      ->check(CLI::IsMember({"f16", "f32"}));
  opbench->add_option("-r,--repeats", opbench_args.repeats, "timed calls per op")
      ->check(CLI::Range(1, 1000));
  opbench->add_option("-p,--prefill", opbench_args.prefill, "prefill tokens")
      ->check(CLI::Range(2, 1024));
  opbench->add_option("--kernels", opbench_args.kernels,
                      "the kernel set whose Auto kernels run: auto, gpu or cpu (default: "
                      "GPT2VK_KERNELS, else auto)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  opbench->add_option("--only", opbench_args.only, "time only the ops whose name contains this");

  app::BenchArgs bench_args;
  CLI::App* bench = cli.add_subcommand(
      "bench", "prompt processing (pp) and generation (tg) speed in tokens/s, like llama-bench");
  add_model_options(*bench, bench_args.model);
  bench->add_option("-p,--n-prompt", bench_args.n_prompt,
                    "prompt tokens of a pp test; a comma list runs several; 0 skips (default 128)")
      ->delimiter(',')
      ->check(CLI::Range(0u, 1u << 20));
  bench->add_option("-n,--n-gen", bench_args.n_gen,
                    "tokens of a tg test; a comma list runs several; 0 skips (default 32)")
      ->delimiter(',')
      ->check(CLI::Range(0u, 1u << 20));
  bench->add_option("-r,--repetitions", bench_args.repeats,
                    "timed runs per test after a warm-up (default 5)")
      ->check(CLI::Range(1, 1000));
  bench->add_flag("--json", bench_args.json,
                  "print a JSON array, one object per test, instead of the table");
  bench->add_flag("--profile", bench_args.profile,
                  "then GPU time per op kind (timestamps) and per-token submits, waits, descriptor "
                  "writes, binds, dispatches, barriers, on a second model instance");
  bench->add_option("--bandwidth", bench_args.bandwidth,
                    "the device's memory bandwidth in GB/s (its data sheet's figure): --profile "
                    "then shows the fraction of it each op and the whole token reach")
      ->check(CLI::PositiveNumber);

  bench->add_option("--parallel", bench_args.parallel,
                    "each tg test again with N sequences decoding together (gpt2vk serve "
                    "--parallel N), aggregate tokens/s; a comma list runs several")
      ->delimiter(',')
      ->check(CLI::Range(1u, 8u));

  app::TokenizeArgs tok_args;
  CLI::App* tokenize = cli.add_subcommand("tokenize", "print a text's token ids, or write them as int32");
  add_model_options(*tokenize, tok_args.model, true);
  tokenize->add_option("-p,--prompt", tok_args.prompt, "text to tokenize");
  tokenize->add_option("-f,--file", tok_args.file, "file to tokenize");
  tokenize->add_option("-o,--out", tok_args.out, "write the ids as little-endian int32 here");

  app::GenerateArgs gen_args;
  CLI::App* generate = cli.add_subcommand("generate", "continue a prompt, streaming the text to stdout");
  add_model_options(*generate, gen_args.model);
  generate->add_option("-p,--prompt", gen_args.prompt, "the text to continue");
  generate->add_option("-f,--file", gen_args.file, "read the prompt from a file");
  generate->add_option("-n,--n-predict", gen_args.n, "tokens to generate (default 64)")
      ->check(CLI::Range(0u, 1000000u));
  generate->add_option("--temp", gen_args.temp, "temperature; 0 = greedy (default 0.8)")
      ->check(CLI::Range(0.0f, 100.0f));
  generate->add_option("--top-k", gen_args.top_k, "keep the k likeliest tokens; 0 = all (default 40)");
  generate->add_option("--top-p", gen_args.top_p, "keep the likeliest tokens up to this mass (default 0.95)")
      ->check(CLI::Range(0.0f, 1.0f));
  generate->add_option("-s,--seed", gen_args.seed, "seed for reproducible sampling (default: random)")
      ->each([&](const std::string&) { gen_args.seed_given = true; });

  app::CompareArgs cmp_args;
  CLI::App* compare = cli.add_subcommand("compare", "run the GPU and the CPU reference on a prompt and compare logits");
  add_model_options(*compare, cmp_args.model);
  compare->add_option("-p,--prompt", cmp_args.prompt, "the text to run");
  compare->add_option("-f,--file", cmp_args.file, "read the text from a file");
  compare->add_option("--tolerance", cmp_args.tolerance,
                      "allowed |diff| relative to max(1, max|logit|) of a row (default 1e-4; "
                      "2e-3 with --kv-cache f16)")
      ->check(CLI::PositiveNumber);

  app::LogitsArgs logit_args;
  CLI::App* logits = cli.add_subcommand("logits", "int32 ids in, float32 logits [T, V] out");
  add_model_options(*logits, logit_args.model);
  logits->add_option("--ids", logit_args.ids, "int32 little-endian token ids")->required();
  logits->add_option("-o,--out", logit_args.out, "float32 little-endian logits [T, V]")->required();

  app::PerplexityArgs ppl_args;
  CLI::App* perplexity = cli.add_subcommand("perplexity", "mean negative log-likelihood and perplexity of a text");
  add_model_options(*perplexity, ppl_args.model);
  perplexity->add_option("-f,--file", ppl_args.file, "the text to score")->required();
  perplexity->add_option("-c,--ctx", ppl_args.ctx, "window length N (default: the model's context)")
      ->check(CLI::Range(1u, 1u << 20));

  app::AttentionArgs att_args;
  CLI::App* attention = cli.add_subcommand(
      "attention", "run a prompt once and show every head's attention: a page, JSON, or one head here");
  add_model_options(*attention, att_args.model);
  attention->add_option("-p,--prompt", att_args.prompt, "the text to run");
  attention->add_option("-f,--file", att_args.file, "read the text from a file");
  attention->add_option("-o,--out", att_args.out,
                        "write a self-contained HTML page of every layer x head here (without it: "
                        "one head as text on stdout)");
  attention->add_option("--json", att_args.json, "write the weights and tokens as JSON here");
  attention->add_option("--layer", att_args.layer, "only this layer (0-based)");
  attention->add_option("--head", att_args.head, "only this head (0-based)");

  app::ServeArgs serve_args;
  CLI::App* serve = cli.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server: /v1/completions, /v1/models, /health, /metrics");
  add_model_options(*serve, serve_args.model);
  serve->add_option("--host", serve_args.host, "address to listen on (default 127.0.0.1: this machine only)");
  serve->add_option("--port", serve_args.port, "port (default 8080; 0: any free port)");
  serve->add_option("--parallel", serve_args.parallel,
                    "requests decoding together, each with a KV cache of --ctx-per-slot tokens "
                    "(default 1, at most 8; more than 1 needs a GPU model)")
      ->check(CLI::Range(1u, 8u));
  serve->add_option("--ctx-per-slot", serve_args.ctx_per_slot,
                    "tokens of prompt plus completion a request may use (default: the model's context)")
      ->check(CLI::Range(1u, 1u << 20));
  serve->add_option("--api-key", serve_args.api_key,
                    "require 'Authorization: Bearer KEY' on every endpoint but /health");
  serve->add_option("--max-queue", serve_args.max_queue,
                    "requests that may wait for a slot; more get 503 with Retry-After (default 16)")
      ->check(CLI::Range(1u, 4096u));
  serve->add_option("--max-body", serve_args.max_body, "largest request body in bytes (default 1 MiB)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 30));
  serve->add_option("--request-timeout", serve_args.request_timeout,
                    "seconds a client may take to send a request's headers, and again its body "
                    "(default 10); slower ones are cut off")
      ->check(CLI::Range(1u, 3600u));
  serve->add_option("--drain-timeout", serve_args.drain_timeout,
                    "seconds SIGTERM waits for the requests in flight before exiting anyway "
                    "(default 30)")
      ->check(CLI::Range(0u, 86400u));
  serve->add_option("--max-connections", serve_args.max_connections,
                    "connections served at once, a thread each; more wait (default 512)")
      ->check(CLI::Range(8u, 65536u));

  app::MakeModelArgs make_args;
  CLI::App* make = cli.add_subcommand(
      "make-model", "write a random-weight checkpoint of a GPT-2 shape, with GPT-2's tokenizer");
  make->add_option("--shape", make_args.shape, "tiny (2 layers, width 128), small (124M), medium, large, xl (1.5B)")
      ->check(CLI::IsMember({"tiny", "small", "medium", "large", "xl"}));
  make->add_option("--dtype", make_args.dtype, "stored dtype (default f16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  make->add_option("-o,--out", make_args.out, "the folder to write")->required();
  make->add_option("-s,--seed", make_args.seed, "seed of the weights");

  app::TrainArgs train_args;
  CLI::App* train = cli.add_subcommand(
      "train", "train a model on a text file on the Vulkan device (one command buffer per step)");
  train->add_option("-m,--model", train_args.model.model, "continue from this checkpoint folder");
  train->add_option("--init", train_args.init,
                    "start a new model from this config.json with GPT-2's initialisation (the "
                    "tokenizer files, if GPT-2's, beside it)");
  train->add_option("--data", train_args.data, "the training text (UTF-8)")->required();
  train->add_option("--val-data", train_args.val_data, "a held-out text for --eval-every");
  train->add_option("-o,--out", train_args.out, "the checkpoint folder to write (not with --bench)");
  train->add_option("--resume", train_args.resume,
                    "go on from this checkpoint's weights, moments, step and data position "
                    "(the same data and flags again)");
  train->add_option("--steps", train_args.steps, "the run's total steps (default 1000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  train->add_option("--batch", train_args.batch, "sequences per step (default 4)");
  train->add_option("--ctx", train_args.ctx, "tokens per sequence (default 64)");
  train->add_option("--optimizer", train_args.optimizer, "adamw (default) or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  train->add_option("--lr", train_args.lr, "the learning rate (default 3e-4)")->check(CLI::PositiveNumber);
  train->add_option("--beta1", train_args.beta1, "AdamW's beta1 (default 0.9)")->check(CLI::Range(0.0f, 1.0f));
  train->add_option("--beta2", train_args.beta2, "AdamW's beta2 (default 0.95)")->check(CLI::Range(0.0f, 1.0f));
  train->add_option("--eps", train_args.eps, "AdamW's epsilon (default 1e-8)")->check(CLI::PositiveNumber);
  train->add_option("--weight-decay", train_args.weight_decay,
                    "decoupled weight decay of matrices and embeddings (default 0.1)")
      ->check(CLI::Range(0.0f, 1e6f));
  train->add_option("--grad-clip", train_args.grad_clip,
                    "the gradients' global norm bound; 0 disables (default 1.0)")
      ->check(CLI::Range(0.0f, 1e30f));
  train->add_option("--warmup", train_args.warmup, "steps of linear warm-up (default 0)");
  train->add_flag("--cosine", train_args.cosine, "cosine decay to --lr-min after the warm-up");
  train->add_option("--lr-min", train_args.lr_min, "the cosine schedule's floor (default 0)")
      ->check(CLI::Range(0.0f, 1e30f));
  train->add_option("--eval-every", train_args.eval_every,
                    "evaluate on --val-data every N steps and at the end (default 0: never)");
  train->add_option("--save-every", train_args.save_every, "save every N steps (always at the end)");
  train->add_option("--log", train_args.log, "JSON lines: step, loss, grad_norm, lr, tokens_per_s, val_loss");
  train->add_option("--seed", train_args.seed, "the initialisation's seed (default 1)");
  train->add_flag("--profile", train_args.profile,
                  "then the GPU time of each op kind in the last step (timestamps)");
  train->add_flag("--bench", train_args.bench,
                  "time --steps (>= 2) steps and print tokens/s, the median step after the "
                  "first; writes and evaluates nothing");
  train->add_option("--device", train_args.model.device, "GPU index or name");
  train->add_option("--kernels", train_args.model.kernels,
                    "the kernel set: gpu, cpu or auto (by the device; default, or GPT2VK_KERNELS)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  train->add_flag("--validation", train_args.model.validation,
                  "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");

  CLI11_PARSE(cli, argc, argv);
  try {
    if (devices->parsed()) return app::devices(devices_args);
    if (opbench->parsed()) return app::opbench(opbench_args);
    if (bench->parsed()) return app::bench(bench_args);
    if (tokenize->parsed()) return app::tokenize(tok_args);
    if (make->parsed()) return app::make_model(make_args);
    if (train->parsed()) return app::train(train_args);
    if (generate->parsed()) return app::generate(gen_args);
    if (compare->parsed()) return app::compare(cmp_args);
    if (logits->parsed()) return app::logits(logit_args);
    if (perplexity->parsed()) return app::perplexity(ppl_args);
    if (attention->parsed()) return app::attention(att_args);
    if (serve->parsed()) return app::serve(serve_args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2vk: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
