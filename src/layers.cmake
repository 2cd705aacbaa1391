# The layers of src/: every folder, lowest first, and exactly the folders its files include.
#
# CMakeLists.txt links each folder's library to the libraries of its list and nothing else, and
# scripts/check/layers.cmake (run by the build before anything compiles, and by the test
# layers_include_order) fails on an include of a folder outside the list, on a listed folder that
# no file of the folder includes, and on a list that names a folder above it. The build and the
# check read this one table, so they cannot drift apart. src/README.md draws the same graph.
#
#   core → ops (cpu, cuda → kernels) → text, io, parallel → chat, grammar → model → executor
#        → engine → session, planner → app → main.cpp
set(TPLLAMA_LAYERS core ops text io parallel chat grammar model executor engine session planner app
    main)

set(TPLLAMA_USES_core "")
set(TPLLAMA_USES_ops core)
set(TPLLAMA_USES_text core)
set(TPLLAMA_USES_io core)
set(TPLLAMA_USES_parallel core ops)
set(TPLLAMA_USES_chat core)
set(TPLLAMA_USES_grammar core)
set(TPLLAMA_USES_model core ops text io parallel chat)
set(TPLLAMA_USES_executor core ops parallel model)
set(TPLLAMA_USES_engine core text io grammar model executor)
set(TPLLAMA_USES_session core ops text io parallel model executor engine)
set(TPLLAMA_USES_planner core ops parallel model)
set(TPLLAMA_USES_app core ops text io parallel model engine session planner)
set(TPLLAMA_USES_main core ops parallel app)  # src/main.cpp
