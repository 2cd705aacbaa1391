// The checks around loading a rank's shard: before, that its weights can be held as asked and fit
// its share of the device; after, that every element of the model is held exactly once over the
// ranks (rank 0 logs every rank's bytes).
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/weights.h"
#include "parallel/mpi_session.h"
#include "parallel/topology.h"

namespace tpllama {

// Before loading (inside a collective phase): int8 weights split on whole groups, and this rank's
// weights as it will hold them within its share (over `sharers` ranks) of its device's free memory.
void check_weights_placeable(const LlamaConfig& config, const Topology& topology,
                             const DeviceContext& ctx, DType dtype, int sharers);

// After loading (collective): every rank's read and held bytes on rank 0, and the check that the
// ranks hold `total` unique elements (the checkpoint's, or a synthetic model's parameter count).
void audit_weights(const MpiSession& mpi, const Topology& topology, const ModelWeights& weights,
                   uint64_t total, bool from_checkpoint);

}  // namespace tpllama
