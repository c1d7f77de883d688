# `ampctl validate` end to end: a good config with an override resolves and re-validates to the
# same text; a file with many problems reports all of them with file:line:column; a typo gets a
# did-you-mean hint; a malformed --set is a usage error; every bad fixture exits 2 with "error: ".
set(good ${DATA}/configs/good/quickstart.yaml)

execute_process(COMMAND ${AMPCTL} validate --config ${good} --set scaler.growth_factor=4
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "validate of a good config exited ${rc}: ${err}")
endif()
if(NOT out MATCHES "growth_factor: 4\\.0 +# \\[--set scaler\\.growth_factor=4\\] ")
  message(FATAL_ERROR "the override is not in the resolved config:\n${out}")
endif()
file(WRITE ${WORK}/resolved.yaml "${out}")
execute_process(COMMAND ${AMPCTL} validate --config ${WORK}/resolved.yaml
                RESULT_VARIABLE rc OUTPUT_VARIABLE out2 ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the resolved config does not validate (exit ${rc}): ${err}")
endif()
string(REPLACE "resolved.yaml" "" out2_norm "${out2}")
string(REPLACE "quickstart.yaml" "" out_norm "${out}")
string(REGEX REPLACE "name: [^\n]*" "" out2_norm "${out2_norm}")
# Each key's origin ("# [FILE:LINE] ", "# [--set KEY=VALUE] ") differs between the two files.
string(REGEX REPLACE "# \\[[^]\n]*\\] " "# " out2_norm "${out2_norm}")
string(REGEX REPLACE "# \\[[^]\n]*\\] " "# " out_norm "${out_norm}")
string(REGEX REPLACE "name: [^\n]*" "" out_norm "${out_norm}")
if(NOT out_norm STREQUAL out2_norm)
  message(FATAL_ERROR "re-validating the resolved config changed it:\n${out}\n----\n${out2}")
endif()

execute_process(COMMAND ${AMPCTL} validate --config ${DATA}/configs/bad/multi_error.yaml
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "multi_error.yaml: expected exit 2, got ${rc}")
endif()
string(REGEX MATCHALL "error: " lines "${err}")
list(LENGTH lines n)
if(n LESS 5)
  message(FATAL_ERROR "expected every problem reported, got ${n} error lines:\n${err}")
endif()
if(NOT err MATCHES "multi_error\\.yaml:13:3: scaler\\.growth_factor: must be > 1\\.0, got 1\\.0")
  message(FATAL_ERROR "no file:line:column + key path in:\n${err}")
endif()

execute_process(COMMAND ${AMPCTL} validate --config ${good} --set scaler.growth_factr=3
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "hint: did you mean 'scaler\\.growth_factor'\\?")
  message(FATAL_ERROR "typo in --set: exit ${rc}, stderr:\n${err}")
endif()

execute_process(COMMAND ${AMPCTL} validate --config ${good} --set foo
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: ")
  message(FATAL_ERROR "--set without '=': exit ${rc}, stderr:\n${err}")
endif()

execute_process(COMMAND ${AMPCTL} validate --config ${WORK}/no-such-file.yaml
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "no-such-file\\.yaml")
  message(FATAL_ERROR "missing file: exit ${rc}, stderr:\n${err}")
endif()

file(GLOB bad_files ${DATA}/configs/bad/*.yaml)
list(LENGTH bad_files count)
if(count LESS 25)
  message(FATAL_ERROR "the bad-config corpus has only ${count} files")
endif()
foreach(f ${bad_files})
  file(STRINGS ${f} set_lines REGEX "^# set: ")
  set(args)
  foreach(l ${set_lines})
    string(REGEX REPLACE "^# set: " "" v "${l}")
    list(APPEND args --set "${v}")
  endforeach()
  execute_process(COMMAND ${AMPCTL} validate --config ${f} ${args}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET TIMEOUT 20)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: ")
    message(FATAL_ERROR "${f}: expected exit 2 and 'error: ', got ${rc}:\n${err}")
  endif()
endforeach()
message(STATUS "${count} bad configs, each exit 2")

# A file with a sweep: section: validate checks the base and every run and lists the runs;
# train refuses it (exit 2) with a hint that names `ampctl sweep`.
set(sweep_cfg ${DATA}/../../configs/sweep_scaler.yaml)
execute_process(COMMAND ${AMPCTL} validate --config ${sweep_cfg}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "# sweep: 4 run\\(s\\)"
   OR NOT out MATCHES "#   init_scale=1024.0,growth_interval=20: scaler.init_scale=1024.0")
  message(FATAL_ERROR "validate of a sweep file: exit ${rc}\n${out}\n${err}")
endif()
execute_process(COMMAND ${AMPCTL} validate --config ${sweep_cfg} --set scaler.growth_factor=0.5
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "scaler\\.growth_factor: must be > 1\\.0")
  message(FATAL_ERROR "validate of a sweep file with a bad --set: exit ${rc}\n${err}")
endif()
execute_process(COMMAND ${AMPCTL} train --config ${sweep_cfg} --run-dir ${WORK}/sweep_refused
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "sweep: unknown key" OR NOT err MATCHES "hint: .*ampctl sweep")
  message(FATAL_ERROR "train of a sweep file: exit ${rc}\n${err}")
endif()
if(EXISTS ${WORK}/sweep_refused)
  message(FATAL_ERROR "train of a sweep file wrote ${WORK}/sweep_refused")
endif()
