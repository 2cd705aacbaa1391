// Parses template text into the syntax tree, refusing when the template loads any construct the
// subset lacks (a tag, filter, test, method or function), with the template line it is on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace tpllama::jinja {

// `functions`: names of the callables the caller will pass at render time (beyond namespace, range
// and dict); calling any other name that no macro defines is refused.
Body parse_template(std::string_view source, const std::string& origin, const LexOptions& options,
                    const std::vector<std::string>& functions);

}  // namespace tpllama::jinja
