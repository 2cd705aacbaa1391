// `tpllama tokenize`: the tokens each request of a prompt file would give the model, and the
// rendered prompt of a chat request, written as JSON lines, so a user can check the template and
// the lengths before a long job (as llama.cpp's llama-tokenize). Reads the tokenizer files only, no
// weights.

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/output_files.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "io/output_holds.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "model/config.h"
#include "model/model_text.h"
#include "parallel/mpi_session.h"

namespace tpllama {
namespace {

// {"id", "tokens"[, "n_context"][, "text"]}, or {"id", "error", "line"} for a request that cannot
// be tokenized.
nlohmann::ordered_json tokenize_record(const ModelText& text, const Request& r) {
  nlohmann::ordered_json j;
  j["id"] = nlohmann::ordered_json(r.id);
  const auto error = [&](const std::string& message) {
    j["error"] = message;
    j["line"] = r.line;
    return j;
  };
  if (!r.error.empty()) return error(r.error);
  try {
    int n_context = 0;
    const std::vector<int32_t> tokens = text.encode(r, &n_context);
    j["tokens"] = tokens;
    if (r.scoring) j["n_context"] = n_context;
    if (r.chat()) j["text"] = text.render_chat(r);
  } catch (const PromptError& e) {
    return error("line " + std::to_string(r.line) + ": " + e.what());
  }
  return j;
}

}  // namespace

void add_tokenize_command(CLI::App& app, TokenizeOptions& o) {
  CLI::App* c = app.add_subcommand("tokenize",
                                   "Write the token ids of every request of a prompt file (and a "
                                   "chat request's rendered prompt)");
  c->add_option("--model", o.model,
                "Model directory (its tokenizer files and config.json; no weights are read)")
      ->required();
  c->add_option("--input", o.input, "Prompt file, as `run` reads it (text, JSONL, OpenAI batch)")
      ->required();
  c->add_option("--output", o.output,
                "JSONL output: {\"id\", \"tokens\", \"text\" (chat)} per request")
      ->required();
  c->add_option("--input-format", o.input_format,
                "auto (from the content and extension), text, jsonl or openai")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "text", "jsonl", "openai"}));
  c->add_flag("--overwrite", o.overwrite,
              "Replace the records an earlier run left in --output (without it, a non-empty "
              "--output is refused)");
  add_chat_template_option(*c, o.chat_template);
}

int tokenize_command(const TokenizeOptions& o, const MpiSession& mpi) {
  if (mpi.rank() != 0) return 0;  // one process does it all
  if (o.output.empty()) fail("--output is empty: give the file to write the token ids to");
  check_output_files({o.input}, {{"--output", o.output}}, model_files(o.model, o.chat_template));
  check_not_replacing("--output", o.output, o.overwrite, "pass --overwrite to replace them");
  check_input_file(o.input);
  OutputHolds holds;
  if (output_is_a_file(o.output)) holds.hold("--output", o.output);
  const LlamaConfig config = load_llama_config(o.model + "/config.json");
  const ModelText text(o.model, config, o.chat_template);
  PromptReader reader(o.input, RequestDefaults{}, parse_input_format(o.input_format));
  ResultWriter writer(o.output, OutputFormat::kJsonl, /*append=*/!output_is_a_file(o.output));
  long long requests = 0, errors = 0, tokens = 0;
  int stopped_by = 0;
  while (!reader.ended()) {
    if ((stopped_by = stop_signal()) != 0) break;
    std::optional<Request> r = reader.next(/*wait=*/true);
    if (!r) continue;  // a stream with no whole line yet, or the end
    nlohmann::ordered_json j;
    try {
      j = tokenize_record(text, *r);
    } catch (const StoppedError&) {  // a stop signal while the chat template rendered it
      stopped_by = stop_signal();
      break;
    }
    writer.write_line(j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                      '\n');
    ++requests;
    if (j.contains("error")) ++errors;
    if (j.contains("tokens")) tokens += static_cast<long long>(j["tokens"].size());
  }
  writer.sync();
  log::info("tokenize: " + std::to_string(requests) + " requests, " + std::to_string(tokens) +
            " tokens, " + std::to_string(errors) + " errors; output " + o.output);
  if (stopped_by != 0) {
    log::warn("received signal " + std::to_string(stopped_by) + ": stopped after line " +
              std::to_string(reader.lines_read()) + " of " + o.input +
              "; the records written are complete");
    return kExitStoppedEarly;
  }
  return 0;
}

}  // namespace tpllama
