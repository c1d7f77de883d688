# `ampctl inspect` and `ampctl export` end to end on a hand-written checkpoint (its base64 and
# crc32 computed with Python's base64 and zlib, not by ampctl): inspect of a run directory as
# text and as JSON, export to safetensors (checked byte for byte here, and by the independent
# Python reader when python3 is found), and exit 2 for a damaged, missing or foreign checkpoint
# and for an unknown export format.
#
# Register in tests/CMakeLists.txt:
#   add_test(NAME cli.checkpoint COMMAND ${CMAKE_COMMAND} -DAMPCTL=$<TARGET_FILE:ampctl>
#            -DWORK=${CMAKE_CURRENT_BINARY_DIR}
#            -DCHECK_PY=${CMAKE_CURRENT_SOURCE_DIR}/cli/checkpoint_safetensors_check.py
#            -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/checkpoint_cli.cmake)
#   set_tests_properties(cli.checkpoint PROPERTIES LABELS cpu)
set(dir ${WORK}/checkpoint_cli)
file(REMOVE_RECURSE ${dir})
set(run ${dir}/run)
# w = f32[2,3] {0.5, -1.25, 3.0, 0.0, -0.0078125, 100.0}; b = f16[2] {1.5, -2.0}.
set(good [=[{
 "format": "ampctl-checkpoint", "version": 1, "ampctl_version": "0.1.0", "step": 7,
 "config": {"precision": "fp16", "optimizer": {"type": "sgd"}},
 "scaler": {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
            "growth_interval": 2000, "_growth_tracker": 5},
 "model": {"tensors": {
   "w": {"dtype": "f32", "shape": [2, 3], "data": "AAAAPwAAoL8AAEBAAAAAAAAAALwAAMhC",
         "crc32": "37db8184"},
   "b": {"dtype": "f16", "shape": [2], "data": "AD4AwA==", "crc32": "94d5d536"}}},
 "optimizer": {"tensors": {}}, "scheduler": {}, "rng": {}, "data": {},
 "metrics": {"last_loss": 0.6931}
}
]=])
file(WRITE ${run}/checkpoints/step-00000007.json "${good}")
file(WRITE ${run}/checkpoints/latest "step-00000007.json\n")

include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)

function(expect_match text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${text}")
  endif()
endfunction()

# inspect, text
expect_run("ampctl inspect ${run}" 0 "" ${AMPCTL} inspect ${run})
foreach(line "step: +7\n" "scale: +1024\\.0\n" "growth tracker: +5\n" "last loss: +0\\.6931\n"
             "parameters: +8\n" "precision: +fp16\n" "w +f32 +\\[2,3\\]" "b +f16 +\\[2\\]"
             "step-00000007\\.json")
  expect_match("${last_out}" "${line}" "inspect")
endforeach()

# --checkpoint as the other commands take it: the same text
set(positional_out "${last_out}")
expect_run("ampctl inspect --checkpoint ${run}" 0 "" ${AMPCTL} inspect --checkpoint ${run})
if(NOT last_out STREQUAL positional_out)
  message(FATAL_ERROR "inspect --checkpoint differs from inspect:\n${last_out}")
endif()

# inspect --json: one object
expect_run("ampctl inspect ${run}/checkpoints/step-00000007.json --json" 0 ""
           ${AMPCTL} inspect ${run}/checkpoints/step-00000007.json --json)
string(JSON step GET "${last_out}" step)
string(JSON params GET "${last_out}" parameters)
string(JSON tracker GET "${last_out}" growth_tracker)
string(JSON name1 GET "${last_out}" tensors 1 name)
if(NOT step EQUAL 7 OR NOT params EQUAL 8 OR NOT tracker EQUAL 5 OR NOT name1 STREQUAL "b")
  message(FATAL_ERROR "inspect --json: step ${step}, parameters ${params}, tracker ${tracker}, "
                      "tensors[1] ${name1}:\n${last_out}")
endif()

# export: 8-byte length, header, then w's 24 bytes and b's 4 bytes in checkpoint order
set(st ${dir}/model.safetensors)
expect_run("ampctl export --checkpoint ${run} --format safetensors --out ${st}" 0 ""
           ${AMPCTL} export --checkpoint ${run} --format safetensors --out ${st})
file(SIZE ${st} size)
file(READ ${st} len_hex LIMIT 8 HEX)
string(SUBSTRING "${len_hex}" 2 2 hi_byte)
string(SUBSTRING "${len_hex}" 0 2 lo_byte)
math(EXPR n "0x${hi_byte}${lo_byte}")
math(EXPR rem "${n} % 8")
math(EXPR expected_size "8 + ${n} + 28")
if(NOT rem EQUAL 0 OR NOT size EQUAL expected_size OR NOT len_hex MATCHES "^....000000000000$")
  message(FATAL_ERROR "safetensors: header length ${n} (hex ${len_hex}), file ${size} bytes, "
                      "expected 8 + N + 28 with N % 8 == 0")
endif()
math(EXPR data_at "8 + ${n}")
file(READ ${st} data_hex OFFSET ${data_at} HEX)
if(NOT data_hex STREQUAL "0000003f0000a0bf0000404000000000000000bc0000c842003e00c0")
  message(FATAL_ERROR "safetensors data: ${data_hex}")
endif()
file(READ ${st} header OFFSET 8 LIMIT ${n})
string(JSON w_begin GET "${header}" w data_offsets 0)
string(JSON w_end GET "${header}" w data_offsets 1)
string(JSON b_dtype GET "${header}" b dtype)
string(JSON fmt GET "${header}" __metadata__ format)
if(NOT w_begin EQUAL 0 OR NOT w_end EQUAL 24 OR NOT b_dtype STREQUAL "F16" OR NOT fmt STREQUAL "pt")
  message(FATAL_ERROR "safetensors header: ${header}")
endif()
find_program(PYTHON3 python3)
if(PYTHON3 AND CHECK_PY)
  execute_process(COMMAND ${PYTHON3} ${CHECK_PY} ${run}/checkpoints/step-00000007.json ${st}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "independent safetensors reader: ${out}")
  endif()
else()
  message(STATUS "python3 not found: the independent safetensors reader was skipped")
endif()

expect_run("ampctl export --checkpoint ${run} --format onnx --out ${dir}/x.onnx" 2 ""
           ${AMPCTL} export --checkpoint ${run} --format onnx --out ${dir}/x.onnx)
expect_match("${last_err}" "error: --format: unsupported export format 'onnx'" "export --format onnx")
if(EXISTS ${dir}/x.onnx)
  message(FATAL_ERROR "a refused export wrote its output")
endif()
expect_run("ampctl export --checkpoint ${run} --out ${dir}/x.safetensors" 2 ""
           ${AMPCTL} export --checkpoint ${run} --out ${dir}/x.safetensors)

# Damaged, missing and foreign checkpoints: exit 2 with the problem named.
string(REPLACE "37db8184" "37db8185" bad_crc "${good}")
file(WRITE ${dir}/bad_crc.json "${bad_crc}")
expect_run("ampctl inspect ${dir}/bad_crc.json" 2 "" ${AMPCTL} inspect ${dir}/bad_crc.json)
expect_match("${last_err}" "error: .*bad_crc\\.json: model tensor w: crc32 mismatch: stored 37db8185, computed 37db8184"
             "damaged tensor")
string(SUBSTRING "${good}" 0 200 truncated)
file(WRITE ${dir}/truncated.json "${truncated}")
expect_run("ampctl inspect ${dir}/truncated.json" 2 "" ${AMPCTL} inspect ${dir}/truncated.json)
expect_match("${last_err}" "truncated" "truncated checkpoint")
file(WRITE ${dir}/config.yaml "precision: fp16\n")
expect_run("ampctl inspect ${dir}/config.yaml" 2 "" ${AMPCTL} inspect ${dir}/config.yaml)
expect_match("${last_err}" "not JSON at all" "a YAML file")
expect_run("ampctl inspect ${dir}/nope.json" 2 "" ${AMPCTL} inspect ${dir}/nope.json)
expect_match("${last_err}" "nope\\.json: no such file or directory" "a missing file")
file(MAKE_DIRECTORY ${dir}/empty_run)
expect_run("ampctl inspect ${dir}/empty_run" 2 "" ${AMPCTL} inspect ${dir}/empty_run)
expect_match("${last_err}" "no complete checkpoint in" "an empty run directory")
expect_run("ampctl export --checkpoint ${dir}/bad_crc.json --format safetensors --out ${dir}/y.st" 2 ""
           ${AMPCTL} export --checkpoint ${dir}/bad_crc.json --format safetensors --out ${dir}/y.st)
if(EXISTS ${dir}/y.st)
  message(FATAL_ERROR "export of a damaged checkpoint wrote its output")
endif()
