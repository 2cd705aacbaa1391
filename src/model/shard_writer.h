// `tpllama shard`: splits a Hugging Face checkpoint into one safetensors file per rank of a
// TP x PP layout, by the same shard table the loader uses, plus a manifest of the layout.
#pragma once

#include <string>
#include <vector>

namespace tpllama {

struct ShardOptions {
  std::string model_dir;
  std::string out_dir;
  int tp = 1;
  int pp = 1;
  std::vector<int> pp_layers;  // empty: the default split
  bool int8 =
      false;  // quantize the matrices of an f32 / f16 / bf16 checkpoint (an int8 one stays int8)
};

// Writes out_dir/rank-0000R-of-0000N.safetensors, config.json (with the quantization_config of an
// int8 output), tokenizer files and tpllama_shards.json (layout, layer ranges, source file sizes
// and FNV-1a 64 checksums).
void write_shards(const ShardOptions& options);

}  // namespace tpllama
