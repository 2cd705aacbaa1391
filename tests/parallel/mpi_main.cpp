// GoogleTest main for tests that run under mpirun: every rank runs every test, only rank 0
// prints, and the job fails when a test failed on any rank. MPI starts through the project's own
// MpiSession, which the world verbs' tests use (test_world()).
#include <mpi.h>

#include <cstdio>
#include <memory>

#include <gtest/gtest.h>

#include "parallel/mpi_session.h"
#include "test_world.h"

namespace {
tpllama::MpiSession* g_world = nullptr;
}

tpllama::MpiSession& test_world() {
  return *g_world;
}

int main(int argc, char** argv) {
  auto world = std::make_unique<tpllama::MpiSession>(&argc, &argv);
  g_world = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (world->rank() == 0 && any_failed && !failed)
    std::fprintf(stderr, "a test failed on another rank\n");
  return any_failed;  // the session finalizes MPI
}
