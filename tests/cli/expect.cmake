# The CLI scripts' one way to check a command's exit code and message (include() it).
#
#   expect_exit(WHAT GOT ERR WANT PATTERN [OUT])
#     Fails unless the exit code GOT is WANT and ERR matches the regex PATTERN ("" = anything);
#     the failure shows ERR and OUT.
#   expect_run(WHAT WANT PATTERN COMMAND...)
#     Runs COMMAND (within expect_timeout seconds, default 600: a command that blocks is a
#     failure, not a hung test), checks it with expect_exit against its stderr, and leaves its
#     stdout and stderr in last_out and last_err.
#
# A failure is a FATAL_ERROR; a script that sets expect_failure to SEND_ERROR goes on and lists
# every failing case (the test still fails at the end).
function(expect_exit what got err want pattern)
  if(NOT expect_failure)
    set(expect_failure FATAL_ERROR)
  endif()
  if(NOT "${got}" STREQUAL "${want}")
    message(${expect_failure} "${what}: expected exit ${want}, got '${got}':\n${err}\n${ARGN}")
  elseif(NOT pattern STREQUAL "" AND NOT err MATCHES "${pattern}")
    message(${expect_failure} "${what}: stderr does not match '${pattern}':\n${err}\n${ARGN}")
  endif()
endfunction()

function(expect_run what want pattern)
  if(NOT expect_timeout)
    set(expect_timeout 600)
  endif()
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT ${expect_timeout})
  expect_exit("${what}" "${got}" "${err}" "${want}" "${pattern}" "${out}")
  set(last_out "${out}" PARENT_SCOPE)
  set(last_err "${err}" PARENT_SCOPE)
endfunction()
