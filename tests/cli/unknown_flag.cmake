# An unknown flag is a usage error: exit 2 with "error: " on stderr, and no crash. A command line
# a user of other tools would type gets the hint that says what ampctl calls it.
execute_process(COMMAND ${AMPCTL} --no-such-flag RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit 2, got ${rc}; stderr: ${err}")
endif()
if(NOT err MATCHES "^error: ")
  message(FATAL_ERROR "stderr does not start with 'error: ': ${err}")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
set(expect_failure SEND_ERROR)
set(expect_timeout 60)
set(cfg ${CMAKE_CURRENT_LIST_DIR}/../../configs/quickstart.yaml)
expect_run("a misspelt command" 2 "hint: did you mean 'ampctl train'\\?" ${AMPCTL} tarin)
expect_run("no such command" 2 "hint: 'frobnicate' is not a command; the commands are train, resume,"
           ${AMPCTL} frobnicate)
expect_run("train's config without --config" 2
           "error: --config is required\nhint: give it with --config: ampctl train --config .*quickstart\\.yaml"
           ${AMPCTL} train ${cfg})
expect_run("train --out" 2 "hint: ampctl train writes its run into --run-dir DIR"
           ${AMPCTL} train --config ${cfg} --out somewhere)
expect_run("train --output_dir=" 2 "hint: ampctl train writes its run into --run-dir DIR"
           ${AMPCTL} train --config ${cfg} --output_dir=somewhere)
expect_run("a misspelt option" 2 "hint: did you mean --checkpoint\\? \\(ampctl resume --help"
           ${AMPCTL} resume --chekpoint ${CMAKE_CURRENT_LIST_DIR})
expect_run("resume's directory without --checkpoint" 2
           "hint: give it with --checkpoint: ampctl resume --checkpoint "
           ${AMPCTL} resume ${CMAKE_CURRENT_LIST_DIR})
expect_run("a command's missing argument" 2 "hint: run 'ampctl report --help' for its options"
           ${AMPCTL} report)
# A flag's value is not taken for a bare word: the hint is the command's --help.
expect_run("an extra word after a flag's value" 2 "not expected: extra\nhint: run 'ampctl validate --help'"
           ${AMPCTL} validate --config ${cfg} --set seed=1 extra)
if(EXISTS somewhere)
  message(SEND_ERROR "a refused command line created 'somewhere'")
endif()

# A misspelt path choice in the environment is refused before anything is made, not ignored
# (AMPCTL_ATTENTION=materialized would have run the fused path in silence).
set(envrun ${CMAKE_CURRENT_BINARY_DIR}/unknown_flag_env_run)
file(REMOVE_RECURSE ${envrun})
expect_run("a misspelt AMPCTL_ATTENTION" 2
           "error: AMPCTL_ATTENTION='materialized': expected one of fused, fused_fma, materialised \\(or unset\\)\nhint: did you mean AMPCTL_ATTENTION=materialised\\?"
           ${CMAKE_COMMAND} -E env AMPCTL_ATTENTION=materialized
           ${AMPCTL} train --config ${cfg} --set training.max_steps=30 --run-dir ${envrun})
if(EXISTS ${envrun})
  message(SEND_ERROR "a refused environment left ${envrun}")
endif()
