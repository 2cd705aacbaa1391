// A fixture for the test layers_check_names_wrong_includes: core/ reaching up into engine/.
#pragma once
#include "engine/engine.h"
