// `tpllama run`: a Session over the prompt file. Rank 0 streams the prompts through the pipeline
// into the output file while every other rank serves step plans.
#include <algorithm>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/output_files.h"
#include "app/run_report.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "io/output_constraint.h"
#include "io/output_holds.h"
#include "io/output_sidecar.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "io/resume.h"
#include "io/window_file.h"

namespace tpllama {
namespace {

// Rank 0's requests and results.
struct RunFiles {
  std::unique_ptr<PromptReader> reader;
  std::unique_ptr<ResumeIndex> resume;
  std::unique_ptr<ResultWriter> writer;
  long long total_requests = 0;                // 0: unknown (a pipe)
  RecordOrigin origin;                         // the writer's
  std::optional<OutputConstraint> constraint;  // --response-format's
};

// The files of a run, checked on rank 0 before any weight is read: the outputs can be written and
// are not the input nor the model's files, an earlier run's records are kept unless --overwrite,
// --resume has a file to read, the input can be read. Then every file the run will write is held
// for it, so that another job naming one is refused from now on.
void check_files(const RunOptions& o, OutputHolds& holds) {
  if (o.output.empty()) fail("--output is empty: give the file to write the records to");
  std::vector<std::pair<std::string, std::string>> outputs = {
      {"--output", o.output}, {"--stats", o.stats}, {"--trace", o.trace}};
  if (output_is_a_file(o.output))
    outputs.emplace_back("--output's sidecar", sidecar_path(o.output));
  check_output_files({o.input}, outputs, model_files(o.session.model, o.session.chat_template));
  if (o.resume && !output_is_a_file(o.output))
    fail("--resume reads and appends to --output, but ", o.output,
         standard_stream_of(o.output) >= 0
             ? " is this process's stdout or stderr"
             : " is not a regular file (a pipe, a terminal or a device)",
         ": give a file, or drop --resume");
  check_not_replacing(
      "--output", o.output, o.resume || o.overwrite,
      "pass --resume to keep its records and continue after them, or --overwrite to replace them");
  check_input_file(o.input);
  checked_response_format(o.response_format);
  // A resume onto records without a sidecar (an older tpllama's) writes none: nothing to hold
  // there.
  std::error_code ec;
  const bool kept =
      o.resume && output_is_a_file(o.output) && std::filesystem::file_size(o.output, ec) > 0 && !ec;
  const bool no_sidecar =
      kept && !std::filesystem::exists(std::filesystem::symlink_status(sidecar_path(o.output), ec));
  for (const auto& [flag, path] : outputs)
    if (output_is_a_file(path) && !(no_sidecar && flag == "--output's sidecar"))
      holds.hold(flag, path);
}

// What made the records: a resume with another model, dtype, sampling default or input would mix
// two jobs' records in one file.
// c: the --response-format constraint, read once by open_files.
OutputJob output_job(const RunOptions& o, const Session& session, InputFormat format,
                     const std::optional<OutputConstraint>& c) {
  namespace fs = std::filesystem;
  const auto absolute = [](const std::string& path) {
    std::error_code ec;
    const fs::path p = fs::absolute(path, ec);
    return ec ? path : p.lexically_normal().string();
  };
  const SamplingParams& s = o.defaults.sampling;
  OutputJob job;
  job.model = model_name(o.session.model);
  job.model_fingerprint = model_fingerprint(o.session.model);
  job.files = shaping_files(o.session.model, o.session.chat_template);
  job.model_dir = o.session.model;
  // Not the input's path: resuming with the input moved, or grown by more prompts, is the same job;
  // another input's records are caught by their content (RequestIntake::check_resumed).
  job.settings = {
      {"--dtype", dtype_name(session.dtype())},
      {"--kv-dtype", dtype_name(session.kv_dtype())},
      {"--temperature", setting_number(s.temperature)},
      {"--top-k", std::to_string(s.top_k)},
      {"--top-p", setting_number(s.top_p)},
      {"--min-p", setting_number(s.min_p)},
      {"--seed", std::to_string(o.defaults.seed)},
      {"--max-tokens", std::to_string(o.defaults.max_tokens)},
      {"--json-max-digits", std::to_string(o.defaults.json_max_digits)},
      {"--max-model-len", std::to_string(session.context())},
      {"--input-format", format == InputFormat::kText    ? "text"
                         : format == InputFormat::kJsonl ? "jsonl"
                                                         : "openai"},
      {"--chat-template",
       o.session.chat_template.empty() ? "(the model's)" : absolute(o.session.chat_template)}};
  // By what it asks for (a hash of its constraint), wherever the file now is.
  Fnv1a h;
  if (c)
    h.add(std::string(constraint_kind_name(c->kind)) + "\n" + c->text +
          (c->compact ? "\ncompact" : ""));
  job.settings.emplace_back(
      "--response-format",
      c ? std::string(constraint_kind_name(c->kind)) + " " + h.hex() : "(none)");
  return job;
}

// The records' "model" (--served-model-name, else the model directory's name) and
// "system_fingerprint": the weights, the dtypes they and the KV cache are held in, and the files
// that shape a prompt (tokenizer, chat template, generation config).
RecordOrigin record_origin(const RunOptions& o, const OutputJob& job) {
  Fnv1a h;
  h.add(job.model_fingerprint);
  for (const auto& [flag, value] : job.settings)
    if (flag == "--dtype" || flag == "--kv-dtype") h.add(flag + "=" + value + "\n");
  for (const auto& [file, hash] : job.files) h.add(file + "=" + hash + "\n");
  return {served_model_name(o), "fp_" + h.hex()};
}

// The output is opened (and truncated, without --resume) only once everything else is known to
// work; it is held (locked) from the run's start, before anything reads or cuts it.
RunFiles open_files(const RunOptions& o, const Session& session, OutputHolds& holds) {
  RunFiles f;
  RequestDefaults defaults = o.defaults;
  if (!o.response_format.empty())
    defaults.constraint = read_response_format_file(o.response_format);
  const std::optional<OutputConstraint> constraint = defaults.constraint;
  f.reader = std::make_unique<PromptReader>(o.input, std::move(defaults),
                                            parse_input_format(o.input_format));
  f.reader->set_answering_model(served_model_name(o));
  const OutputFormat format = f.reader->format() == InputFormat::kOpenAiBatch
                                  ? OutputFormat::kOpenAiBatch
                                  : OutputFormat::kJsonl;
  // A pipe, a terminal or /dev/stdout is written as it comes: nothing to lock, cut or resume.
  const bool file = output_is_a_file(o.output);
  const bool had_output =
      file && std::filesystem::exists(o.output) && std::filesystem::file_size(o.output) > 0;
  const OutputJob job = output_job(o, session, f.reader->format(), constraint);
  if (o.resume) {
    if (had_output) check_resumed_job(o.output, job);
    f.resume = std::make_unique<ResumeIndex>(prepare_resume(o.output, format));
    warn_duplicates(*f.resume);
    log::info(
        "resume: " + std::to_string(f.resume->records) + " records already in " + o.output +
        (f.resume->truncated_bytes > 0
             ? "; cut a torn last line of " + std::to_string(f.resume->truncated_bytes) + " bytes"
             : ""));
  } else if (had_output) {
    log::info("--overwrite: replacing the " + std::to_string(std::filesystem::file_size(o.output)) +
              " bytes of records in " + o.output);
  }
  f.origin = record_origin(o, job);
  f.constraint = constraint;
  f.writer =
      std::make_unique<ResultWriter>(o.output, format, /*append=*/o.resume || !file, f.origin);
  if (file && !(o.resume && had_output))
    write_sidecar(o.output, job, &holds);  // after the cut: a kill between leaves no records
  if (std::optional<size_t> lines = count_prompt_lines(o.input))
    f.total_requests = static_cast<long long>(*lines);
  return f;
}

// What the last lines add for a run over a prompt file.
std::vector<std::string> run_warnings(const RunOptions& o, const RunSummary& summary) {
  std::vector<std::string> warnings;
  if (summary.records.requests == 0 && summary.skipped == 0)
    warnings.push_back(
        o.input + " holds no request (it is empty or every line is blank): is it the right file?");
  if (summary.unmatched_records > 0)
    warnings.push_back(std::to_string(summary.unmatched_records) + " records already in " +
                       o.output + " match no request of " + o.input +
                       ": is --output from another job? (they are kept)");
  return warnings;
}

}  // namespace

int run_command(const RunOptions& o, const MpiSession& mpi) {
  if (o.defaults.n > o.session.engine.max_seqs)
    fail("--n ", o.defaults.n, " is more than --max-seqs ", o.session.engine.max_seqs,
         ": a request's samples run at once, one sequence each; raise --max-seqs");
  TraceRecorder trace(!o.trace.empty());  // before the session: its communicators record into it
  OutputHolds holds;                      // rank 0's: every file the run writes, from its start
  SessionOptions layout = o.session;
  layout.replicas = true;  // run serves any number of replicas
  Session session(mpi, std::move(layout), [&](const Session& s) {
    if (s.is_rank0()) check_files(o, holds);
  });
  session.load();
  RunFiles files;
  collective_phase([&] {
    if (session.is_rank0()) files = open_files(o, session, holds);
  });
  EngineIo io;
  io.reader = files.reader.get();
  io.writer = files.writer.get();
  io.resume = files.resume.get();
  io.ordered = o.ordered;
  io.reorder_limit = static_cast<size_t>(std::max(1024, 4 * o.session.engine.max_seqs));
  io.total_requests = files.total_requests;
  const Continuation continuation{true, ""};
  ServeOptions serve = serve_options(o, continuation);
  if (session.is_rank0() && session.topology().dp_size() > 1) {
    // Rank 0 hands the lines to the replicas and writes the records they send back.
    files.reader->keep_lines(true);
    serve.lines = files.reader.get();
    serve.records = files.writer.get();
    serve.replica_requests.input = files.reader->format();
    serve.replica_requests.output = files.writer->format();
    serve.replica_requests.origin = files.origin;
    serve.replica_requests.answering_model = served_model_name(o);
    serve.replica_requests.constraint = files.constraint;
  }
  const RunSummary summary = session.serve(serve, io, trace);
  holds.release(o.stats);  // write_text_file locks them itself
  holds.release(o.trace);
  report_run(session, summary, trace, o.stats, o.trace);
  if (!session.is_rank0()) return 0;
  return finish_run(session, summary, continuation, "; output " + o.output,
                    run_warnings(o, summary));
}

}  // namespace tpllama
