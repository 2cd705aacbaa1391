// EncodeError: a text the tokenizer.json pipeline will not encode at a bounded cost (a regex past
// PCRE2's match limit, a normalizer whose output outgrows its input's bound): the text's fault, so
// the caller refuses that text (a request's error record) and the job goes on.
#pragma once

#include "core/error.h"

namespace tpllama::hf {

class EncodeError : public Error {
 public:
  using Error::Error;
};

}  // namespace tpllama::hf
