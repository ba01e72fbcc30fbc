// gpt2vk serve's /v1/embeddings driven by the official openai client (tests/test_serve_embeddings.cpp
// runs this). Argument: a JSON object {base_url, input}. The client asks for base64 unless told
// otherwise and decodes it itself; both ways are printed: {base64: [[...]], float: [[...]], usage}.
import OpenAI from 'openai';

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: `${cfg.base_url}/v1`, apiKey: 'unused', maxRetries: 0 });
const plain = await client.embeddings.create({ model: 'gpt2vk', input: cfg.input });
const floats = await client.embeddings.create({
  model: 'gpt2vk', input: cfg.input, encoding_format: 'float',
});
console.log(JSON.stringify({
  base64: plain.data.map((d) => d.embedding),
  float: floats.data.map((d) => d.embedding),
  usage: plain.usage,
}));
