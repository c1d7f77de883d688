# `ampctl resume` end to end: train 60 steps with a checkpoint every 20, extend the run to 90 from
# its directory, and check metrics.jsonl then holds each step once; an override that changes the
# model's shape is refused with exit 2; a damaged checkpoint exits 2.
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
