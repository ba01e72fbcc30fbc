// gpt2vk serve's /v1/chat/completions driven by the official openai client
// (tests/test_serve_chat.cpp runs this and checks what it prints). Argument: a JSON object
// {base_url, messages, max_tokens}. Prints one JSON object: what each call returned.
import OpenAI from 'openai';

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({
  baseURL: `${cfg.base_url}/v1`,
  apiKey: 'unused',
  maxRetries: 0,
  timeout: 300_000,
});
const greedy = { model: 'gpt2vk', messages: cfg.messages, max_tokens: cfg.max_tokens, temperature: 0 };
const out = {};

const one = await client.chat.completions.create(greedy);
out.object = one.object;
out.role = one.choices[0].message.role;
out.content = one.choices[0].message.content;
out.finish_reason = one.choices[0].finish_reason;
out.usage = one.usage;

// Streamed: the role first, then the content in pieces, then the finish_reason.
const stream = await client.chat.completions.create({ ...greedy, stream: true });
out.streamed = '';
out.chunk_objects = [];
out.roles = [];
out.finish_reasons = [];
for await (const chunk of stream) {
  out.chunk_objects.push(chunk.object);
  const choice = chunk.choices[0];
  if (choice.delta.role) out.roles.push(choice.delta.role);
  out.streamed += choice.delta.content ?? '';
  if (choice.finish_reason) out.finish_reasons.push(choice.finish_reason);
}

// max_completion_tokens, the newer name.
const newer = await client.chat.completions.create({
  model: 'gpt2vk', messages: cfg.messages, max_completion_tokens: 3, temperature: 0,
});
out.newer_tokens = newer.usage.completion_tokens;

// A refusal arrives as the client's APIError, with OpenAI's fields.
try {
  await client.chat.completions.create({ model: 'gpt2vk', messages: [{ role: 'tool', content: 'x' }] });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, param: e.param, message: e.message, api_error: e instanceof OpenAI.APIError };
}

console.log(JSON.stringify(out));
