// Request and Result helpers that do not belong to one reader or writer.
#include "io/request.h"

namespace tpllama {

std::string id_key(const nlohmann::json& id) {
  return id.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_line_key(size_t line) {
  return "line:" + std::to_string(line);
}

}  // namespace tpllama
