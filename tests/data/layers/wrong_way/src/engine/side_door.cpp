// A fixture for the test layers_check_names_wrong_includes: engine/ past ops/ into its CPU
// backend, MPI outside parallel/, and core/ listed (src/layers.cmake) but never included.
#include <mpi.h>

#include "model/config.h"
#include "ops/cpu/gemm.h"
