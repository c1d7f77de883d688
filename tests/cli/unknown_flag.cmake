# An unknown flag is a usage error: exit 2 with "error: " on stderr, and no crash.
execute_process(COMMAND ${AMPCTL} --no-such-flag RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit 2, got ${rc}; stderr: ${err}")
endif()
if(NOT err MATCHES "^error: ")
  message(FATAL_ERROR "stderr does not start with 'error: ': ${err}")
endif()
