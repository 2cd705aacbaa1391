// `tpllama plan`: does this model fit this cluster, in which layout, and how fast — before launch.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/output_files.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/file_read.h"
#include "core/log.h"
#include "io/result_writer.h"
#include "model/checkpoint.h"
#include "model/shapes.h"
#include "parallel/mpi_session.h"
#include "planner/planner.h"

namespace tpllama {

void add_plan_command(CLI::App& app, PlanOptions& o) {
  CLI::App* c =
      app.add_subcommand("plan", "Which TP x PP layouts fit a cluster, and how fast (estimated)");
  c->add_option("--model", o.model,
                "Hugging Face LLaMA model directory (only config.json is read)");
  c->add_option("--shape", o.shape, std::string("Or a named shape: ") + shape_names());
  c->add_option("--vocab", o.vocab, "Vocabulary size of the shape (default: the shape's)")
      ->check(at_least(1));
  c->add_option("--hostfile", o.hostfile, "Open MPI hostfile: nodes and slots (ranks) per node");
  c->add_option("--nodes", o.nodes, "Nodes (without --hostfile)")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--gpus-per-node", o.per_node, "Ranks per node (without --hostfile)")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--gpu", o.gpu, "h100-80g, h200, a100-80g, a100-40g, l40s or cpu")
      ->capture_default_str();
  c->add_option("--memory", o.memory, "Memory per rank, e.g. 80GiB (overrides --gpu's)");
  c->add_option("--bandwidth", o.bandwidth,
                "Memory bandwidth per rank in bytes/s (overrides --gpu's)")
      ->check(finite_in(1, 1e18));
  c->add_option("--flops", o.flops, "FLOP/s per rank (overrides --gpu's)")
      ->check(finite_in(1, 1e21));
  c->add_option("--intra", o.intra, "Link inside a node: nvlink, pcie or shm")
      ->capture_default_str();
  c->add_option("--inter", o.inter, "Link between nodes: infiniband or ethernet")
      ->capture_default_str();
  c->add_option("--dtype", o.dtype, "bf16, f16, f32, or int8 (weights only, on --gpu cpu)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f16", "f32", "int8"}));
  c->add_option("--input-len", o.input_len,
                "Expected prompt tokens (default 512, or half of a smaller context)")
      ->check(at_least(1));
  c->add_option("--output-len", o.output_len,
                "Expected generated tokens (default 256, or what the context leaves)")
      ->check(at_least(1));
  c->add_option("--max-seqs", o.max_seqs, "Sequences in flight")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--tp", o.tp, "Only this TP size")->check(at_least(1));
  c->add_option("--pp", o.pp, "Only this PP size")->check(at_least(1));
  c->add_option("--dp", o.dp, "Only this number of replicas")->check(at_least(1));
  c->add_option("--json", o.json, "Also write the plans as JSON");
}

namespace {

// A hostfile line's host and its slots (one unless the line gives them).
struct HostLine {
  std::string name;
  long long slots = 1;
  bool slots_given = false;
};

// Line `number` of hostfile `path`: a host, then settings; '#' starts a comment, and spaces around
// '=' are allowed. slots=N, cpu=N and count=N give the slots; the max-slots spellings are ignored,
// other settings too, with a warning. A line without a host: nullopt.
std::optional<HostLine> parse_hostfile_line(const std::string& text, const std::string& path,
                                            size_t number) {
  std::string line = text;
  if (line.find('#') != std::string::npos) line.resize(line.find('#'));
  std::string joined;  // "slots = 4" is "slots=4"
  for (size_t i = 0; i < line.size(); ++i) {
    const bool space = line[i] == ' ' || line[i] == '\t';
    if (space && ((!joined.empty() && joined.back() == '=') ||
                  line.find_first_not_of(" \t", i) == line.find('=', i)))
      continue;
    joined += line[i];
  }
  std::istringstream words(joined);
  HostLine host;
  std::string word;
  if (!(words >> host.name)) return std::nullopt;
  while (words >> word) {
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq),
                      value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (key == "slots" || key == "cpu" || key == "count") {
      const bool digits = !value.empty() && value.size() <= 7 &&
                          value.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoll(value) < 1)
        fail(path, ":", number, ": ", key, "=", value,
             " is not a number of slots (an integer from 1 to 9999999)");
      host.slots = std::stoll(value);
      host.slots_given = true;
    } else if (key != "max_slots" && key != "max-slots" && key != "slots_max" &&
               key != "slots-max" && key != "cpu_max") {
      log::warn(path + ":" + std::to_string(number) + ": '" + word +
                "' is not a hostfile setting plan knows; ignored");
    }
  }
  return host;
}

// An Open MPI hostfile: a host per line with "slots=N" (or cpu=N, count=N; spaces around '='
// allowed; none: one slot), '#' comments; a host listed again without slots= adds one slot, as
// Open MPI counts them (listed again with slots=, Open MPI refuses the file, and so does plan).
// Every node must have the same number of slots (the layouts assume it).
void read_hostfile(const std::string& path, int* nodes, int* per_node) {
  // Read as it comes (`--hostfile <(...)` is a pipe), with a bound far above any cluster's list.
  constexpr uint64_t kMaxHostfileBytes = uint64_t{16} << 20;
  std::istringstream in(read_stream_file(path, "hostfile", kMaxHostfileBytes));
  std::vector<HostLine> hosts;  // in order of first appearance, slots summed
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const std::optional<HostLine> host = parse_hostfile_line(line, path, number);
    if (!host) continue;
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const HostLine& h) { return h.name == host->name; });
    if (it == hosts.end()) {
      hosts.push_back(*host);
    } else {
      if (host->slots_given || it->slots_given)
        fail(path, ":", number, ": ", host->name,
             " is listed again, and one of its lines gives slots=: give its slots on one "
             "line (Open MPI refuses this file too)");
      it->slots += host->slots;
    }
  }
  if (hosts.empty()) fail(path, " names no host");
  for (const HostLine& h : hosts)
    if (h.slots != hosts.front().slots)
      fail(path, ": nodes have different slot counts (", hosts.front().name, " ",
           hosts.front().slots, ", ", h.name, " ", h.slots,
           "); plan assumes as many ranks on every node");
  *nodes = static_cast<int>(hosts.size());
  *per_node = static_cast<int>(hosts.front().slots);
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1ull << 30));
  return text;
}

// The prompt and output lengths the plan counts: the flags', or the defaults as far as the context
// leaves room for them (as run treats such requests: a prompt must leave room to generate;
// generation stops at the context).
void plan_lengths(const PlanOptions& o, PlanRequest& r) {
  const int context = r.config.max_seq_len;
  if (o.input_len >= context)
    fail("--input-len ", o.input_len, " leaves no room to generate in the model's context of ",
         context,
         " tokens (max_position_embeddings): run refuses such prompts; give a shorter --input-len");
  r.input_len = o.input_len > 0 ? o.input_len : std::max(1, std::min(512, context / 2));
  r.output_len = o.output_len > 0 ? std::min(o.output_len, context - r.input_len)
                                  : std::min(256, context - r.input_len);
  if (o.output_len > 0 && r.output_len < o.output_len)
    log::warn("--input-len " + std::to_string(r.input_len) + " + --output-len " +
              std::to_string(o.output_len) + " is beyond the model's context of " +
              std::to_string(context) + " tokens: generation stops at it, so " +
              "the plan counts " + std::to_string(r.output_len) + " output tokens");
}

// What the flags ask to plan: the model's config, the cluster (a hostfile's nodes and slots, or
// --nodes and --gpus-per-node), the device with its overrides, the links, the dtype, the lengths
// and the layouts to consider.
PlanRequest plan_request(const PlanOptions& o) {
  PlanRequest r;
  r.config = o.model.empty() ? shape_config(o.shape, o.vocab)
                             : load_llama_config(o.model + "/config.json");
  r.nodes = o.nodes;
  r.ranks_per_node = o.per_node;
  if (!o.hostfile.empty()) read_hostfile(o.hostfile, &r.nodes, &r.ranks_per_node);
  r.device = device_spec(o.gpu);
  if (!o.memory.empty()) r.device.memory_bytes = static_cast<double>(parse_byte_size(o.memory));
  if (o.bandwidth > 0) r.device.bandwidth = o.bandwidth;
  if (o.flops > 0) r.device.flops = o.flops;
  r.intra = link_spec(o.intra);
  r.inter = link_spec(o.inter);
  r.dtype = o.dtype == "f32"    ? DType::kF32
            : o.dtype == "f16"  ? DType::kF16
            : o.dtype == "int8" ? DType::kI8
                                : DType::kBF16;
  if (r.dtype == DType::kI8 && o.gpu != "cpu")
    fail(
        "--dtype int8 is held on the CPU only (no GPU kernels for int8 weights yet): plan it with "
        "--gpu cpu");
  plan_lengths(o, r);
  r.max_seqs = o.max_seqs;
  r.tp = o.tp;
  r.pp = o.pp;
  r.dp = o.dp;
  return r;
}

// The table on stdout: the cluster and workload in one line, then a row per layout, the best first
// (`dtype` as --dtype spells it).
void print_plans(const PlanRequest& r, const std::string& dtype,
                 const std::vector<LayoutPlan>& plans) {
  std::printf(
      "%d node(s) x %d rank(s), %s (%s, %s/s, %.1f GFLOP/s), %s inside nodes, %s between; %s; %d "
      "in / %d out\n",
      r.nodes, r.ranks_per_node, r.device.name.c_str(), gib(r.device.memory_bytes).c_str(),
      gib(r.device.bandwidth).c_str(), r.device.flops / 1e9, r.intra.name.c_str(),
      r.inter.name.c_str(), dtype.c_str(), r.input_len, r.output_len);
  std::printf("%4s %4s %4s %12s %12s %12s %10s %12s %12s %8s  %s\n", "dp", "tp", "pp", "weights",
              "activations", "KV tokens", "seqs", "decode tok/s", "prefill t/s", "bubble", "note");
  for (const LayoutPlan& p : plans) {
    std::string note = p.fits ? (p.tp_crosses_nodes ? "TP crosses nodes" : "") : p.problem;
    if (&p == &plans.front() && p.fits)
      note = "recommended: fits, " + std::string(p.tp_crosses_nodes ? "" : "TP inside a node, ") +
             "highest estimated decode throughput";
    std::printf("%4d %4d %4d %12s %12s %12llu %10d %12.0f %12.0f %7.1f%%  %s\n", p.dp, p.tp, p.pp,
                gib(static_cast<double>(p.weight_bytes)).c_str(),
                gib(static_cast<double>(p.activation_bytes)).c_str(),
                static_cast<unsigned long long>(p.kv_capacity_tokens), p.concurrent_seqs,
                p.decode_tokens_per_s, p.prefill_tokens_per_s, 100 * p.bubble_fraction,
                note.c_str());
  }
}

// --json: every layout's figures, in the table's order.
nlohmann::json plans_json(const std::vector<LayoutPlan>& plans) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayoutPlan& p : plans)
    out.push_back({{"dp", p.dp},
                   {"tp", p.tp},
                   {"pp", p.pp},
                   {"fits", p.fits},
                   {"problem", p.problem},
                   {"weight_bytes_per_rank", p.weight_bytes},
                   {"activation_bytes_per_rank", p.activation_bytes},
                   {"kv_bytes_per_token", p.kv_bytes_per_token},
                   {"kv_capacity_tokens", p.kv_capacity_tokens},
                   {"concurrent_sequences", p.concurrent_seqs},
                   {"decode_tokens_per_second", p.decode_tokens_per_s},
                   {"prefill_tokens_per_second", p.prefill_tokens_per_s},
                   {"allreduce_seconds_per_step", p.allreduce_seconds_per_step},
                   {"send_seconds_per_step", p.send_seconds_per_step},
                   {"bubble_fraction", p.bubble_fraction},
                   {"tp_crosses_nodes", p.tp_crosses_nodes}});
  return out;
}

}  // namespace

int plan_command(const PlanOptions& o, const MpiSession& mpi) {
  if (mpi.rank() != 0) return 0;
  if (o.model.empty() == o.shape.empty()) fail("give exactly one of --model and --shape");
  if (o.vocab > 0 && o.shape.empty()) fail("--vocab applies to --shape only");
  check_output_files({o.model.empty() ? "" : o.model + "/config.json", o.hostfile},
                     {{"--json", o.json}}, model_files(o.model));
  const PlanRequest r = plan_request(o);
  const std::vector<LayoutPlan> plans = plan_layouts(r);
  print_plans(r, o.dtype, plans);
  if (!o.json.empty()) write_json_file(o.json, plans_json(plans), "--json");
  return plans.front().fits ? 0 : 1;
}

}  // namespace tpllama
