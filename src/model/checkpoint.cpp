// Checkpoint directory discovery and validation.
#include "model/checkpoint.h"

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "model/shard_table.h"
#include "ops/weight.h"

namespace tpllama {

namespace fs = std::filesystem;

namespace {

// "model.layers.7.*" for a tensor of a layer past the config's last (one entry per such layer),
// else the tensor's own name.
std::string unaccounted_group(const std::string& name, int n_layers) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return name;
  const size_t dot = name.find('.', prefix.size());
  const std::string number =
      name.substr(prefix.size(), dot == std::string::npos ? dot : dot - prefix.size());
  if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos ||
      number.size() > 9)
    return name;
  return std::stoi(number) >= n_layers ? prefix + number + ".*" : name;
}

// A tensor the shard table does not name would be silently left out (a config with fewer layers
// than the checkpoint runs a truncated model), so it is refused before any weight is read.
void check_accounted_for(const std::string& dir, const LlamaConfig& config,
                         const std::map<std::string, const SafetensorsFile*>& where) {
  std::set<std::string> expected;
  for (const ShardEntry& e : build_shard_table(config, Topology::single(config.n_layers))) {
    expected.insert(e.name);
    auto it = where.find(e.name);  // an int8 matrix comes with its scales
    if (it != where.end() && it->second->info(e.name).dtype == DType::kI8)
      expected.insert(int8_scale_name(e.name));
  }
  std::vector<std::string> groups;
  for (const auto& [name, file] : where) {
    if (expected.count(name) != 0) continue;
    std::string group = unaccounted_group(name, config.n_layers);
    if (groups.empty() || groups.back() != group) groups.push_back(std::move(group));
  }
  if (groups.empty()) return;
  constexpr size_t kShown = 8;
  std::string list;
  for (size_t i = 0; i < groups.size() && i < kShown; ++i) list += (i ? ", " : "") + groups[i];
  if (groups.size() > kShown) list += ", and " + std::to_string(groups.size() - kShown) + " more";
  fail("model directory ", dir, ": checkpoint has tensors config.json does not account for: ", list,
       " (config.json says num_hidden_layers ", config.n_layers, ", tie_word_embeddings ",
       config.tie_word_embeddings ? "true" : "false", "); fix config.json or the checkpoint");
}

}  // namespace

const std::vector<std::string>& tokenizer_companion_files() {
  static const std::vector<std::string> names = {"tokenizer_config.json", "generation_config.json",
                                                 "chat_template.jinja", "special_tokens_map.json"};
  return names;
}

const std::vector<std::string>& model_side_files() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = {"tokenizer.model", "tokenizer.json"};
    all.insert(all.end(), tokenizer_companion_files().begin(), tokenizer_companion_files().end());
    return all;
  }();
  return names;
}

void copy_model_side_files(const std::string& from_dir, const std::string& to_dir) {
  for (const std::string& name : model_side_files())
    if (fs::exists(from_dir + "/" + name))
      fs::copy_file(from_dir + "/" + name, to_dir + "/" + name,
                    fs::copy_options::overwrite_existing);
}

std::string layer_tensor_name(int layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  if (!fs::is_directory(dir))
    fail("model directory ", dir, " does not exist or is not a directory");
  std::string config_path = dir + "/config.json";
  if (!fs::exists(config_path)) fail("model directory ", dir, " has no config.json");
  config_ = load_llama_config(config_path);
  if (config_.int8_group_size > 0 && config_.int8_group_size != ops::int8_group_size())
    fail(config_path, ": quantization_config.group_size is ", config_.int8_group_size,
         ", but tpllama's int8 ", "kernels use groups of ", ops::int8_group_size(),
         " columns: write the checkpoint again with `tpllama ",
         "convert` or `tpllama shard --dtype int8` from its f32, f16 or bf16 original");
  if (fs::exists(dir + "/" + kShardManifestName)) {
    read_manifest(dir + "/" + kShardManifestName);
    return;
  }
  std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(index_path)) {
    open_index(index_path);
  } else if (fs::exists(dir + "/model.safetensors")) {
    files_.push_back(std::make_unique<SafetensorsFile>(dir + "/model.safetensors"));
    for (const auto& [name, info] : files_.back()->tensors()) where_[name] = files_.back().get();
  } else {
    fail("model directory ", dir,
         " has neither model.safetensors nor model.safetensors.index.json (only safetensors "
         "checkpoints are read; convert others first)");
  }
  check_accounted_for(dir_, config_, where_);
}

void Checkpoint::open_index(const std::string& index_path) {
  nlohmann::json index;
  try {
    index = parse_json(read_regular_file(index_path, "checkpoint index", kMaxSmallFileBytes),
                       index_path);
  } catch (const nlohmann::json::exception& e) {
    fail(index_path, ": not valid JSON: ", e.what());
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path, ": missing 'weight_map' object");
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      fail(index_path, ": weight_map entry for '", name, "' is not a file name");
    std::string file_name = file.get<std::string>();
    if (file_name.find('/') != std::string::npos)
      fail(index_path, ": weight_map entry for '", name,
           "' points outside the directory: ", file_name);
    auto it = by_file.find(file_name);
    if (it == by_file.end()) {
      std::string path = dir_ + "/" + file_name;
      if (!fs::exists(path))
        fail(index_path, ": tensor '", name, "' is in ", file_name, ", which is missing");
      files_.push_back(std::make_unique<SafetensorsFile>(path));
      it = by_file.emplace(file_name, files_.back().get()).first;
    }
    if (!it->second->contains(name))
      fail(index_path, " says tensor '", name, "' is in ", file_name,
           ", but that file does not hold it");
    where_[name] = it->second;
  }
}

bool Checkpoint::is_int8_scale(const std::string& name) const {
  const std::string suffix = int8_scale_name("");
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string weight = name.substr(0, name.size() - suffix.size());
  return contains(weight) && info(weight).dtype == DType::kI8;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("model directory ", dir_, ": no tensor named '", name, "'");
  return *it->second;
}

}  // namespace tpllama

namespace tpllama {

uint64_t Checkpoint::total_elements() const {
  if (presharded()) return manifest_.source_elements;
  uint64_t total = 0;
  for (const auto& [name, file] : where_)
    if (!is_int8_scale(name)) total += static_cast<uint64_t>(file->info(name).numel());
  return total;
}

}  // namespace tpllama

namespace tpllama {
namespace {

std::string join(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(v[i]);
  }
  return out;
}

}  // namespace

void Checkpoint::read_manifest(const std::string& path) {
  nlohmann::json m;
  try {
    m = parse_json(read_regular_file(path, "shard manifest", kMaxSmallFileBytes), path);
    manifest_.tp = m.at("tp").get<int>();
    manifest_.pp = m.at("pp").get<int>();
    manifest_.stage_layers = m.at("stage_layers").get<std::vector<int>>();
    manifest_.files = m.at("files").get<std::vector<std::string>>();
    if (m.contains("file_bytes"))
      manifest_.file_bytes = m.at("file_bytes").get<std::vector<uint64_t>>();
    manifest_.source_elements = m.at("source").at("elements").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not a valid shard manifest: ", e.what());
  }
  if (manifest_.tp < 1 || manifest_.pp < 1 ||
      static_cast<int>(manifest_.files.size()) != manifest_.tp * manifest_.pp ||
      static_cast<int>(manifest_.stage_layers.size()) != manifest_.pp)
    fail(path, ": inconsistent shard manifest (tp ", manifest_.tp, ", pp ", manifest_.pp, ", ",
         manifest_.files.size(), " files, ", manifest_.stage_layers.size(), " stages)");
}

void Checkpoint::open_rank_shard(const Topology& t) {
  TPLLAMA_CHECK(presharded(), "open_rank_shard on a plain checkpoint");
  std::vector<int> stages;
  for (int s = 0; s < t.pp_size(); ++s) stages.push_back(t.stage_layers(s).count());
  if (t.tp_size() != manifest_.tp || t.pp_size() != manifest_.pp ||
      stages != manifest_.stage_layers)
    fail("model directory ", dir_, " was sharded for tp=", manifest_.tp, " pp=", manifest_.pp,
         " (layers per stage ", join(manifest_.stage_layers), ", ", manifest_.files.size(),
         " ranks), but this run is tp=", t.tp_size(), " pp=", t.pp_size(), " (layers per stage ",
         join(stages), ", ", t.replica_size(), " ranks a replica): run with --tp ", manifest_.tp,
         " --pp ", manifest_.pp, " --pp-layers ", join(manifest_.stage_layers),
         " on that many ranks, or shard the original model again");
  // Every replica reads the same shards: by the rank's place in its replica.
  const std::string& name = manifest_.files[static_cast<size_t>(t.replica_rank())];
  if (name.find('/') != std::string::npos)
    fail(dir_, "/", kShardManifestName, ": file name ", name, " leaves the directory");
  const std::string path = dir_ + "/" + name;
  if (!fs::exists(path))
    fail("model directory ", dir_, ": the shard of rank ", t.replica_rank(), ", ", name,
         ", is missing");
  const size_t r = static_cast<size_t>(t.replica_rank());
  if (r < manifest_.file_bytes.size() && fs::file_size(path) != manifest_.file_bytes[r])
    fail("model directory ", dir_, ": ", name, " has ", fs::file_size(path),
         " bytes but was written with ", manifest_.file_bytes[r],
         ": it is not the file `tpllama shard` wrote; shard again");
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& [tensor, info] : files_.back()->tensors()) where_[tensor] = files_.back().get();
}

}  // namespace tpllama
