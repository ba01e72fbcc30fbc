// gpt2vk serve driven by the official openai client (tests/test_serve.cpp runs this and checks
// what it prints). Argument: a JSON object {base_url, prompt, ids, prompts, max_tokens}.
// Prints one JSON object: what each call returned.
import OpenAI from 'openai';

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({
  baseURL: `${cfg.base_url}/v1`,
  apiKey: cfg.api_key ?? 'unused',
  maxRetries: 0,
  timeout: 300_000,
});
const greedy = { model: 'gpt2vk', max_tokens: cfg.max_tokens, temperature: 0 };
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const one = await client.completions.create({ ...greedy, prompt: cfg.prompt });
out.text = one.choices[0].text;
out.finish_reason = one.choices[0].finish_reason;
out.usage = one.usage;

const stream = await client.completions.create({ ...greedy, prompt: cfg.prompt, stream: true });
out.streamed = '';
out.chunks = 0;
for await (const chunk of stream) {
  out.streamed += chunk.choices[0].text;
  out.chunks += 1;
}

// The prompt's own log-probabilities, from token ids.
const echo = await client.completions.create({
  model: 'gpt2vk', prompt: cfg.ids, max_tokens: 0, echo: true, logprobs: 1,
});
out.echo_text = echo.choices[0].text;
out.echo_logprobs = echo.choices[0].logprobs.token_logprobs;

// Eight at once.
const eight = await Promise.all(
  cfg.prompts.map((prompt) => client.completions.create({ ...greedy, prompt })),
);
out.eight = eight.map((r) => r.choices[0].text);

// A refusal arrives as the client's APIError, with OpenAI's fields.
try {
  await client.completions.create({ model: 'gpt2vk', prompt: cfg.prompt, max_tokens: 1_000_000 });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, code: e.code, param: e.param, message: e.message };
}

console.log(JSON.stringify(out));
