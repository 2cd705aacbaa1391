# Usage: cmake -DSOURCE_DIR=<repository> -P scripts/check_layers.cmake
#
# Names every #include in src/ that goes against the layer order (the CTest test
# layers_include_order runs this; src/README.md draws the order):
#
#   core → ops (cpu, cuda → kernels) → text, io, parallel → chat, grammar → model
#        → runtime, planner → app → main.cpp
#
# A folder includes only itself and folders below it (folders on one level do not include each
# other). Only ops/ includes ops/cpu/ and ops/cuda/; only ops/cuda/ includes kernels/. The
# libraries behind the layers are included where the CMake targets link them: MPI in parallel/,
# the CUDA runtime, cuBLAS and NCCL in ops/cuda/ and parallel/nccl_comm, OpenMP in ops/,
# SentencePiece, PCRE2 and utf8proc in text/ (utf8proc also in chat/), CLI11 in app/ and main.cpp.
# The per-folder libraries already make most upward calls a link error; this also catches an
# upward include of a header that needs no linking (a type, an inline function, a template).
cmake_minimum_required(VERSION 3.22)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository> -P scripts/check_layers.cmake")
endif()

set(level_core 0)
set(level_ops 1)
set(level_text 2)
set(level_io 2)
set(level_parallel 2)
set(level_chat 3)
set(level_grammar 3)
set(level_model 4)
set(level_runtime 5)
set(level_planner 5)
set(level_app 6)
set(level_main 7)

# The folders (of src/, or src/ops/ for the backends) where a system header may be included.
set(system_headers
  "mpi\\.h=parallel"
  "(cuda[A-Za-z0-9_]*|cublas[A-Za-z0-9_]*|nccl)\\.h=ops/cuda parallel/nccl_comm"
  "omp\\.h=ops"
  "sentencepiece_[a-z_]*\\.h=text"
  "pcre2\\.h=text"
  "utf8proc\\.h=text chat"
  "CLI/.*=app main")

file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}/src
  ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh)
list(SORT sources)

set(violations "")
set(checked 0)
foreach(source IN LISTS sources)
  if(source MATCHES "^([a-z_]+)/")
    set(folder ${CMAKE_MATCH_1})
  else()
    set(folder main)
  endif()
  if(NOT DEFINED level_${folder})
    list(APPEND violations "src/${source}: folder '${folder}' has no place in the layer order \
(add it to scripts/check_layers.cmake and src/README.md)")
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/src/${source} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  foreach(line IN LISTS includes)
    math(EXPR checked "${checked} + 1")
    if(line MATCHES "include[ \t]*\"([^\"]+)\"")
      set(header ${CMAKE_MATCH_1})
      if(header MATCHES "^kernels/")
        if(NOT source MATCHES "^ops/cuda/")
          list(APPEND violations "src/${source}: #include \"${header}\": only ops/cuda/ launches kernels")
        endif()
        continue()
      endif()
      if(header MATCHES "^ops/(cpu|cuda)/")
        set(backend ${CMAKE_MATCH_1})
        if(NOT source MATCHES "^ops/")
          list(APPEND violations "src/${source}: #include \"${header}\": outside ops/, ask ops/ \
(ops/*.h) instead of its ${backend} backend")
        endif()
        continue()
      endif()
      if(NOT header MATCHES "^([a-z_]+)/")
        continue()  # a header of the same directory, or not ours
      endif()
      set(target ${CMAKE_MATCH_1})
      if(NOT DEFINED level_${target} OR target STREQUAL folder)
        continue()
      endif()
      if(NOT level_${target} LESS level_${folder})
        list(APPEND violations "src/${source}: #include \"${header}\": ${folder}/ (level \
${level_${folder}}) may not include ${target}/ (level ${level_${target}})")
      endif()
    elseif(line MATCHES "include[ \t]*<([^>]+)>")
      set(header ${CMAKE_MATCH_1})
      foreach(rule IN LISTS system_headers)
        string(REGEX MATCH "^([^=]+)=(.*)$" unused "${rule}")
        set(pattern "${CMAKE_MATCH_1}")
        set(places_text "${CMAKE_MATCH_2}")
        string(REPLACE " " ";" places "${places_text}")
        if(NOT header MATCHES "^${pattern}$")
          continue()
        endif()
        set(allowed FALSE)
        foreach(place IN LISTS places)
          if(place STREQUAL "main" AND source STREQUAL "main.cpp")
            set(allowed TRUE)
          elseif(source MATCHES "^${place}(/|\\.|_)")
            set(allowed TRUE)
          endif()
        endforeach()
        if(NOT allowed)
          list(APPEND violations "src/${source}: #include <${header}>: only ${places_text} may")
        endif()
      endforeach()
    endif()
  endforeach()
endforeach()

list(LENGTH sources n_sources)
if(violations)
  list(LENGTH violations n)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "${n} include(s) against the layer order (src/README.md):\n  ${text}")
endif()
message(STATUS "layers: ${checked} includes in ${n_sources} files of src/ follow the layer order")
