// Decoder steps read from tokenizer.json and applied to one token's spelling.
#include "text/hf_decoder.h"

#include "text/byte_level.h"

#include "core/error.h"
#include "core/json_text.h"

namespace tpllama::hf {

Decoder::Decoder(const Json& j, const std::string& where) {
  if (!j.is_null()) add(j, where);
}

void Decoder::add(const Json& j, const std::string& where) {
  std::string type = type_of(j, where);
  if (type == "Sequence") {
    const Json& list = req_array(j, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add(list[i], where + ".decoders[" + std::to_string(i) + "]");
    }
  } else if (type == "ByteLevel") {
    steps_.push_back({Kind::kByteLevel, {}, {}, where});
    joined_ = true;
  } else if (type == "ByteFallback") {
    steps_.push_back({Kind::kByteFallback, {}, {}, where});
    byte_fallback_ = true;
  } else if (type == "Replace") {
    Step step{Kind::kReplace, {}, req_string(j, "content", where), where};
    step.pattern.push_back(Pattern::from_json(member(j, "pattern", where), where));
    steps_.push_back(std::move(step));
  } else if (type == "Fuse") {
    joined_ = true;
  } else if (type == "Strip") {
    add_strip(j, where);
  } else if (type == "Metaspace") {
    std::string replacement = req_string(j, "replacement", where);
    Step step{Kind::kReplace, {}, " ", where};
    step.pattern.push_back(Pattern::literal(replacement));
    steps_.push_back(std::move(step));
    std::string scheme = opt_string(j, "prepend_scheme", "", where);
    if (scheme.empty()) scheme = opt_bool(j, "add_prefix_space", true, where) ? "always" : "never";
    // The space the pre-tokenizer put in front of the text comes off again.
    if (scheme != "never") strip_leading_spaces_ = 1;
  } else {
    refuse_type(where, type, "ByteLevel, ByteFallback, Replace, Fuse, Strip, Sequence, Metaspace");
  }
}

void Decoder::add_strip(const Json& j, const std::string& where) {
  std::string content = req_string(j, "content", where);
  long long start = opt_int(j, "start", 0, where);
  long long stop = opt_int(j, "stop", 0, where);
  // Strip runs on each token; only after Fuse is there one token, the whole text, whose start
  // a caller can strip once. Llama 2's tokenizer.json is Replace, ByteFallback, Fuse, Strip(' ', 1,
  // 0).
  if (!joined_)
    fail(where, ": Strip before any Fuse is not supported (it would strip every token)");
  if (content != " ") fail(where, ": Strip content '", content, "' is not supported (only ' ')");
  if (stop != 0) fail(where, ": Strip stop ", stop, " is not supported (only 0)");
  if (start < 0 || start > 64) fail(where, ": Strip start ", start, " is out of range");
  strip_leading_spaces_ += static_cast<int>(start);
}

bool parse_byte_token(std::string_view piece, unsigned char* byte) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return false;
  unsigned value = 0;
  for (char c : piece.substr(3, 2)) {
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<unsigned>(c - 'A' + 10);
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else {
      return false;
    }
    value = value * 16 + digit;
  }
  *byte = static_cast<unsigned char>(value);
  return true;
}

std::string Decoder::token_bytes(std::string_view piece, bool* is_byte) const {
  std::string s(piece);
  *is_byte = false;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kByteLevel: {
        std::string bytes;
        // A character outside the alphabet keeps the whole token as it is spelled, as Hugging Face.
        if (!*is_byte && byte_level_decode(s, bytes)) s = std::move(bytes);
        break;
      }
      case Kind::kByteFallback: {
        unsigned char b;
        if (!*is_byte && parse_byte_token(s, &b)) {
          s.assign(1, static_cast<char>(b));
          *is_byte = true;
        }
        break;
      }
      case Kind::kReplace: {
        std::string replaced;
        if (!replace_all(s, step.pattern.front(), step.content, kMaxTokenBytes, replaced))
          fail(step.where, ": Replace makes the token ", describe_json(Json(std::string(piece))),
               " more than ", kMaxTokenBytes, " bytes (its content is ", step.content.size(),
               " bytes): refused");
        s = std::move(replaced);
        break;
      }
    }
  }
  return s;
}

}  // namespace tpllama::hf
