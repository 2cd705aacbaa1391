// A fixture for the test layers_check_names_wrong_includes: core/ reaching up into runtime/.
#pragma once
#include "runtime/engine.h"
