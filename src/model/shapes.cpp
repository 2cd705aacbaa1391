// The named shapes' configs.
#include "model/shapes.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace tpllama {

LlamaConfig shape_config(const std::string& name) {
  LlamaConfig c;
  auto set = [&](int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int ctx) {
    c.dim = dim;
    c.hidden_dim = hidden;
    c.n_layers = layers;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = dim / heads;
    c.vocab_size = vocab;
    c.max_seq_len = ctx;
  };
  if (name == "tiny") {
    set(128, 344, 4, 8, 4, 32000, 1024);
  } else if (name == "110m") {
    set(768, 2048, 12, 12, 12, 32000, 1024);
  } else if (name == "llama2-7b") {
    set(4096, 11008, 32, 32, 32, 32000, 4096);
  } else if (name == "llama3-8b") {
    set(4096, 14336, 32, 32, 8, 128256, 8192);
    c.rope_theta = 500000.0;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128009};
  } else if (name == "llama3-tiny") {  // Llama 3's vocabulary and RoPE on toy dimensions (tests)
    set(64, 160, 2, 4, 2, 128256, 2048);
    c.rope_theta = 500000.0;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
  } else if (name == "llama2-70b") {
    set(8192, 28672, 80, 64, 8, 32000, 4096);
  } else {
    fail("unknown shape '", name,
         "' (known: tiny, llama3-tiny, 110m, llama2-7b, llama3-8b, llama2-70b)");
  }
  c.rms_norm_eps = 1e-5;
  return c;
}

LlamaConfig shape_config(const std::string& name, int vocab) {
  LlamaConfig c = shape_config(name);
  if (vocab <= 0) return c;
  if (vocab < 3)
    fail("--vocab ", vocab, ": a vocabulary needs at least 3 ids (unknown, BOS and EOS)");
  c.vocab_size = vocab;
  if (c.bos_token_id >= vocab) c.bos_token_id = 1;
  std::vector<int> eos;  // in order, each id once
  for (int id : c.eos_token_ids) {
    const int kept = id < vocab ? id : 2;
    if (std::find(eos.begin(), eos.end(), kept) == eos.end()) eos.push_back(kept);
  }
  c.eos_token_ids = eos;
  return c;
}

}  // namespace tpllama
