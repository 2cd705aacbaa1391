// Normalizer steps read from tokenizer.json and applied in order.
#include "text/normalizer.h"

#include <algorithm>

#include "text/hf_unicode.h"

namespace tpllama::hf {

Normalizer::Normalizer(const Json& j, const std::string& where) {
  if (!j.is_null()) add(j, where);
}

void Normalizer::add(const Json& j, const std::string& where) {
  std::string type = type_of(j, where);
  if (type == "Sequence") {
    const Json& list = req_array(j, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add(list[i], where + ".normalizers[" + std::to_string(i) + "]");
    }
  } else if (type == "Prepend") {
    steps_.push_back({Kind::kPrepend, req_string(j, "prepend", where), {}});
  } else if (type == "Replace") {
    Step step{Kind::kReplace, req_string(j, "content", where), {}};
    step.pattern.push_back(Pattern::from_json(member(j, "pattern", where), where));
    steps_.push_back(std::move(step));
  } else if (type == "NFC") {
    steps_.push_back({Kind::kNfc, {}, {}});
  } else {
    refuse_type(where, type, "Prepend, Replace, NFC, Sequence");
  }
}

std::optional<double> Normalizer::max_shrink() const {
  double shrink = 1;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        break;
      case Kind::kReplace: {
        const Pattern& p = step.pattern.front();
        if (!p.is_literal() || step.text.empty()) return std::nullopt;
        shrink *= std::max(1.0, static_cast<double>(p.literal().size()) / static_cast<double>(step.text.size()));
        break;
      }
      case Kind::kNfc:
        // Composition joins at most a few characters into one: Hangul's three jamo (9 bytes) into a
        // 3-byte syllable is the most; 4 leaves room.
        shrink *= 4;
        break;
    }
  }
  return shrink;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);  // Hugging Face leaves empty text empty
        break;
      case Kind::kReplace:
        s = replace_all(s, step.pattern.front(), step.text);
        break;
      case Kind::kNfc:
        s = nfc(s);
        break;
    }
  }
  return s;
}

}  // namespace tpllama::hf
