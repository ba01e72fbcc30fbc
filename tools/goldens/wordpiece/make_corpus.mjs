// Builds tests/data/wordpiece/corpus.json.br: over a megabyte of text in many scripts for the
// WordPiece check against Hugging Face's tokenizers (tests/node/wordpiece_reference.mjs).
//
//   node tools/goldens/wordpiece/make_corpus.mjs   # prints the sha256 to pin in the reference
//
// The natural text is CLDR's (Unicode licence), as Node's ICU carries it: language, region,
// script and currency names, dates, lists and relative times in ~100 locales, some upper-cased
// so that lowercasing and accent stripping have work. The rest is seeded noise from blocks whose
// characters are all older than the Unicode tables the tokenizers crate uses (so that the two
// sides' Unicode versions cannot disagree): Latin with accents, combining marks, Greek,
// Cyrillic, Hangul, kana, CJK (BMP and Extensions B and E), punctuation, controls, spaces,
// private use, emoji, and [MASK]-style special tokens. The output depends on Node's CLDR version:
// rebuild only to change the corpus, and pin the new hash.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const here = path.dirname(new URL(import.meta.url).pathname);
const out = path.join(here, '../../../tests/data/wordpiece/corpus.json.br');

const locales = `af am ar as az be bg bn bo br bs ca chr cs cy da de dz el en en-GB eo es es-MX et
  eu fa ff fi fil fo fr ga gd gl gu ha he hi hr hu hy id ig is it ja jv ka kk km kn ko ky lb lo
  lt lv mk ml mn mr ms mt my nb ne nl nn or pa pl ps pt pt-PT ro ru sd si sk sl so sq sr
  sr-Latn sv sw ta te tg th ti tk to tr tt ug uk ur uz vi wo xh yo yue zh zh-Hant zu`.split(/\s+/);
const languages = `af am ar as az be bg bn bo br bs ca cs cy da de dz el en eo es et eu fa fi fo
  fr ga gd gl gu ha he hi hr hu hy id ig is it ja jv ka kk km kn ko ky la lb lo lt lv mg mi mk ml
  mn mr ms mt my ne nl no ny or pa pl ps pt qu ro ru rw sa sd si sk sl sm sn so sq sr st su sv sw
  ta te tg th ti tk tl to tr tt ug uk ur uz vi wo xh yi yo zh zu`.split(/\s+/);
const regions = `AD AE AF AG AL AM AO AR AT AU AZ BA BB BD BE BF BG BH BI BJ BN BO BR BS BT BW BY
  BZ CA CD CF CG CH CI CL CM CN CO CR CU CV CY CZ DE DJ DK DM DO DZ EC EE EG ER ES ET FI FJ FM FR
  GA GB GD GE GH GM GN GQ GR GT GW GY HN HR HT HU ID IE IL IN IQ IR IS IT JM JO JP KE KG KH KI KM
  KN KP KR KW KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MG MH MK ML MM MN MR MT MU MV MW MX
  MY MZ NA NE NG NI NL NO NP NR NZ OM PA PE PG PH PK PL PT PW PY QA RO RS RU RW SA SB SC SD SE SG
  SI SK SL SM SN SO SR SS ST SV SY SZ TD TG TH TJ TL TM TN TO TR TT TV TZ UA UG US UY UZ VA VC VE
  VN VU WS YE ZA ZM ZW`.split(/\s+/);
const scripts = `Arab Armn Beng Bopo Cyrl Deva Ethi Geor Grek Gujr Guru Hang Hani Hans Hant Hebr
  Hira Jpan Kana Khmr Knda Kore Laoo Latn Mlym Mong Mymr Orya Sinh Taml Telu Thaa Thai Tibt`
  .split(/\s+/);
const currencies = `AED ARS AUD BRL CAD CHF CLP CNY COP CZK DKK EGP EUR GBP HKD HUF IDR ILS INR JPY
  KES KRW MXN MYR NGN NOK NZD PHP PKR PLN RUB SAR SEK SGD THB TRY TWD UAH USD VND ZAR`.split(/\s+/);

// Names of `codes` in `locale`, as one comma-separated text.
function names(locale, type, codes) {
  const d = new Intl.DisplayNames([locale], {type, fallback: 'none'});
  return codes.map((c) => d.of(c)).filter(Boolean).join(', ');
}

function cldrTexts(locale) {
  const texts = [];
  texts.push(names(locale, 'language', languages));
  texts.push(names(locale, 'region', regions));
  texts.push(names(locale, 'script', scripts) + '. ' + names(locale, 'currency', currencies));
  const dates = [];
  const full = new Intl.DateTimeFormat(locale, {dateStyle: 'full', timeStyle: 'long', timeZone: 'UTC'});
  for (let m = 0; m < 12; m++) dates.push(full.format(new Date(Date.UTC(2024, m, 3 + 2 * m, m, 7 * m))));
  const rel = new Intl.RelativeTimeFormat(locale, {numeric: 'auto'});
  for (const unit of ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'])
    for (const n of [-3, -1, 0, 1, 2]) dates.push(rel.format(n, unit));
  const list = new Intl.ListFormat(locale, {type: 'conjunction'});
  dates.push(list.format(dates.slice(0, 3)));
  const num = new Intl.NumberFormat(locale, {style: 'currency', currency: 'EUR'});
  dates.push(num.format(1234567.891), new Intl.NumberFormat(locale, {notation: 'compact',
    compactDisplay: 'long'}).format(9876543210));
  texts.push(dates.join('; '));
  return texts;
}

// xorshift32, so that the noise is the same on every machine.
let state = 0x9e3779b9;
function rand(n) {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state % n;
}

// [first, last] code points, every block here complete before Unicode 9.
const blocks = [
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x00, 0x1f], [0x7f, 0x9f], [0xa0, 0x24f],
  [0x300, 0x36f], [0x391, 0x3c9], [0x400, 0x4ff], [0x5d0, 0x5ea], [0x621, 0x64a], [0x905, 0x939],
  [0xe01, 0xe3a], [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x2000, 0x2064], [0x20a0, 0x20be],
  [0x3000, 0x303f], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fcc], [0xac00, 0xd7a3],
  [0xe000, 0xf8ff], [0xfb00, 0xfb06], [0xff01, 0xff5e], [0xfff9, 0xfffd], [0x1f300, 0x1f5ff],
  [0x20000, 0x2a6d6], [0x2b820, 0x2cea1],
];
const specials = ['[MASK]', '[CLS]', '[SEP]', '[PAD]', '[UNK]', '[mask]', '[unused1]'];

function noiseText(chars) {
  let s = '';
  while ([...s].length < chars) {
    const r = rand(20);
    if (r === 0) s += specials[rand(specials.length)];
    else if (r < 4) s += ' ';
    else {
      const [a, b] = blocks[rand(blocks.length)];
      s += String.fromCodePoint(a + rand(b - a + 1));
    }
  }
  return s;
}

const texts = [];
for (const locale of locales) {
  for (const t of cldrTexts(locale)) {
    texts.push(t);
    if (rand(4) === 0) texts.push(t.toLocaleUpperCase(locale));
  }
}
texts.push('a'.repeat(100), 'a'.repeat(101), 'İstanbul ΣΊΣΥΦΟΣ ǅemal Ǆ ß ẞ ﬁ', '');
for (let i = 0; i < 400; i++) texts.push(noiseText(20 + rand(400)));

const json = JSON.stringify(texts);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);
fs.mkdirSync(path.dirname(out), {recursive: true});
fs.writeFileSync(out, zlib.brotliCompressSync(Buffer.from(json), {
  params: {[zlib.constants.BROTLI_PARAM_QUALITY]: 11, [zlib.constants.BROTLI_PARAM_LGWIN]: 24},
}));
console.log(`${texts.length} texts, ${bytes} bytes of text, ${fs.statSync(out).size} bytes compressed`);
console.log('sha256 of the JSON:', crypto.createHash('sha256').update(json).digest('hex'));
