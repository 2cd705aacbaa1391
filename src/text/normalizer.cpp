// Normalizer steps read from tokenizer.json and applied in order.
#include "text/normalizer.h"

#include <algorithm>

#include "text/encode_error.h"
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
        shrink *= std::max(
            1.0, static_cast<double>(p.literal().size()) / static_cast<double>(step.text.size()));
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
  const size_t bound = max_output_bytes(text.size());
  const auto outgrown = [&](size_t step) {
    static constexpr const char* kNames[] = {"Prepend", "Replace", "NFC"};
    throw EncodeError(
        detail::concat("the tokenizer's normalizer (step ", step + 1, " of ", steps_.size(), ", ",
                       kNames[static_cast<int>(steps_[step].kind)], ") would make a ", text.size(),
                       "-byte text more than ", bound, " bytes (", kMaxGrowth, " times it plus ",
                       kGrowthSlack, "): not tokenized"));
  };
  std::string s(text), replaced;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    switch (step.kind) {
      case Kind::kPrepend:
        if (s.empty()) break;  // Hugging Face leaves empty text empty
        if (s.size() + step.text.size() > bound) outgrown(i);
        s.insert(0, step.text);
        break;
      case Kind::kReplace:
        if (!replace_all(s, step.pattern.front(), step.text, bound, replaced)) outgrown(i);
        s.swap(replaced);
        break;
      case Kind::kNfc:
        s = nfc(s);  // at most 3 times its input (Unicode's bound for NFC), then checked
        if (s.size() > bound) outgrown(i);
        break;
    }
  }
  return s;
}

}  // namespace tpllama::hf
