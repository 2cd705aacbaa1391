#!/usr/bin/env bash
# Usage: scripts/device/fetch_debs.sh   (here, before a GPU check; needs apt-get and network)
#
# Downloads into .debs/ (ignored by git) the Debian packages the build needs that the bare GPU
# machine lacks: Open MPI and its libraries, GoogleTest, CLI11, nlohmann-json and SentencePiece
# (about 9 MB). scripts/device/check.sh unpacks them there; the device run carries .debs. (The
# test model, models/stories260K, is part of the working tree and travels with it.)
set -euo pipefail
cd "$(dirname "$0")/../.."
packages=(libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200
          libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libltdl7 libmunge2 libatomic1
          libgtest-dev libcli11-dev nlohmann-json3-dev libsentencepiece0 libsentencepiece-dev)
mkdir -p .debs
(cd .debs && apt-get download "${packages[@]}")
du -sh .debs
