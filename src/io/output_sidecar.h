// The sidecar a run writes next to a regular output file (OUTPUT.tpllama.json): the job that made
// its records — the model, dtypes, sampling defaults, the text files that shape a prompt — so
// --resume refuses to append the records of another job to them. Not the records' format.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpllama {

struct OutputJob {
  std::string model;              // the model directory's name
  std::string model_fingerprint;  // model_fingerprint() of it: a copy elsewhere is the same model
  // (flag, value) for every other setting that changes the records, e.g. {"--temperature", "0"},
  // in the order a difference names them.
  std::vector<std::pair<std::string, std::string>> settings;
  // (file, content hash) of every file that shapes a record beside the weights: the tokenizer, the
  // chat template used, generation_config.json (see shaping_files); "none" for one not there.
  std::vector<std::pair<std::string, std::string>> files;
  std::string model_dir;  // where this run reads the model, for messages (not written)
};

class OutputHolds;

// The files of `model_dir` that shape a record beside config.json and the weights (which
// model_fingerprint covers), each with the FNV-1a 64 hash of its whole content, or "none":
// tokenizer.model, tokenizer.json, tokenizer_config.json, generation_config.json and the chat
// template used, the model's chat_template.jinja or else `chat_template` (the --chat-template
// file), keyed "--chat-template". Throws Error naming a file that is there but cannot be read.
std::vector<std::pair<std::string, std::string>> shaping_files(const std::string& model_dir,
                                                               const std::string& chat_template);

// OUTPUT.tpllama.json.
std::string sidecar_path(const std::string& output);

// Writes the sidecar of `output` atomically (a temporary file renamed over it): a kill leaves the
// old one or the new one. With `holds` (which holds the sidecar), the new file is locked before it
// takes the name and its lock becomes the hold: the sidecar is never a moment without one. Throws
// Error naming the sidecar and why.
void write_sidecar(const std::string& output, const OutputJob& job, OutputHolds* holds = nullptr);

// The job the sidecar of `output` names; none when there is no sidecar (an older tpllama's output,
// or another tool's). Throws Error naming the sidecar when it cannot be read or is not one.
std::optional<OutputJob> read_sidecar(const std::string& output);

// What differs between the job that made `output` and this one, naming every difference
// ("out.jsonl was made with --temperature 0, this run has 1.5; with --dtype f32, this run has
// bf16"; "with tokenizer_config.json of content ..., this run reads ...: the file changed since");
// empty when they are the same job. A setting or file only one side records (a sidecar from another
// version) is not a difference.
std::string output_job_difference(const std::string& output, const OutputJob& file,
                                  const OutputJob& here);

// A double as the shortest text that reads back as it ("0", "1.5", "0.9").
std::string setting_number(double value);

}  // namespace tpllama
