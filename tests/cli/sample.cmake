# `ampctl sample` end to end: a tiny character-level GPT trained for a few steps on a short text
# (a copy of configs/gpt_fortunes.yaml shrunk by --set), then sampled: the same seed gives the
# same text twice, another seed other text; the output starts with the prompt and has the
# requested length; a prompt character outside the vocabulary, bad options and a checkpoint that
# is not a language model's exit 2. Also: `ampctl validate` accepts both GPT configs.
set(dir ${WORK}/sample-test)
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir})
set(text "")
foreach(i RANGE 40)
  string(APPEND text "the cat sat on the mat; a dog ate the hat.\n")
endforeach()
file(WRITE ${dir}/tiny.txt "${text}")
foreach(cfg gpt_fortunes gpt2_small)
  execute_process(COMMAND ${AMPCTL} validate --config ${CONFIGS}/${cfg}.yaml
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "validate ${cfg}.yaml exited ${rc}: ${err}")
  endif()
endforeach()
execute_process(COMMAND ${AMPCTL} train --config ${CONFIGS}/gpt_fortunes.yaml --run-dir ${dir}/run
                --set device=cpu --set data.train.path=${dir}/tiny.txt --set model.n_layer=1
                --set model.n_head=2 --set model.n_embd=16 --set model.block_size=16
                --set data.batch_size=4 --set training.max_steps=6
                --set scheduler.warmup_steps=2 --set training.eval_every=0
                --set training.eval_batches=2 --set checkpoint.every_steps=0
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train exited ${rc}: ${err}")
endif()
if(NOT EXISTS ${dir}/run/vocab.json)
  message(FATAL_ERROR "no vocab.json in the run directory")
endif()
file(READ ${dir}/run/vocab.json vocab)
if(NOT vocab MATCHES "^\\[\"\\\\n\",\" \",")
  message(FATAL_ERROR "vocab.json does not start with the sorted characters: ${vocab}")
endif()

function(sample out_var rc_var)
  execute_process(COMMAND ${AMPCTL} sample --checkpoint ${dir}/run ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
  set(sample_err "${err}" PARENT_SCOPE)
endfunction()

sample(a rc --prompt "the " --tokens 40 --seed 1 --top-k 5)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sample exited ${rc}: ${sample_err}")
endif()
sample(b rc --prompt "the " --tokens 40 --seed 1 --top-k 5)
sample(c rc --prompt "the " --tokens 40 --seed 2 --top-k 5)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "one seed gave two texts:\n${a}\n----\n${b}")
endif()
if(a STREQUAL c)
  message(FATAL_ERROR "seeds 1 and 2 gave the same text:\n${a}")
endif()
if(NOT a MATCHES "^the ")
  message(FATAL_ERROR "the output does not start with the prompt: ${a}")
endif()
string(LENGTH "${a}" len)  # ASCII text: 4 prompt + 40 new characters + the newline
if(NOT len EQUAL 45)
  message(FATAL_ERROR "expected 45 characters, got ${len}: ${a}")
endif()

sample(out rc --prompt "the Z")
if(NOT rc EQUAL 2 OR NOT sample_err MATCHES "U\\+005A 'Z'")
  message(FATAL_ERROR "unknown prompt character: exit ${rc}, stderr: ${sample_err}")
endif()
foreach(bad "--temperature;0" "--tokens;0" "--top-k;-1")
  sample(out rc ${bad})
  if(NOT rc EQUAL 2 OR NOT sample_err MATCHES "^error: ")
    message(FATAL_ERROR "sample ${bad}: expected exit 2, got ${rc}: ${sample_err}")
  endif()
endforeach()

# An MLP checkpoint is not a language model's.
execute_process(COMMAND ${AMPCTL} train --config ${CONFIGS}/quickstart.yaml --run-dir ${dir}/mlp
                --set device=cpu --set training.max_steps=25 RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train of the MLP exited ${rc}: ${err}")
endif()
execute_process(COMMAND ${AMPCTL} sample --checkpoint ${dir}/mlp RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "not a language model")
  message(FATAL_ERROR "sample of an MLP checkpoint: exit ${rc}, stderr: ${err}")
endif()
file(REMOVE_RECURSE ${dir})
