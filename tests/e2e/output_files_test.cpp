// End-to-end tests of the files a run writes: each is checked before any work (writable, not the
// input nor the model's, not another output, not an earlier run's records, nothing created), held
// from the job's start, and stdout, a pipe or a FIFO can take the records.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "cli_util.h"
#include "io/output_holds.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;

class OutputFiles : public StoriesSuite<OutputFiles> {
 public:
  static constexpr const char* kTag = "outputs";

 protected:
  CommandResult run(const std::string& input, const std::string& output,
                    const std::string& flags = "") {
    return run_shell(binary() + " run --model " + model_ + " --input " + input + " --output " +
                     output + " " + flags);
  }
  // A copy of the suite's model, for a test that changes it or that a wrong tpllama could damage.
  static std::string copy_of_model(const std::string& name) {
    const std::string dir = work_ + "/" + name;
    fs::remove_all(dir);
    fs::copy(model_, dir, fs::copy_options::recursive);
    return dir;
  }
};

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// --output /dev/stdout: the records go to the process's own stdout. With stderr sent to the same
// file (2>&1) no log line may overwrite a record (a reopened /dev/stdout would write at its own
// offset); with stdout alone the stream holds exactly the records a file gets. --resume onto a
// stream is refused before the model loads.
TEST_F(OutputFiles, OutputToStdoutKeepsEveryRecordBesideTheLog) {
  const std::string in = work_ + "/stdout_in.txt", file = work_ + "/stdout_file.jsonl";
  {
    std::ofstream f(in);
    for (int i = 0; i < 20; ++i) f << "Once upon a time " << i << "\n";
  }
  ASSERT_EQ(run(in, file, "--max-tokens 16").exit_code, 0);
  std::ifstream want_file(file);
  const std::string want((std::istreambuf_iterator<char>(want_file)),
                         std::istreambuf_iterator<char>());

  CommandResult alone = run_shell("sh -c '" + binary() + " run --model " + model_ + " --input " +
                                  in + " --output /dev/stdout --max-tokens 16 2>/dev/null'");
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_EQ(alone.output, want);

  CommandResult mixed =
      run(in, "/dev/stdout", "--max-tokens 16");  // stdout and stderr: one log file
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  std::istringstream lines(mixed.output);
  std::string records;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') records.append(line).push_back('\n');
  EXPECT_EQ(records, want) << mixed.output;
  EXPECT_NE(mixed.output.find("[tpllama] done: 20 requests"), std::string::npos) << mixed.output;

  CommandResult resume = run(in, "/dev/stdout", "--resume");
  EXPECT_NE(resume.exit_code, 0);
  EXPECT_NE(resume.output.find(
                "--resume reads and appends to --output, but /dev/stdout is this process's stdout"),
            std::string::npos)
      << resume.output;
  EXPECT_EQ(resume.output.find("weights:"), std::string::npos) << "refused only after loading\n"
                                                               << resume.output;

  CommandResult read_only = run_shell("sh -c '" + binary() + " run --model " + model_ +
                                      " --input " + in + " --output /dev/stdout 1</dev/null'");
  EXPECT_NE(read_only.exit_code, 0);
  EXPECT_NE(
      read_only.output.find(
          "cannot write --output file /dev/stdout: the process's stdout is not open for writing"),
      std::string::npos)
      << read_only.output;
  EXPECT_EQ(read_only.output.find("weights:"), std::string::npos) << "refused only after loading";

  CommandResult directory = run(in, work_);
  EXPECT_NE(directory.exit_code, 0);
  EXPECT_NE(directory.output.find("cannot write --output file " + work_ + ": it is a directory"),
            std::string::npos)
      << directory.output;
}

TEST_F(OutputFiles, OutputThatWouldOverwriteTheInputIsRefused) {
  std::string in = work_ + "/same.txt";
  std::ofstream(in) << "hello\n";
  CommandResult r = run(in, in);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("same.txt"), std::string::npos) << r.output;
  std::ifstream check(in);
  std::string line;
  std::getline(check, line);
  EXPECT_EQ(line, "hello");
}

// No file a run writes may be its input or another of its outputs: each is refused before any work,
// and the file it would have overwritten keeps its content.
TEST_F(OutputFiles, StatsTraceAndJsonFilesThatWouldOverwriteAnotherAreRefused) {
  const std::string in = work_ + "/clobber.txt", out = work_ + "/clobber_out.jsonl",
                    side = work_ + "/clobber.json";
  std::ofstream(in) << "hello\n";
  std::ofstream(out) << "{\"kept\": true}\n";
  const struct {
    std::string command, message;
  } cases[] = {
      {" run --model " + model_ + " --input " + in + " --output " + out + " --stats " + in,
       "--stats " + in + " is the input file itself"},
      {" run --model " + model_ + " --input " + in + " --output " + out + " --trace " + out,
       "--output and --trace both name " + out},
      {" run --model " + model_ + " --input " + in + " --output " + side + ".out --stats " + side +
           " --trace " + side,
       "--stats and --trace both name " + side},
      {" perplexity --model " + model_ + " --input " + in + " --output " + in,
       "--output " + in + " is the input file itself"},
      {" perplexity --model " + model_ + " --input " + in + " --output " + work_ +
           "/no/such/dir/p.json",
       "cannot write --output file " + work_ + "/no/such/dir/p.json"},
      {" plan --shape llama2-7b --json " + work_ + "/no/such/dir/plan.json",
       "cannot write --json file " + work_ + "/no/such/dir/plan.json"},
      // One file not there yet, spelt two ways.
      {" run --model " + model_ + " --input " + in + " --output " + side + ".o --stats " + work_ +
           "/./clobber.json" + " --trace " + work_ + "/../" +
           std::filesystem::path(work_).filename().string() + "/clobber.json",
       "--stats and --trace both name"},
      {" plan --model " + model_ + " --json " + model_ + "/config.json",
       "--json " + model_ + "/config.json is the input file itself"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run_shell(binary() + c.command);
    EXPECT_NE(r.exit_code, 0) << c.command;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.command << "\n" << r.output;
    EXPECT_EQ(r.output.find("done:"), std::string::npos) << "it ran: " << c.command;
  }
  std::string line;
  std::getline(std::ifstream(in), line);
  EXPECT_EQ(line, "hello");
  std::getline(std::ifstream(out), line);
  EXPECT_EQ(line, "{\"kept\": true}");
  EXPECT_FALSE(std::filesystem::exists(side));
  EXPECT_FALSE(std::filesystem::exists(side + ".out"));
  EXPECT_FALSE(std::filesystem::exists(side + ".o"));
}

// The checks create nothing: a dangling link's target is not made, and the link stays a link.
// /dev/stdout and /dev/stderr may both be one log file: never "the same file".
TEST_F(OutputFiles, OutputChecksLeaveNoFileBehind) {
  const std::string in = work_ + "/nothing.txt", link = work_ + "/dangling.json",
                    target = work_ + "/target.json";
  std::ofstream(in) << "hello\n";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + work_ +
                "/nothing_out.jsonl --stats " + link + " --trace " + link);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--stats and --trace both name " + link), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_FALSE(std::filesystem::exists(work_ + "/nothing_out.jsonl"));
  r = run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + work_ +
                "/nothing_out.jsonl --max-tokens 2 --stats /dev/stdout --trace /dev/stderr > " +
                work_ + "/both.log 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Another job's output (this test holds its lock, as a running tpllama would) named as --stats,
// --trace or --output: refused before the model loads, and the file is left as it was.
TEST_F(OutputFiles, AFileAnotherJobHoldsIsRefusedBeforeLoading) {
  const std::string in = work_ + "/locked_in.txt", same = work_ + "/same.jsonl";
  std::ofstream(in) << "Once upon a time\n";
  std::ofstream(same) << "{\"id\":1,\"text\":\"a record of job A\"}\n";
  tpllama::OutputHolds job_a;
  job_a.hold("--output", same);
  for (const std::string flag : {"--stats", "--trace"}) {
    CommandResult r = run(in, work_ + "/b.jsonl", flag + " " + same + " --max-tokens 2");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(flag + " " + same +
                            " is locked by another tpllama process (a running job writes it)"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("weights:"), std::string::npos) << "refused only after loading\n"
                                                            << r.output;
  }
  CommandResult r = run(in, same, "--max-tokens 2");
  EXPECT_NE(r.output.find("--output " + same + " is locked by another tpllama process"),
            std::string::npos)
      << r.output;
  std::ifstream kept(same);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), std::istreambuf_iterator<char>()),
            "{\"id\":1,\"text\":\"a record of job A\"}\n");
}

// --resume onto an output another job's settings made is refused naming each difference (from the
// sidecar written next to it); the same settings resume; an output without a sidecar is warned of.
TEST_F(OutputFiles, ResumeWithOtherSettingsIsRefusedNamingEachDifference) {
  const std::string in = work_ + "/job_in.txt", out = work_ + "/job_out.jsonl";
  std::ofstream(in) << "Once upon a time\nThe cat\n";
  ASSERT_EQ(run(in, out, "--max-tokens 4").exit_code, 0);
  ASSERT_TRUE(fs::exists(out + ".tpllama.json"));
  CommandResult other = run(in, out, "--max-tokens 4 --resume --temperature 1.5 --seed 7");
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_NE(
      other.output.find("--resume: " + out + " was made with --temperature 0, this run has 1.5"),
      std::string::npos)
      << other.output;
  EXPECT_NE(other.output.find("--seed 0, this run has 7"), std::string::npos) << other.output;
  EXPECT_EQ(read_jsonl(out).size(), 2u);
  CommandResult same = run(in, out, "--max-tokens 4 --resume");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  fs::remove(out + ".tpllama.json");
  CommandResult unknown = run(in, out, "--max-tokens 4 --resume --temperature 1.5");
  EXPECT_EQ(unknown.exit_code, 0) << unknown.output;
  EXPECT_NE(unknown.output.find("has no sidecar " + out + ".tpllama.json"), std::string::npos)
      << unknown.output;
}

// A record twice in the output (two runs appended to one file) is reported as a duplicate, not as
// a record matching no request.
TEST_F(OutputFiles, ResumeReportsDuplicatedRecords) {
  const std::string in = work_ + "/dup_in.txt", out = work_ + "/dup_out.jsonl";
  std::ofstream(in) << "Once upon a time\nThe cat\n";
  ASSERT_EQ(run(in, out, "--max-tokens 4").exit_code, 0);
  const std::vector<json> records = read_jsonl(out);
  ASSERT_EQ(records.size(), 2u);
  std::ofstream(out, std::ios::app) << records[0].dump() << "\n";
  CommandResult r = run(in, out, "--max-tokens 4 --resume");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 duplicate records"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("match no request"), std::string::npos) << r.output;
}

// No command writes over the files of its model, whichever flag names one (issue 28, item 7):
// refused before any work, naming the model's file; shard and convert fill no directory that is,
// holds or lies inside their source. The model's files keep their bytes, and nothing is added.
TEST_F(OutputFiles, AFileOfTheModelIsNeverAnOutput) {
  const std::string m = copy_of_model("victim"), in = work_ + "/victim_in.txt",
                    o = work_ + "/victim_out";
  std::ofstream(in) << "Once upon a time\n";
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(m))
    before[e.path().filename().string()] = file_text(e.path().string());
  const std::string run_m = binary() + " run --model " + m + " --input " + in + " --max-tokens 2 ";
  const struct {
    std::string command, message;
  } cases[] = {
      {run_m + "--output " + m + "/model.safetensors",
       "--output " + m + "/model.safetensors is a file of the model"},
      {run_m + "--output " + o + "1.jsonl --stats " + m + "/model.safetensors",
       "--stats " + m + "/model.safetensors is a file of the model (" + m + "/model.safetensors)"},
      {run_m + "--output " + m + "/config.json",
       "--output " + m + "/config.json is a file of the model"},
      {run_m + "--output " + o + "2.jsonl --trace " + m + "/../victim/tokenizer.model",
       "--trace " + m + "/../victim/tokenizer.model is a file of the model (" + m +
           "/tokenizer.model)"},
      {binary() + " tokenize --model " + m + " --input " + in + " --output " + m +
           "/tokenizer.model",
       "--output " + m + "/tokenizer.model is a file of the model"},
      {binary() + " perplexity --model " + m + " --input " + in + " --windows " + m +
           "/config.json",
       "--windows " + m + "/config.json is a file of the model"},
      {binary() + " bench --model " + m +
           " --prompts 1 --input-len 4 --output-len 2 --no-limits --json " + m +
           "/model.safetensors",
       "--json " + m + "/model.safetensors is a file of the model"},
      {binary() + " plan --model " + m + " --json " + m + "/model.safetensors",
       "--json " + m + "/model.safetensors is a file of the model"},
      {binary() + " shard --model " + m + " --tp 2 --out " + m + "/shards",
       "lies inside the model directory " + m},
      {binary() + " shard --model " + m + " --tp 2 --out " + work_,
       "holds the model directory " + m},
      {binary() + " convert --from hf --model " + m + " --out " + m,
       "is the model directory itself (" + m + ")"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run_shell(c.command);
    EXPECT_NE(r.exit_code, 0) << c.command << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.command << "\n" << r.output;
    EXPECT_EQ(r.output.find("weights:"), std::string::npos)
        << "refused only after loading: " << c.command;
  }
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(m))
    after[e.path().filename().string()] = file_text(e.path().string());
  EXPECT_TRUE(after == before) << "the model's files changed";
  EXPECT_FALSE(fs::exists(o + "1.jsonl")) << "a refused run created its output";
}

// Every file a running job will write is held from its start (item 8): while job A runs, job B may
// name neither A's sidecar nor the trace A writes at its end; A ends with both its own, and
// resumes.
TEST_F(OutputFiles, ARunningJobsSidecarAndTraceAreHeldFromItsStart) {
  const std::string fifo = work_ + "/held.fifo", a = work_ + "/held_a.jsonl",
                    trace = work_ + "/held_a.trace.json";
  const std::string in = work_ + "/held_in.txt", log = work_ + "/held_a.log";
  std::ofstream(in) << "Once upon a time\n";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const pid_t job_a =
      spawn_shell(binary() + " run --model " + model_ + " --input " + fifo + " --output " + a +
                      " --trace " + trace + " --max-tokens 4 > " + log + " 2>&1",
                  /*new_group=*/true);
  const int writer = open_fifo_writer(fifo);
  ASSERT_GE(writer, 0) << "job A never read its input";
  const std::string line = "Once upon a time\n";
  ASSERT_EQ(::write(writer, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  ASSERT_EQ(wait_for_lines(a, 1), 1u) << "job A wrote no record";  // its sidecar is written by then
  const std::string sidecar = file_text(a + ".tpllama.json");
  for (const std::string& taken : {a + ".tpllama.json", trace}) {
    const CommandResult b = run(in, taken, "--max-tokens 2");
    EXPECT_NE(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("--output " + taken + " is locked by another tpllama process"),
              std::string::npos)
        << b.output;
    EXPECT_EQ(b.output.find("weights:"), std::string::npos) << "refused only after loading\n"
                                                            << b.output;
  }
  EXPECT_EQ(file_text(a + ".tpllama.json"), sidecar) << "job B replaced job A's sidecar";
  ::close(writer);
  const ProcessExit exit_a = wait_for_exit(job_a, log, std::chrono::seconds(60));
  ASSERT_EQ(exit_a.code, 0) << exit_a.log;
  EXPECT_NE(file_text(trace).find("\"traceEvents\""), std::string::npos)
      << "job A's trace is not its own";
  const CommandResult resume = run(in, a, "--max-tokens 4 --resume");
  EXPECT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_EQ(read_jsonl(a).size(), 1u);
}

// --resume after a file that shapes the records changed is refused naming it (item 9): the template
// in tokenizer_config.json, a generation_config.json added, a --chat-template file edited in place.
// Restored, the same files resume.
TEST_F(OutputFiles, ResumeAfterAFileThatShapesTheRecordsChangedIsRefusedNamingIt) {
  const std::string m = copy_of_model("shaping"), in = work_ + "/shaping_in.txt",
                    out = work_ + "/shaping.jsonl";
  std::ofstream(in) << "Once upon a time\nThe cat\n";
  const std::string config = R"({"chat_template": "{{ messages[0]['content'] }}"})";
  std::ofstream(m + "/tokenizer_config.json") << config;
  const std::string run_m =
      binary() + " run --model " + m + " --input " + in + " --max-tokens 4 --output ";
  ASSERT_EQ(run_shell(run_m + out).exit_code, 0);
  std::ofstream(m + "/tokenizer_config.json")
      << R"({"chat_template": "Story: {{ messages[0]['content'] }}"})";
  CommandResult r = run_shell(run_m + out + " --resume");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("was made with " + m + "/tokenizer_config.json of content "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": the file changed since"), std::string::npos) << r.output;
  std::ofstream(m + "/tokenizer_config.json") << config;
  std::ofstream(m + "/generation_config.json") << R"({"eos_token_id": 2})";
  r = run_shell(run_m + out + " --resume");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("with no generation_config.json, this run reads " + m +
                          "/generation_config.json: the file was added since"),
            std::string::npos)
      << r.output;
  fs::remove(m + "/generation_config.json");
  r = run_shell(run_m + out + " --resume");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_jsonl(out).size(), 2u);

  const std::string tmpl = work_ + "/shaping.jinja", templated = work_ + "/shaping_t.jsonl";
  std::ofstream(tmpl) << "{{ messages[0]['content'] }}";
  ASSERT_EQ(run_shell(run_m + templated + " --chat-template " + tmpl).exit_code, 0);
  std::ofstream(tmpl) << "Once: {{ messages[0]['content'] }}";
  r = run_shell(run_m + templated + " --chat-template " + tmpl + " --resume");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the --chat-template file of content "), std::string::npos) << r.output;
}

// A rerun without --resume keeps a finished output (item 10): refused before loading, naming the
// file and both flags; --overwrite replaces it. tokenize and perplexity's files alike.
TEST_F(OutputFiles, ARerunKeepsAFinishedOutputUnlessOverwrite) {
  const std::string in = work_ + "/rerun_in.txt", out = work_ + "/rerun.jsonl";
  std::ofstream(in) << "Once upon a time\nThe cat\n";
  ASSERT_EQ(run(in, out, "--max-tokens 4").exit_code, 0);
  const std::string records = file_text(out);
  CommandResult again = run(in, out, "--max-tokens 8");
  EXPECT_NE(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("--output " + out + " already holds " +
                              std::to_string(records.size()) + " bytes"),
            std::string::npos)
      << again.output;
  const std::string flags =
      "pass --resume to keep its records and continue after them, or --overwrite to replace them";
  EXPECT_NE(again.output.find(flags), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("weights:"), std::string::npos) << "refused only after loading\n"
                                                              << again.output;
  EXPECT_EQ(file_text(out), records);
  EXPECT_NE(run(in, out, "--overwrite --resume").exit_code, 0);
  const CommandResult overwrite = run(in, out, "--max-tokens 8 --overwrite");
  ASSERT_EQ(overwrite.exit_code, 0) << overwrite.output;
  ASSERT_EQ(read_jsonl(out).size(), 2u);
  EXPECT_EQ(read_jsonl(out)[0]["completion_tokens"], 8) << "the records were not replaced";

  const std::string tokens = work_ + "/rerun_tokens.jsonl",
                    windows = work_ + "/rerun_windows.jsonl";
  const std::string tokenize =
      binary() + " tokenize --model " + model_ + " --input " + in + " --output " + tokens;
  const std::string perplexity = binary() + " perplexity --model " + model_ + " --input " + in +
                                 " --context-len 8 --windows " + windows;
  for (const auto& [command, file] :
       {std::pair{tokenize, tokens}, std::pair{perplexity, windows}}) {
    ASSERT_EQ(run_shell(command).exit_code, 0) << command;
    const std::string kept = file_text(file);
    const CommandResult r = run_shell(command);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(file + " already holds " + std::to_string(kept.size()) + " bytes"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(file_text(file), kept);
    EXPECT_EQ(run_shell(command + " --overwrite").exit_code, 0) << command;
  }
}

// Files the program reads or writes that are not what they should be are named, with the reason.
TEST_F(OutputFiles, MisplacedFilesAreNamedWithTheReason) {
  const std::string in = work_ + "/msg_in.txt", broken = work_ + "/broken_model";
  std::ofstream(in) << "Once upon a time\n";
  CommandResult empty = run(in, "''");
  EXPECT_NE(empty.output.find("--output is empty"), std::string::npos) << empty.output;
  EXPECT_EQ(empty.output.find("weights:"), std::string::npos) << empty.output;
  fs::remove_all(broken);
  fs::create_directories(broken + "/config.json");
  CommandResult config = run_shell(binary() + " tokenize --model " + broken + " --input " + in +
                                   " --output " + work_ + "/msg_tokens.jsonl");
  EXPECT_NE(config.output.find("model config " + broken +
                               "/config.json is a directory, not a regular file"),
            std::string::npos)
      << config.output;
  EXPECT_EQ(config.output.find("basic_filebuf"), std::string::npos) << config.output;
}

}  // namespace
