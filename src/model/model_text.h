// ModelText: what rank 0 needs of a model to turn requests into tokens and tokens back into text:
// the tokenizer, the ids the model puts around a prompt (BOS), its chat template, and the ids that
// end a completion. Read from the model directory's tokenizer files; holds no weights.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/request.h"
#include "model/config.h"
#include "text/tokenizer.h"

namespace tpllama {

class ChatTemplate;

// A request the model's text files cannot turn into a prompt (no chat template, or the template
// raised an exception for this conversation): that request's error record, not the job's end.
class PromptError : public Error {
 public:
  using Error::Error;
};

class ModelText {
 public:
  // Reads model_dir's tokenizer (tokenizer.model when it is a SentencePiece model, else
  // tokenizer.json), tokenizer_config.json (add_bos_token, bos_token, eos_token, chat_template),
  // generation_config.json (eos_token_id) and chat_template.jinja. A chat_template_file
  // (--chat-template) replaces the model's template. Throws Error naming the file at fault,
  // including a template construct the renderer does not support.
  ModelText(const std::string& model_dir, const LlamaConfig& config,
            const std::string& chat_template_file = "");
  // Just a tokenizer (tests): prefix_ids before every text prompt, stop_ids ending completions.
  ModelText(std::unique_ptr<Tokenizer> tokenizer, std::vector<int> prefix_ids,
            std::vector<int> stop_ids);
  ~ModelText();
  ModelText(const ModelText&) = delete;
  ModelText& operator=(const ModelText&) = delete;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Ids before and after every text prompt (BOS): tokenizer.json's post-processor, or for
  // SentencePiece config.json's bos_token_id unless tokenizer_config.json's add_bos_token is false.
  const std::vector<int>& prefix_ids() const { return prefix_ids_; }
  const std::vector<int>& suffix_ids() const { return suffix_ids_; }
  // The ids that end a completion: config.json's and generation_config.json's eos_token_id (each
  // an id or a list) and the chat template's end-of-turn token (Llama 3's <|eot_id|>).
  const std::vector<int>& stop_ids() const { return stop_ids_; }
  // Where the stop ids came from, for the log ("config.json 128001; generation_config.json ...").
  const std::string& stop_ids_origin() const { return stop_origin_; }
  bool has_chat_template() const { return chat_ != nullptr; }
  const std::string& chat_template_source() const { return chat_source_; }

  // A chat request's prompt: its messages rendered with the chat template (the request's
  // add_generation_prompt, bos_token, eos_token and the request's chat variables), or with its last
  // message left open (continue_final_message). Throws PromptError.
  std::string render_chat(const Request& r) const;
  // The tokens the model is given for r: its token ids as given; a chat request's rendered prompt
  // with its special tokens (no BOS added: the template writes it); else prefix, the prompt's
  // encoding and suffix. A scoring request is tokenized as evaluation harnesses do: context and
  // continuation encoded together, split where the context's own encoding ends; *n_context is set
  // to the context's tokens (prefix included). Throws PromptError, and when fit_tokens > 0 refuses
  // so (untokenized) text too long for any fit_tokens-token encoding (Tokenizer::min_tokens); text
  // the tokenizer will not encode at a bounded cost (hf::EncodeError) and running out of memory
  // are PromptErrors too.
  std::vector<int32_t> encode(const Request& r, int* n_context, int fit_tokens = 0) const;

 private:
  void load_chat_template(const std::string& model_dir, const nlohmann::json* tokenizer_config);
  void collect_stop_ids(const std::string& model_dir, const LlamaConfig& config);
  std::optional<int> end_of_turn_id() const;
  std::vector<int32_t> encode_text(const Request& r, int* n_context, int fit_tokens) const;
  // Throws PromptError when text cannot encode to fit_tokens tokens or fewer (0: no check), for
  // text long enough that tokenizing it would cost (shorter text is refused with its token count).
  void check_fits(const std::string& text, const char* what, int fit_tokens) const;

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int> prefix_ids_;
  std::vector<int> suffix_ids_;
  std::vector<int> stop_ids_;
  std::string stop_origin_;
  std::unique_ptr<ChatTemplate> chat_;
  std::string chat_source_;
  std::string bos_token_;  // the strings the template is given
  std::string eos_token_;
};

}  // namespace tpllama
