# Runs the manifest generator GEN and compares its output with the committed file WANT.
execute_process(COMMAND ${GEN} OUTPUT_VARIABLE got RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GEN} failed: ${rc}")
endif()
file(READ ${WANT} want)
if(NOT got STREQUAL want)
  message(FATAL_ERROR "bindings/abi_manifest.txt is out of date with include/llmrt/llmrt.h: regenerate it with "
                      "build/tests/llmrt_abi_manifest > bindings/abi_manifest.txt, then update every binding's "
                      "declarations to match.\n--- generated ---\n${got}")
endif()
