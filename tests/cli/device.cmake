# Asking for a GPU that this machine or build cannot give is a configuration error: exit 2 with a
# hint, before anything is trained (cuda:7 also fails on a machine with fewer GPUs).
file(REMOVE_RECURSE ${WORK}/device-test)
execute_process(COMMAND ${AMPCTL} train --config ${CONFIG} --set device=cuda:7
                --run-dir ${WORK}/device-test RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "device=cuda:7: expected exit 2, got ${rc}:\n${err}")
endif()
if(NOT err MATCHES "error: device: 'cuda:7' requested" OR NOT err MATCHES "hint: ")
  message(FATAL_ERROR "no device error with a hint:\n${err}")
endif()
if(EXISTS ${WORK}/device-test)
  message(FATAL_ERROR "a run directory was created although the device was refused")
endif()
