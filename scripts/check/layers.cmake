# Usage: cmake -DSOURCE_DIR=<repository> -P scripts/check/layers.cmake
#
# Checks every #include in <repository>/src against the layer table <repository>/src/layers.cmake
# (the test layers_include_order runs it, as the build does before anything compiles):
#
#   - a folder includes itself and exactly the folders its TPLLAMA_USES_<folder> lists: an include
#     of any other folder is named, and so is a listed folder that none of its files includes (the
#     list, which CMakeLists.txt links, would then be looser than the code);
#   - every list names only folders before it in TPLLAMA_LAYERS (the graph has no cycle);
#   - only ops/ includes ops/cpu/ and ops/cuda/, and only ops/cuda/ includes kernels/;
#   - the libraries behind the layers are included only where the CMake targets link them: MPI in
#     parallel/, the CUDA runtime, cuBLAS and NCCL in ops/cuda/ and parallel/nccl_comm, OpenMP in
#     ops/, SentencePiece, PCRE2 and utf8proc in text/ (utf8proc also in chat/), CLI11 in app/ and
#     main.cpp.
#
# The per-folder libraries already make most upward calls a link error; this also catches an
# upward include of a header that needs no linking (a type, an inline function, a template).
cmake_minimum_required(VERSION 3.22)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository> -P scripts/check/layers.cmake")
endif()
get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)
include(${SOURCE_DIR}/src/layers.cmake)

# The folders (of src/, or src/ops/ for the backends) where a system header may be included.
set(system_headers
  "mpi\\.h=parallel"
  "(cuda[A-Za-z0-9_]*|cublas[A-Za-z0-9_]*|nccl)\\.h=ops/cuda parallel/nccl_comm"
  "omp\\.h=ops"
  "sentencepiece_[a-z_]*\\.h=text"
  "pcre2\\.h=text"
  "utf8proc\\.h=text chat"
  "CLI/.*=app main")

set(violations "")

# The table itself: each list names folders below its own.
set(below "")
foreach(folder IN LISTS TPLLAMA_LAYERS)
  foreach(used IN LISTS TPLLAMA_USES_${folder})
    if(NOT used IN_LIST below)
      list(APPEND violations "src/layers.cmake: ${folder}/ lists ${used}/, which is not a folder \
below it in TPLLAMA_LAYERS")
    endif()
  endforeach()
  list(APPEND below ${folder})
endforeach()

file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}/src
  ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh)
list(SORT sources)

set(checked 0)
set(folders_seen "")
foreach(source IN LISTS sources)
  if(source MATCHES "^([a-z_]+)/")
    set(folder ${CMAKE_MATCH_1})
  else()
    set(folder main)
  endif()
  if(NOT folder IN_LIST TPLLAMA_LAYERS)
    list(APPEND violations "src/${source}: folder '${folder}' has no place in the layer table \
(add it to src/layers.cmake and src/README.md)")
    continue()
  endif()
  list(APPEND folders_seen ${folder})
  set(uses "${TPLLAMA_USES_${folder}}")
  if(uses)
    list(JOIN uses ", " uses_text)
    set(uses_text "it uses ${uses_text}")
  else()
    set(uses_text "it uses no other folder")
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
      if(NOT target IN_LIST TPLLAMA_LAYERS OR target STREQUAL folder)
        continue()
      endif()
      if(target IN_LIST uses)
        set(used_${folder}_${target} TRUE)
      else()
        list(APPEND violations "src/${source}: #include \"${header}\": ${folder}/ may not include \
${target}/ (src/layers.cmake: ${uses_text})")
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

# Each list exactly: a folder it names that none of its files includes is a dependency the build
# links for nothing (and a door left open for the next include).
list(REMOVE_DUPLICATES folders_seen)
foreach(folder IN LISTS folders_seen)
  foreach(used IN LISTS TPLLAMA_USES_${folder})
    if(NOT used_${folder}_${used})
      list(APPEND violations "src/layers.cmake: ${folder}/ lists ${used}/, but none of its files \
includes it: drop it from TPLLAMA_USES_${folder}")
    endif()
  endforeach()
endforeach()

list(LENGTH sources n_sources)
if(violations)
  list(LENGTH violations n)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "${n} violation(s) of the layer table (src/layers.cmake):\n  ${text}")
endif()
message(STATUS "layers: ${checked} includes in ${n_sources} files of src/ follow src/layers.cmake")
