// The named shapes' configs.
#include "model/shapes.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace tpllama {

const char* shape_names() {
  return "tiny, llama3-tiny, mistral-tiny, qwen2-tiny, qwen3-tiny, 110m, llama2-7b, llama3-8b, "
         "llama2-70b, mistral-7b, qwen2.5-7b, qwen2.5-72b, qwen3-8b, qwen3-32b";
}

LlamaConfig shape_config(const std::string& name) {
  LlamaConfig c;
  c.rms_norm_eps = 1e-5;
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
  // Qwen2.5's and Qwen3's common numbers: RoPE base 10^6, eps 10^-6, <|endoftext|> as BOS and
  // <|im_end|>, <|endoftext|> as EOS.
  auto qwen = [&](ModelType type) {
    c.model_type = type;
    c.qkv_bias = type == ModelType::kQwen2;
    c.qk_norm = type == ModelType::kQwen3;
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645, 151643};
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
  } else if (name == "mistral-7b") {  // Mistral 7B v0.1: a 4096-position sliding window
    set(4096, 14336, 32, 32, 8, 32000, 32768);
    c.model_type = ModelType::kMistral;
    c.sliding_window = 4096;
  } else if (name == "mistral-tiny") {  // the window on toy dimensions (tests)
    set(128, 344, 4, 8, 4, 32000, 1024);
    c.model_type = ModelType::kMistral;
    c.sliding_window = 64;
  } else if (name == "qwen2.5-7b") {
    set(3584, 18944, 28, 28, 4, 152064, 32768);
    qwen(ModelType::kQwen2);
  } else if (name == "qwen2.5-72b") {
    set(8192, 29568, 80, 64, 8, 152064, 32768);
    qwen(ModelType::kQwen2);
  } else if (name == "qwen2-tiny") {  // Qwen2's biases on toy dimensions (tests), tied
    set(128, 344, 4, 8, 4, 151936, 1024);
    qwen(ModelType::kQwen2);
    c.tie_word_embeddings = true;
  } else if (name == "qwen3-8b") {
    set(4096, 12288, 36, 32, 8, 151936, 40960);
    qwen(ModelType::kQwen3);
    c.head_dim = 128;
  } else if (name == "qwen3-32b") {
    set(5120, 25600, 64, 64, 8, 151936, 40960);
    qwen(ModelType::kQwen3);
    c.head_dim = 128;                 // q_proj 5120 -> 8192
  } else if (name == "qwen3-tiny") {  // Qwen3's q/k norms and wide heads on toy dimensions, tied
    set(128, 344, 4, 4, 2, 151936, 1024);
    qwen(ModelType::kQwen3);
    c.head_dim = 64;
    c.tie_word_embeddings = true;
  } else {
    fail("unknown shape '", name, "' (known: ", shape_names(), ")");
  }
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
