# A full disk while a checkpoint is written, through the real binary: train 20 steps with a
# checkpoint every 10, then resume to 30 under a 256 KiB file-size limit (prlimit: write() then
# fails with EFBIG as with ENOSPC on a full disk; ampctl ignores SIGXFSZ). The checkpoint of step
# 30 (about 1.2 MiB) cannot be written: exit 1 with an error naming it, and the checkpoint of
# step 20 and checkpoints/latest are intact, with no partial file left. Resuming again with room
# on the disk finishes the run. A branch (resume --run-dir) that cannot copy its checkpoint
# leaves no directory behind, and runs once there is room.
find_program(PRLIMIT prlimit)
if(NOT PRLIMIT)
  message("[SKIPPED] prlimit (util-linux) is not installed: no way to limit the file size")
  return()
endif()
set(dir ${WORK}/full-disk-test)
file(REMOVE_RECURSE ${dir})
set(fast --set device=cpu --set scheduler.warmup_steps=0 --set training.eval_every=0)
execute_process(COMMAND ${AMPCTL} train --config ${CONFIG} ${fast} --set training.max_steps=20
                --set checkpoint.every_steps=10 --run-dir ${dir}
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train exited ${rc}: ${err}")
endif()
execute_process(COMMAND ${PRLIMIT} --fsize=262144 -- ${AMPCTL} resume --checkpoint ${dir}
                --set training.max_steps=30 RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "resume on a full disk: expected exit 1, got ${rc}:\n${err}")
endif()
if(NOT err MATCHES "error: .*step-00000030\\.json.*File too large")
  message(FATAL_ERROR "the error does not name the checkpoint and the cause:\n${err}")
endif()
file(READ ${dir}/checkpoints/latest latest)
if(NOT latest STREQUAL "step-00000020.json\n")
  message(FATAL_ERROR "checkpoints/latest changed: ${latest}")
endif()
file(GLOB left RELATIVE ${dir}/checkpoints ${dir}/checkpoints/*)  # dot files included
list(SORT left)
if(NOT left STREQUAL "latest;step-00000010.json;step-00000020.json")
  message(FATAL_ERROR "unexpected files in checkpoints/ after the failed write: ${left}")
endif()
execute_process(COMMAND ${AMPCTL} inspect ${dir} --json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
string(JSON step GET "${out}" step)
if(NOT rc EQUAL 0 OR NOT step EQUAL 20)
  message(FATAL_ERROR "the previous checkpoint does not load: exit ${rc}, step ${step}:\n${err}")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${dir} --set training.max_steps=30
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
file(READ ${dir}/checkpoints/latest latest)
if(NOT rc EQUAL 0 OR NOT latest STREQUAL "step-00000030.json\n")
  message(FATAL_ERROR "resume with room: exit ${rc}, latest ${latest}:\n${err}")
endif()

# A branch (resume --run-dir) that cannot copy the checkpoint into its new directory: exit 1
# naming the file, and the directory is gone again, so the same command runs once there is room.
set(branch ${WORK}/full-disk-branch)
file(REMOVE_RECURSE ${branch})
execute_process(COMMAND ${PRLIMIT} --fsize=262144 -- ${AMPCTL} resume --checkpoint
                ${dir}/checkpoints/step-00000020.json --run-dir ${branch}
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 1 OR NOT err MATCHES "step-00000020\\.json.*File too large" OR EXISTS ${branch})
  message(FATAL_ERROR "a branch on a full disk: expected exit 1 naming the checkpoint and no "
                      "directory left, got ${rc}:\n${err}")
endif()
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${dir}/checkpoints/step-00000020.json
                --run-dir ${branch} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0 OR NOT EXISTS ${branch}/checkpoints/step-00000020.json)
  message(FATAL_ERROR "the branch with room: exit ${rc}:\n${err}")
endif()
file(REMOVE_RECURSE ${dir} ${branch})
