// The sidecar a run writes next to a regular output file (OUTPUT.tpllama.json): the job that made
// its records — the model, dtypes, sampling defaults, input — so --resume refuses to append the
// records of another job to them. Not the records' format (see result_writer.h).
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
};

// OUTPUT.tpllama.json.
std::string sidecar_path(const std::string& output);

// Writes the sidecar of `output` atomically (a temporary file renamed over it): a kill leaves the
// old one or the new one. Throws Error naming the sidecar and why.
void write_sidecar(const std::string& output, const OutputJob& job);

// The job the sidecar of `output` names; none when there is no sidecar (an older tpllama's output,
// or another tool's). Throws Error naming the sidecar when it cannot be read or is not one.
std::optional<OutputJob> read_sidecar(const std::string& output);

// What differs between the job that made `output` and this one, naming every difference
// ("out.jsonl was made with --temperature 0, this run has 1.5; with --dtype f32, this run has
// bf16"); empty when they are the same job. A setting only one side records (a sidecar from another
// version) is not a difference.
std::string output_job_difference(const std::string& output, const OutputJob& file, const OutputJob& here);

// A double as the shortest text that reads back as it ("0", "1.5", "0.9").
std::string setting_number(double value);

}  // namespace tpllama
