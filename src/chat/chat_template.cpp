// Hugging Face's chat-template environment on top of the Jinja subset: the variables and globals
// transformers passes (raise_exception, strftime_now, tools=None, documents=None).
#include "chat/chat_template.h"

#include <utility>
#include <vector>

#include "chat/jinja_builtins.h"
#include "chat/jinja_template.h"
#include "chat/jinja_text.h"

namespace tpllama {

struct ChatTemplate::Impl {
  jinja::Template tmpl;
};

ChatTemplate::ChatTemplate(const std::string& text, std::string source)
    : source_(std::move(source)) {
  jinja::TemplateOptions options;  // trim_blocks and lstrip_blocks on, as transformers sets them
  options.functions = {"raise_exception", "strftime_now"};
  impl_ = std::make_shared<const Impl>(
      Impl{jinja::Template(text, source_ + ": chat template", options)});
}

namespace {

// Python's datetime.strftime through the C library, as CPython does for the common directives.
std::string format_time(const std::string& format, std::optional<std::time_t> test_clock) {
  std::tm tm{};
  if (test_clock) {
    gmtime_r(&*test_clock, &tm);
  } else {
    const std::time_t now = std::time(nullptr);
    localtime_r(&now, &tm);
  }
  for (size_t size = 64 + format.size() * 4; size <= 64 * (format.size() + 16); size *= 2) {
    std::vector<char> buf(size);
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n > 0) return std::string(buf.data(), n);
  }
  return "";  // strftime gives 0 for an empty result too, e.g. format ""
}

void set_variable(jinja::Variables& vars, const std::string& name, jinja::Value value) {
  for (auto& [key, v] : vars) {
    if (key == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

// The globals transformers adds: raise_exception(message) and strftime_now(format).
void add_globals(jinja::Variables& vars, const std::string& source,
                 std::optional<std::time_t> clock) {
  using jinja::Value;
  vars.emplace_back(
      "raise_exception",
      Value::callable("raise_exception", [&source](const jinja::CallArgs& args) -> Value {
        const jinja::BoundArgs a(args, {"message"}, "raise_exception");
        throw ChatTemplateError(source + ": " + jinja::to_str(a[0]));
      }));
  vars.emplace_back("strftime_now",
                    Value::callable("strftime_now", [clock](const jinja::CallArgs& args) {
                      const jinja::BoundArgs a(args, {"format"}, "strftime_now");
                      if (!a[0].is_string())
                        throw jinja::EvalError("strftime_now() argument must be str, not " +
                                               jinja::type_name(a[0]));
                      return Value::string(format_time(a[0].as_string(), clock));
                    }));
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token,
                                 const nlohmann::ordered_json& extra) const {
  if (!messages.is_array())
    throw ChatTemplateError(source_ + ": chat messages must be a JSON array, got " +
                            messages.type_name());
  if (!extra.is_object())
    throw ChatTemplateError(source_ + ": chat template variables must be a JSON object, got " +
                            extra.type_name());
  using jinja::Value;
  try {
    jinja::Variables vars;
    vars.emplace_back("messages", jinja::from_json(messages));
    // transformers always passes these two, as None when the caller gives none.
    vars.emplace_back("tools", Value::none());
    vars.emplace_back("documents", Value::none());
    vars.emplace_back("add_generation_prompt", Value::boolean(add_generation_prompt));
    vars.emplace_back("bos_token", Value::string(bos_token));
    vars.emplace_back("eos_token", Value::string(eos_token));
    for (const auto& [key, value] : extra.items()) {
      if (key == "messages" || key == "add_generation_prompt") {
        throw ChatTemplateError(source_ + ": chat template variable '" + key +
                                "' is set by the chat itself, not by extra variables");
      }
      set_variable(vars, key, jinja::from_json(value));
    }
    add_globals(vars, source_, test_clock_);
    return impl_->tmpl.render(vars, limits_);
  } catch (const jinja::RenderError& e) {
    throw ChatTemplateError(e.what());
  } catch (const jinja::EvalError& e) {  // a JSON value with no Jinja counterpart (binary)
    throw ChatTemplateError(source_ + ": " + e.what());
  }
}

std::string ChatTemplate::render_continuing(const nlohmann::ordered_json& messages,
                                            const std::string& bos_token,
                                            const std::string& eos_token,
                                            const nlohmann::ordered_json& extra) const {
  const std::string rendered =
      render(messages, /*add_generation_prompt=*/false, bos_token, eos_token, extra);
  const nlohmann::ordered_json* content = nullptr;
  if (!messages.empty() && messages.back().is_object()) {
    const auto it = messages.back().find("content");
    if (it != messages.back().end() && it->is_string()) content = &*it;
  }
  if (content == nullptr)
    throw ChatTemplateError(source_ +
                            ": continue_final_message: the last message has no text to continue");
  const std::string& text = content->get_ref<const std::string&>();
  const std::string stripped = jinja::text::strip(text, true, true);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos)
    throw ChatTemplateError(source_ +
                            ": continue_final_message: the last message's content does not appear "
                            "in the rendered chat (the template changes it), so it cannot be "
                            "continued");
  // Cut after the whole message when the template kept its trailing whitespace, else after the
  // stripped text (transformers compares text without its leading whitespace to the whole message,
  // so a message with leading whitespace takes the second way too).
  const size_t without_leading = jinja::text::strip(text, true, false).size();
  const bool kept = rendered.compare(at, without_leading, text) == 0;
  return rendered.substr(0, at + (kept ? without_leading : stripped.size()));
}

std::optional<std::string> chat_template_from_config(const nlohmann::json& tokenizer_config,
                                                     const std::string& source) {
  if (!tokenizer_config.is_object())
    fail(source, ": tokenizer config is not a JSON object but ", tokenizer_config.type_name());
  const auto field = tokenizer_config.find("chat_template");
  if (field == tokenizer_config.end() || field->is_null()) return std::nullopt;
  if (field->is_string()) return field->get<std::string>();
  if (!field->is_array())
    fail(source, ": chat_template must be a string or a list of {name, template}, got ",
         field->type_name());
  if (field->empty()) fail(source, ": chat_template is an empty list");
  const nlohmann::json* chosen = nullptr;
  std::string names;
  for (size_t i = 0; i < field->size(); ++i) {
    const nlohmann::json& entry = (*field)[i];
    const bool well_formed = entry.is_object() && entry.contains("name") &&
                             entry["name"].is_string() && entry.contains("template") &&
                             entry["template"].is_string();
    if (!well_formed) {
      fail(source, ": chat_template[", i,
           "] is not a {\"name\": string, \"template\": string} object: ",
           entry.dump().substr(0, 120));
    }
    if (!chosen && entry["name"] == "default") chosen = &entry;
    names += (names.empty() ? "" : ", ") + entry["name"].dump();
  }
  // As transformers' apply_chat_template: a list of templates with none named "default" is an
  // error, not a silent pick of one of them.
  if (!chosen)
    fail(source,
         ": chat_template is a list of named templates with none named \"default\" (it has ", names,
         "): pass --chat-template FILE to choose one");
  return (*chosen)["template"].get<std::string>();
}

}  // namespace tpllama
