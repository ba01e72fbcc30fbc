// BertNormalizer and BertPreTokenizer as the tokenizers crate (Hugging Face) runs them, which is
// what transformers' BertTokenizer uses since version 5 and what the fixtures in tests/data/hf
// were made with. Where it differs from the older Python BertTokenizer we follow the crate:
//   - a control is Cc, Cf or Co (not Cn, not Cs), and is dropped; whitespace is Unicode's
//     White_Space property (so U+2028 is a space, where Python keeps it as a character);
//   - accents are stripped before lowercasing, not after;
//   - the CJK ranges start CJK Extension E's block at U+2B920, not U+2B820 (the crate's
//     table; 'a\U0002B820b' stays one word there, checked in tests/test_wordpiece.cpp).
// Lowercasing is per code point with the full mapping (Rust's char::to_lowercase): U+0130 becomes
// "i" + U+0307, and a final capital sigma becomes σ, not ς (no context).
#include "model/text/bert_normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <stdexcept>

namespace model {

namespace {

bool is_whitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  return (mask & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK)) != 0;
}

bool is_punctuation(char32_t c) {
  const bool ascii = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                     (c >= 123 && c <= 126);
  return ascii || (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

// CJK Unified Ideographs and their extensions and compatibility blocks; Hangul, kana and the
// rest are not here: BERT's vocabularies write them as ordinary words.
bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string to_utf32(const icu::UnicodeString& s) {
  std::u32string out;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

std::u32string strip_accents(std::u32string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU NFD: ") + u_errorName(status));
  const icu::UnicodeString source = icu::UnicodeString::fromUTF32(
      reinterpret_cast<const UChar32*>(text.data()), static_cast<int32_t>(text.size()));
  const icu::UnicodeString decomposed = nfd->normalize(source, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU NFD: ") + u_errorName(status));
  std::u32string out;
  for (char32_t c : to_utf32(decomposed)) {
    if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) out.push_back(c);
  }
  return out;
}

// One code point's full lowercase mapping, without context (1 to 3 code points).
void append_lower(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    return;
  }
  icu::UnicodeString one(static_cast<UChar32>(c));
  out += to_utf32(one.toLower(icu::Locale::getRoot()));
}

}  // namespace

std::u32string bert_normalize(std::u32string_view text, const BertNormalizerOptions& options) {
  std::u32string s;
  s.reserve(text.size());
  for (char32_t c : text) {
    if (options.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = ' ';
    }
    if (options.handle_chinese_chars && is_chinese(c)) {
      s += U' ';
      s += c;
      s += U' ';
    } else {
      s += c;
    }
  }
  if (options.strip_accents.value_or(options.lowercase)) s = strip_accents(s);
  if (!options.lowercase) return s;
  std::u32string lower;
  lower.reserve(s.size());
  for (char32_t c : s) append_lower(lower, c);
  return lower;
}

std::vector<std::u32string> bert_pre_tokenize(std::u32string_view normalized) {
  std::vector<std::u32string> words;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char32_t c : normalized) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      words.push_back(std::u32string(1, c));
    } else {
      word += c;
    }
  }
  flush();
  return words;
}

}  // namespace model
