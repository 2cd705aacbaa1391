# A fixture's layer table for the test layers_check_names_wrong_includes: model/ lists a folder
# above it, and engine/ lists core/, which none of its files includes.
set(TPLLAMA_LAYERS core model engine)
set(TPLLAMA_USES_core "")
set(TPLLAMA_USES_model core engine)
set(TPLLAMA_USES_engine core model)
