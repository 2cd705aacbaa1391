// The MPI session the mpi tests run in (made by mpi_main.cpp).
#pragma once

#include "parallel/mpi_session.h"

tpllama::MpiSession& test_world();
