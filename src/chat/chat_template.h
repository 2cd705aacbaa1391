// A Hugging Face chat template (tokenizer_config.json's `chat_template`), rendered as
// transformers' apply_chat_template(tokenize=False) does, by the Jinja subset in jinja_*.h.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_limits.h"
#include "core/error.h"

namespace tpllama {

// A failure while rendering one chat: the template's raise_exception(msg) ("<source>: <msg>"), an
// error such as an attribute of an undefined value ("<source>: chat template line N: ..."), or
// messages / extra variables of the wrong shape.
class ChatTemplateError : public Error {
 public:
  using Error::Error;
};

class ChatTemplate {
 public:
  // Parses the template; throws tpllama::Error naming `source` (a file path or
  // "tokenizer_config.json chat_template") and the line of an unsupported construct.
  ChatTemplate(const std::string& text, std::string source);

  // Renders as Hugging Face's apply_chat_template(tokenize=False) does: variables messages (a
  // JSON array of {role, content, ...}), add_generation_prompt, bos_token, eos_token, tools and
  // documents (none unless `extra` has them), plus every key of `extra` (e.g. tools,
  // date_string); globals raise_exception(msg) and strftime_now(fmt) (local time). Throws
  // ChatTemplateError. Thread-safe; copies share the parsed template.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // As apply_chat_template(continue_final_message=True): rendered with add_generation_prompt false,
  // then cut right after the last message's content (a string), so that its end of turn is gone
  // and the model goes on with the message. The content is found as transformers finds it: the
  // last occurrence of its Python-stripped text; the cut keeps its trailing whitespace when the
  // template kept it. Throws ChatTemplateError as render does, and when the last message has no
  // string content or the rendered text does not hold it (a template that rewrites it).
  std::string render_continuing(
      const nlohmann::ordered_json& messages, const std::string& bos_token,
      const std::string& eos_token,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The budget of each render (jinja_limits.h): the defaults unless a test asks for others.
  void set_render_limits(jinja::RenderLimits limits) { limits_ = limits; }

  // Tests only: strftime_now formats this instant in UTC instead of the local current time, so
  // renderings do not depend on the day or the machine's time zone.
  void set_clock_for_tests(std::time_t now) { test_clock_ = now; }

  const std::string& source() const { return source_; }

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  std::string source_;
  std::optional<std::time_t> test_clock_;
  jinja::RenderLimits limits_;
};

// Picks the template from tokenizer_config.json's chat_template field: a string, or a list of
// {name, template} (take "default"). Nullopt when the field is absent or null; throws
// tpllama::Error naming `source` when it is malformed or a list has no "default" (naming those it
// has).
std::optional<std::string> chat_template_from_config(const nlohmann::json& tokenizer_config,
                                                     const std::string& source);

}  // namespace tpllama
