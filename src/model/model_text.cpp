// ModelText: the tokenizer files of a model directory read once, and requests turned into tokens
// with them (text prompts, scoring pairs, chat conversations through the chat template).
#include "model/model_text.h"

#include <algorithm>
#include <filesystem>
#include <new>
#include <utility>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "text/encode_error.h"

namespace tpllama {
namespace {

using nlohmann::json;

// A JSON file of the model directory; nullopt when it is absent. Invalid JSON is warned about and
// treated as absent (these files only refine the defaults), naming what is lost.
std::optional<json> read_optional_json(const std::string& path, const char* lost) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::string text;
  try {
    text = read_regular_file(path, "model file", kMaxSmallFileBytes);
  } catch (const Error& e) {
    log::warn(std::string(e.what()) + ": ignored, so " + lost);
    return std::nullopt;
  }
  if (std::optional<std::string> deep = json_depth_error(text)) {
    log::warn(path + ": " + *deep + ": ignored, so " + lost);
    return std::nullopt;
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    log::warn(path + " is not a JSON object: ignored, so " + lost);
    return std::nullopt;
  }
  return j;
}

// tokenizer_config.json's bos_token / eos_token: a string, an AddedToken object {"content": ...},
// or absent.
std::string token_string(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"];
  return "";
}

// An eos_token_id field: an id, a list of ids, or absent/null (nothing).
std::vector<int> eos_ids_of(const json& j, const std::string& source) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  const json list = it->is_array() ? *it : json::array({*it});
  std::vector<int> ids;
  for (const json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(source, ": 'eos_token_id' must be a token id or a list of them, got ",
           describe_json(*it));
    ids.push_back(static_cast<int>(v.get<int64_t>()));
  }
  return ids;
}

std::string join_ids(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

}  // namespace

ModelText::ModelText(const std::string& model_dir, const LlamaConfig& config,
                     const std::string& chat_template_file)
    : tokenizer_(Tokenizer::from_model_dir(model_dir)) {
  if (tokenizer_->vocab_size() > config.vocab_size)
    fail(tokenizer_->path(), " has ", tokenizer_->vocab_size(),
         " tokens but config.json says vocab_size ", config.vocab_size);
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const std::optional<json> tc = read_optional_json(
      config_path, "a BOS token is prepended to every prompt and the model has no chat template");
  // BOS: the tokenizer's own post-processor, else the LLaMA default of config.json's bos_token_id;
  // tokenizer_config.json's add_bos_token (when true or false) has the last word.
  prefix_ids_ = tokenizer_->prefix_ids();
  suffix_ids_ = tokenizer_->suffix_ids();
  if (tokenizer_->is_sentencepiece()) prefix_ids_ = {config.bos_token_id};
  if (tc) {
    auto add = tc->find("add_bos_token");
    if (add != tc->end() && add->is_boolean()) {
      std::erase(prefix_ids_, config.bos_token_id);
      if (add->get<bool>()) prefix_ids_.insert(prefix_ids_.begin(), config.bos_token_id);
    } else if (add != tc->end() && !add->is_null()) {
      log::warn(config_path + ": add_bos_token is " + add->dump() + ", not true or false: ignored");
    }
    bos_token_ = token_string(*tc, "bos_token");
    eos_token_ = token_string(*tc, "eos_token");
  }
  if (bos_token_.empty() && config.bos_token_id >= 0 &&
      config.bos_token_id < tokenizer_->vocab_size())
    bos_token_ = tokenizer_->piece(config.bos_token_id);
  if (eos_token_.empty() && !config.eos_token_ids.empty() &&
      config.eos_token_ids[0] < tokenizer_->vocab_size())
    eos_token_ = tokenizer_->piece(config.eos_token_ids[0]);

  if (!chat_template_file.empty()) {
    chat_source_ = chat_template_file;
    chat_ = std::make_unique<ChatTemplate>(
        read_regular_file(chat_template_file, "--chat-template", kMaxSmallFileBytes), chat_source_);
  } else {
    load_chat_template(model_dir, tc ? &*tc : nullptr);
  }
  collect_stop_ids(model_dir, config);
}

ModelText::ModelText(std::unique_ptr<Tokenizer> tokenizer, std::vector<int> prefix_ids,
                     std::vector<int> stop_ids)
    : tokenizer_(std::move(tokenizer)),
      prefix_ids_(std::move(prefix_ids)),
      stop_ids_(std::move(stop_ids)) {}

ModelText::~ModelText() = default;

// chat_template.jinja (which Hugging Face writes beside tokenizer_config.json and prefers to it),
// else tokenizer_config.json's chat_template.
void ModelText::load_chat_template(const std::string& model_dir, const json* tokenizer_config) {
  const std::string path = model_dir + "/chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    chat_source_ = path;
    chat_ = std::make_unique<ChatTemplate>(
        read_regular_file(path, "chat template", kMaxSmallFileBytes), chat_source_);
    return;
  }
  if (tokenizer_config == nullptr) return;
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (std::optional<std::string> text = chat_template_from_config(*tokenizer_config, config_path)) {
    chat_source_ = config_path + " chat_template";
    chat_ = std::make_unique<ChatTemplate>(*text, chat_source_);
  }
}

void ModelText::collect_stop_ids(const std::string& model_dir, const LlamaConfig& config) {
  const auto add = [&](const std::vector<int>& ids, const std::string& source) {
    if (ids.empty()) return;
    for (int id : ids) {
      if (id >= config.vocab_size)
        fail(source, ": eos_token_id ", id, " is outside the vocabulary [0, ", config.vocab_size,
             ")");
      if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end())
        stop_ids_.push_back(id);
    }
    stop_origin_ += (stop_origin_.empty() ? "" : "; ") + source + " " + join_ids(ids);
  };
  add(config.eos_token_ids, "config.json");
  const std::string gen_path = model_dir + "/generation_config.json";
  if (std::optional<json> gen =
          read_optional_json(gen_path, "its eos_token_id does not end completions"))
    add(eos_ids_of(*gen, gen_path), "generation_config.json");
  if (std::optional<int> eot = end_of_turn_id()) add({*eot}, "the chat template's end of turn");
}

// The special token a rendered assistant turn ends with: the template is shown a conversation whose
// assistant message is a marker, and the first token after the marker (past any whitespace) is the
// end of turn when it is a special token (<|eot_id|>, </s>, <|im_end|>).
std::optional<int> ModelText::end_of_turn_id() const {
  if (!chat_) return std::nullopt;
  constexpr const char* kMarker = "tpllama-end-of-turn-marker";
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", "Hi"}});
  messages.push_back({{"role", "assistant"}, {"content", kMarker}});
  std::string text;
  try {
    text = chat_->render(messages, /*add_generation_prompt=*/false, bos_token_, eos_token_);
  } catch (const StoppedError&) {
    throw;  // a stop signal while rendering: the load stops
  } catch (const Error&) {
    return std::nullopt;  // a template that wants another conversation shape: no end of turn known
  }
  const size_t at = text.find(kMarker);
  if (at == std::string::npos) return std::nullopt;
  size_t from = at + std::char_traits<char>::length(kMarker);
  while (from < text.size() && (text[from] == ' ' || text[from] == '\n')) ++from;
  std::vector<int> ids;
  try {
    ids = tokenizer_->encode_with_special_tokens(text.substr(from));
  } catch (const hf::EncodeError& e) {
    fail(tokenizer_->path(), ": the chat template's end of turn cannot be tokenized: ", e.what());
  }
  if (ids.empty() || !tokenizer_->is_control(ids[0])) return std::nullopt;
  return ids[0];
}

std::string ModelText::render_chat(const Request& r) const {
  TPLLAMA_CHECK(r.chat(), "render_chat on a request without messages");
  if (!chat_)
    throw PromptError(
        "the model has no chat template (no chat_template in tokenizer_config.json and no "
        "chat_template.jinja): "
        "pass --chat-template FILE, or send a prompt instead of messages");
  try {
    if (r.continue_final_message)
      return chat_->render_continuing(*r.messages, bos_token_, eos_token_, r.chat_variables);
    return chat_->render(*r.messages, r.add_generation_prompt, bos_token_, eos_token_,
                         r.chat_variables);
  } catch (const ChatTemplateError& e) {
    throw PromptError(std::string("the chat template refused the conversation: ") + e.what());
  }
}

void ModelText::check_fits(const std::string& text, const char* what, int fit_tokens) const {
  // Shorter text is tokenized, for a message with its exact token count: that costs milliseconds.
  constexpr size_t kTokenizedAnyway = size_t{256} << 10;
  if (fit_tokens <= 0 || text.size() <= kTokenizedAnyway) return;
  const std::optional<size_t> least = tokenizer_->min_tokens(text);
  if (least && *least > static_cast<size_t>(fit_tokens))
    throw PromptError(detail::concat(what, " is ", text.size(), " bytes, so at least ", *least,
                                     " tokens with this tokenizer, more than the ", fit_tokens,
                                     "-token context holds: not tokenized"));
}

std::vector<int32_t> ModelText::encode(const Request& r, int* n_context, int fit_tokens) const {
  // What one request's text costs is that request's fault: its error record, not the job's end.
  try {
    return encode_text(r, n_context, fit_tokens);
  } catch (const hf::EncodeError& e) {
    throw PromptError(e.what());
  } catch (const std::bad_alloc&) {
    throw PromptError("out of memory turning the request into tokens (its text is " +
                      std::to_string(r.prompt.size() + r.context.size() + r.continuation.size()) +
                      " bytes)");
  }
}

std::vector<int32_t> ModelText::encode_text(const Request& r, int* n_context,
                                            int fit_tokens) const {
  std::vector<int32_t> tokens;
  if (!r.token_ids.empty()) {
    tokens.assign(r.token_ids.begin(), r.token_ids.end());
    if (r.scoring) *n_context = r.n_context_tokens;
    return tokens;
  }
  if (r.chat()) {
    const std::string prompt = render_chat(r);
    check_fits(prompt, "the rendered chat prompt", fit_tokens);
    for (int id : tokenizer_->encode_with_special_tokens(prompt)) tokens.push_back(id);
    return tokens;
  }
  tokens.assign(prefix_ids_.begin(), prefix_ids_.end());
  const size_t prefix = tokens.size();
  const std::string text = r.scoring ? r.context + r.continuation : r.prompt;
  check_fits(text, r.scoring ? "context and continuation" : "the prompt", fit_tokens);
  for (int id : tokenizer_->encode(text)) tokens.push_back(id);
  if (r.scoring) {
    *n_context =
        static_cast<int>(prefix + (r.context.empty() ? 0 : tokenizer_->encode(r.context).size()));
  } else {
    tokens.insert(tokens.end(), suffix_ids_.begin(), suffix_ids_.end());
  }
  return tokens;
}

}  // namespace tpllama
