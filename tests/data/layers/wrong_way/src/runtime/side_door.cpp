// A fixture for the test layers_check_names_wrong_includes: runtime/ past ops/ into its CPU
// backend, and MPI outside parallel/.
#include <mpi.h>

#include "model/config.h"
#include "ops/cpu/gemm.h"
