# `ampctl resume` end to end: train 60 steps with a checkpoint every 20, extend the run to 90 from
# its directory, and check metrics.jsonl then holds each step once; an override that changes the
# model's shape is refused with exit 2; a damaged checkpoint exits 2; an older checkpoint than the
# run's newest is refused in place, continues in a new directory with --run-dir and in place
# with --rewind.
set(dir ${WORK}/resume-test)
file(REMOVE_RECURSE ${dir})
set(common --set device=cpu --set logging.metrics_every=1 --set training.eval_every=0)
execute_process(COMMAND ${AMPCTL} train --config ${CONFIG} ${common} --set training.max_steps=60
                --set checkpoint.every_steps=20 --run-dir ${dir}
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train exited ${rc}: ${err}")
endif()
if(NOT EXISTS ${dir}/checkpoints/latest)
  message(FATAL_ERROR "no checkpoints/latest after training")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${dir} --set training.max_steps=90
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resume exited ${rc}: ${err}")
endif()
file(STRINGS ${dir}/metrics.jsonl lines REGEX "\"kind\":\"train\"")
list(LENGTH lines n)
if(NOT n EQUAL 90)
  message(FATAL_ERROR "expected 90 train lines after extending to 90, got ${n}")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${dir} --set model.hidden=[8]
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "model")
  message(FATAL_ERROR "a shape-changing override: expected exit 2 naming the key, got ${rc}: ${err}")
endif()
file(WRITE ${WORK}/broken-checkpoint.json "{\"format\": \"ampctl-checkpoint\", \"version\": 1")
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${WORK}/broken-checkpoint.json
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^error: ")
  message(FATAL_ERROR "a truncated checkpoint: expected exit 2, got ${rc}: ${err}")
endif()

# A checkpoint whose tensors disagree with its own config (hidden widths edited) is refused.
file(GLOB ckpts ${dir}/checkpoints/step-*.json)
list(GET ckpts 0 ckpt)
file(READ ${ckpt} text)
string(REGEX REPLACE "\"hidden\": \\[([\t\n ]*)256," "\"hidden\": [\\1128," edited "${text}")
if(edited STREQUAL text)
  message(FATAL_ERROR "could not find the hidden widths in ${ckpt}")
endif()
# With its document CRC the edit is refused as damage; without one (a checkpoint written before
# the CRC existed) the tensors' shapes are checked against the config.
string(REGEX REPLACE ",[\t\n ]*\"crc32\": \"[0-9a-f]+\"[\t\n ]*}[\t\n ]*$" "\n}\n" edited_old "${edited}")
file(MAKE_DIRECTORY ${WORK}/resume-edited-crc/checkpoints)
file(WRITE ${WORK}/resume-edited-crc/checkpoints/step-00000020.json "${edited}")
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${WORK}/resume-edited-crc/checkpoints/step-00000020.json
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "crc32 mismatch over the document")
  message(FATAL_ERROR "edited config with its CRC: expected exit 2 naming the CRC, got ${rc}: ${err}")
endif()
set(edited "${edited_old}")
file(MAKE_DIRECTORY ${WORK}/resume-edited/checkpoints)
file(WRITE ${WORK}/resume-edited/checkpoints/step-00000020.json "${edited}")
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${WORK}/resume-edited/checkpoints/step-00000020.json
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "layers\\.0\\.weight")
  message(FATAL_ERROR "tensor shape vs config: expected exit 2 naming the tensor, got ${rc}: ${err}")
endif()

# Resuming a checkpoint older than the run's newest would replace the run's history after it:
# refused (exit 2, naming the later checkpoints), nothing changed; --run-dir continues it in a new
# directory (a branch: the steps up to the checkpoint copied, the run left as it is, the branch's
# later lines bitwise the run's); --rewind continues in place, dropping the later lines and
# checkpoints.
set(hist ${WORK}/resume-history)
file(REMOVE_RECURSE ${hist} ${hist}-branch)
execute_process(COMMAND ${AMPCTL} train --config ${CONFIG} ${common} --set training.max_steps=60
                --set checkpoint.every_steps=20 --set checkpoint.keep_last=5 --run-dir ${hist}
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train exited ${rc}: ${err}")
endif()
file(SHA256 ${hist}/metrics.jsonl metrics_before)
file(GLOB ckpts_before ${hist}/checkpoints/*)
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${hist}/checkpoints/step-00000020.json
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
file(SHA256 ${hist}/metrics.jsonl metrics_after)
file(GLOB ckpts_after ${hist}/checkpoints/*)
if(NOT rc EQUAL 2 OR NOT err MATCHES "later checkpoints \\(step-00000040\\.json, step-00000060\\.json\\)"
   OR NOT err MATCHES "--run-dir NEW_DIR" OR NOT err MATCHES "--rewind"
   OR NOT metrics_after STREQUAL metrics_before OR NOT ckpts_after STREQUAL ckpts_before)
  message(FATAL_ERROR "an older checkpoint resumed in place: expected exit 2 naming the later "
                      "checkpoints and nothing changed, got ${rc}: ${err}")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${hist}/checkpoints/step-00000020.json
                --run-dir ${hist}-branch RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
file(SHA256 ${hist}/metrics.jsonl metrics_after)
file(GLOB ckpts_after ${hist}/checkpoints/*)
if(NOT rc EQUAL 0 OR NOT metrics_after STREQUAL metrics_before
   OR NOT ckpts_after STREQUAL ckpts_before OR NOT EXISTS ${hist}/summary.json)
  message(FATAL_ERROR "a branch: expected exit 0 and its run unchanged, got ${rc}: ${err}")
endif()
file(STRINGS ${hist}/metrics.jsonl run_lines REGEX "\"kind\":\"train\"")
file(STRINGS ${hist}-branch/metrics.jsonl branch_lines REGEX "\"kind\":\"train\"")
string(REGEX REPLACE "\"time_s\":[0-9.e+-]+" "" run_lines "${run_lines}")
string(REGEX REPLACE "\"time_s\":[0-9.e+-]+" "" branch_lines "${branch_lines}")
if(NOT run_lines STREQUAL branch_lines)
  message(FATAL_ERROR "a branch at step 20: its train lines differ from the run's")
endif()
file(READ ${hist}/checkpoints/step-00000020.json run_ckpt)
file(READ ${hist}-branch/checkpoints/step-00000020.json branch_ckpt)
if(NOT run_ckpt STREQUAL branch_ckpt OR NOT EXISTS ${hist}-branch/input.json)
  message(FATAL_ERROR "a branch: its step-20 checkpoint is not the run's, or input.json is missing")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${hist}/checkpoints/step-00000020.json
                --run-dir ${hist}-branch RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "already holds a run")
  message(FATAL_ERROR "a branch into a run: expected exit 2, got ${rc}: ${err}")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${hist}/checkpoints/step-00000020.json
                --rewind --set training.max_steps=30 --set checkpoint.every_steps=0
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
set(said "rewind: dropped [0-9]+ metrics lines after step 20 and removed step-00000040\\.json, step-00000060\\.json")
file(GLOB ckpts_after RELATIVE ${hist}/checkpoints ${hist}/checkpoints/*)
file(STRINGS ${hist}/metrics.jsonl lines REGEX "\"kind\":\"train\"")
list(LENGTH lines n)
list(SORT ckpts_after)
if(NOT rc EQUAL 0 OR NOT n EQUAL 30
   OR NOT ckpts_after STREQUAL "latest;step-00000020.json;step-00000030.json"
   OR NOT out MATCHES "${said}")
  message(FATAL_ERROR "--rewind to step 20, on to 30: expected 30 train lines and checkpoints "
                      "20 and 30, got ${rc}, ${n} lines, ${ckpts_after}: ${out} ${err}")
endif()
