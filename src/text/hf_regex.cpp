// PCRE2 behind tokenizer.json patterns: compiled once with JIT, match data and a JIT stack reused.
#include "text/hf_regex.h"

#include <cstdint>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "core/json_text.h"
#include "core/utf8.h"
#include "text/encode_error.h"

namespace tpllama::hf {

struct Pattern::Compiled {
  std::string source;  // for messages
  pcre2_code* code = nullptr;
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ~Compiled() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(match_context);
    pcre2_match_data_free(match_data);
    pcre2_code_free(code);
  }
};

Pattern::~Pattern() = default;
Pattern::Pattern(Pattern&&) noexcept = default;
Pattern& Pattern::operator=(Pattern&&) noexcept = default;

namespace {

constexpr uint32_t kMatchLimit = 10'000'000;   // PCRE2's default step limit per match
constexpr uint32_t kHeapLimitKib = 64 * 1024;  // the interpreter's backtracking memory per match

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

// Oniguruma's Unicode classes, spelled out where PCRE2's differ: its \s is the White_Space set
// (PCRE2 adds U+180E), its \w is Letter, Mark, Number, Connector_Punctuation (PCRE2 leaves out
// marks), its \h is a hex digit (PCRE2: horizontal space).
constexpr std::string_view kOnigSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr std::string_view kOnigWord = R"(\p{L}\p{M}\p{N}\p{Pc})";
constexpr std::string_view kOnigHex = "0-9A-Fa-f";

// source with \s \w \h (and, outside brackets, \S \W \H) replaced by the sets above. A negated
// escape inside brackets keeps PCRE2's meaning: a class cannot hold a negated class.
std::string translate_onig(std::string_view source) {
  std::string out;
  bool in_class = false;
  size_t class_start = 0;  // where the current class's members begin
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    if (c == '\\' && i + 1 < source.size()) {
      char e = source[i + 1];
      if (e == 'Q') {  // \Q...\E is literal text: copy it whole
        size_t end = source.find("\\E", i + 2);
        end = end == std::string_view::npos ? source.size() : end + 2;
        out.append(source.substr(i, end - i));
        i = end - 1;
        continue;
      }
      std::string_view set = e == 's' || e == 'S'   ? kOnigSpace
                             : e == 'w' || e == 'W' ? kOnigWord
                             : e == 'h' || e == 'H' ? kOnigHex
                                                    : std::string_view();
      bool negated = e == 'S' || e == 'W' || e == 'H';
      if (!set.empty() && !(negated && in_class)) {
        if (!in_class) out += negated ? "[^" : "[";
        out.append(set);
        if (!in_class) out += ']';
      } else {
        out.append(source.substr(i, 2));
      }
      ++i;
      continue;
    }
    out.push_back(c);
    if (!in_class && c == '[') {
      in_class = true;
      class_start = i + 1;
      if (class_start < source.size() && source[class_start] == '^') ++class_start;
    } else if (in_class && c == '[' && i + 1 < source.size() && source[i + 1] == ':') {
      size_t end = source.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(source.substr(i + 1, end + 2 - (i + 1)));
        i = end + 1;
      }
    } else if (in_class && c == ']' && i != class_start) {  // a leading ']' is a member
      in_class = false;
    }
  }
  return out;
}

// A text the pattern cannot be matched over within PCRE2's limits: that text is refused.
[[noreturn]] void give_up(const std::string& source, int rc, size_t pos, size_t size) {
  std::string limit =
      rc == PCRE2_ERROR_MATCHLIMIT  ? detail::concat(" (the limit is ", kMatchLimit, " steps)")
      : rc == PCRE2_ERROR_HEAPLIMIT ? detail::concat(" (the limit is ", kHeapLimitKib, " KiB)")
                                    : std::string();
  throw EncodeError(detail::concat("the tokenizer's regex '", clip(source), "' gave up at byte ",
                                   pos, " of a ", size, "-byte text: ", pcre2_message(rc), limit));
}

}  // namespace

Pattern Pattern::regex(const std::string& source, const std::string& where) {
  Pattern p;
  p.compiled_ = std::make_unique<Compiled>();
  Compiled& c = *p.compiled_;
  c.source = source;
  int error = 0;
  PCRE2_SIZE offset = 0;
  std::string translated = translate_onig(source);
  c.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!c.code) {
    std::string as_pcre2 = translated == source ? "" : " (as PCRE2: '" + translated + "')";
    fail(where, ": regex '", source, "'", as_pcre2, " does not compile at offset ", offset, ": ",
         pcre2_message(error));
  }
  // Without JIT (a build of PCRE2 lacking it) the interpreter gives the same matches, slower.
  bool jit = pcre2_jit_compile(c.code, PCRE2_JIT_COMPLETE) == 0;
  c.match_data = pcre2_match_data_create_from_pattern(c.code, nullptr);
  c.match_context = pcre2_match_context_create(nullptr);
  if (!c.match_data || !c.match_context) fail(where, ": out of memory compiling '", source, "'");
  // Explicit, so messages can name them: PCRE2's default step limit, and far less than its default
  // 20 GB of backtracking memory for the interpreter (JIT's is its stack below).
  pcre2_set_match_limit(c.match_context, kMatchLimit);
  pcre2_set_heap_limit(c.match_context, kHeapLimitKib);
  if (jit) {
    // The default 32 KiB machine stack is too small for a long run of one class in some patterns.
    c.jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (c.jit_stack) pcre2_jit_stack_assign(c.match_context, nullptr, c.jit_stack);
  }
  return p;
}

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Pattern Pattern::from_json(const Json& j, const std::string& where) {
  if (j.is_object() && j.size() == 1) {
    auto it = j.begin();
    if (it.key() == "Regex" && it->is_string()) return regex(it->get<std::string>(), where);
    if (it.key() == "String" && it->is_string()) return literal(it->get<std::string>());
  }
  fail(where, ": pattern ", j.dump(), " is not {\"Regex\": string} or {\"String\": string}");
}

void Pattern::find_all(std::string_view text, std::vector<Span>& out) const {
  if (!compiled_) {
    if (literal_.empty()) return;  // Hugging Face: an empty string never matches
    for (size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size())) {
      out.push_back({at, at + literal_.size()});
    }
    return;
  }
  const Compiled& c = *compiled_;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text was validated once by the caller: checking it again on every call would make
    // matching quadratic in its length.
    int rc = pcre2_match(c.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, c.match_data,
                         c.match_context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) give_up(c.source, rc, pos, text.size());
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(c.match_data);
    Span m{ovector[0], ovector[1]};
    out.push_back(m);
    if (m.end > m.begin) {
      pos = m.end;
    } else {
      if (m.end >= text.size()) return;
      size_t n = utf8::valid_length(text, m.end);
      pos = m.end + (n ? n : 1);
    }
  }
}

bool replace_all(std::string_view text, const Pattern& pattern, const std::string& content,
                 size_t max_bytes, std::string& out) {
  std::vector<Span> matches;
  pattern.find_all(text, matches);
  out.clear();
  size_t from = 0;
  for (const Span& m : matches) {
    // Checked before appending: a long content over many matches must not be built to be refused.
    if (out.size() + (m.begin - from) + content.size() > max_bytes) return false;
    out.append(text.substr(from, m.begin - from));
    out.append(content);
    from = m.end;
  }
  if (out.size() + (text.size() - from) > max_bytes) return false;
  out.append(text.substr(from));
  return true;
}

std::string replace_all(std::string_view text, const Pattern& pattern, const std::string& content) {
  std::string out;
  replace_all(text, pattern, content, SIZE_MAX, out);
  return out;
}

}  // namespace tpllama::hf
