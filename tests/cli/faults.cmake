# Faults through the real binary, each checked for its exit code (docs/reference.md, "Exit codes"), its message and
# what it leaves on disk:
#   * an unusable --run-dir (a path through a regular file, a regular file, a path in /proc: all
#     fail as root too) is refused with exit 2 naming it, before the data is loaded, writing
#     nothing;
#   * a CSV holding a NaN is refused at load with exit 2 naming the file, line and sample, and
#     leaves no run directory;
#   * a run that diverges (overflows at the scale floor) exits 1 naming the step and the tensor,
#     with summary.json "status": "diverged", a loadable checkpoint, and the console naming the
#     most overflowing tensor.
set(base ${WORK}/faults-test)
file(REMOVE_RECURSE ${base})
file(MAKE_DIRECTORY ${base})
set(fast --set device=cpu --set training.max_steps=30 --set scheduler.warmup_steps=0
         --set training.eval_every=0)

file(WRITE ${base}/a-file "not a directory\n")
foreach(case "${base}/a-file/run|is not a directory" "${base}/a-file|exists and is not a directory"
             "/proc/ampctl-cli-faults/run|cannot create")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 dir)
  list(GET parts 1 says)
  execute_process(COMMAND ${AMPCTL} train --config ${CONFIG} ${fast} --run-dir ${dir}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "--run-dir ${dir}: expected exit 2, got ${rc}:\n${err}")
  endif()
  string(FIND "${err}" "error: run directory ${dir}: " at)
  string(FIND "${err}" "${says}" at2)
  if(at EQUAL -1 OR at2 EQUAL -1 OR NOT err MATCHES "hint: ")
    message(FATAL_ERROR "--run-dir ${dir}: the error does not name the path and why:\n${err}")
  endif()
  if(out MATCHES "model:")
    message(FATAL_ERROR "--run-dir ${dir}: the run got as far as building the model:\n${out}")
  endif()
endforeach()
file(READ ${base}/a-file text)
if(NOT text STREQUAL "not a directory\n")
  message(FATAL_ERROR "the file given as --run-dir was changed")
endif()

# A NaN in the data: refused at load, naming where.
file(WRITE ${base}/data.csv "x1,x2,label\n0.5,1.0,0\n1.5,-1.0,1\n2.0,nan,1\n0.1,0.2,0\n")
file(WRITE ${base}/csv.yaml "name: csv\ndevice: cpu\nmodel: {type: mlp, hidden: [8]}\n"
     "data:\n  train: {source: csv, path: ${base}/data.csv, label_column: label}\n"
     "  batch_size: 2\ntraining: {max_steps: 3}\n")
execute_process(COMMAND ${AMPCTL} train --config ${base}/csv.yaml --run-dir ${base}/csv-run/run
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "data.csv:4:2: not finite: 'nan' \\(sample 2\\)")
  message(FATAL_ERROR "a NaN in the CSV: expected exit 2 naming line 4 / sample 2, got ${rc}:\n${err}")
endif()
if(EXISTS ${base}/csv-run)
  message(FATAL_ERROR "a run whose data was refused left its run directory behind")
endif()

# Divergence: overflows injected into layers.2.weight from step 10 on, with the scale floored at
# 1024 and patience 5: steps 12..16 overflow at the floor.
set(steps 10)
foreach(i RANGE 11 29)
  string(APPEND steps ",${i}")
endforeach()
execute_process(COMMAND ${AMPCTL} train --config ${CONFIG} ${fast} --run-dir ${base}/diverged
                --set "debug.inject_nonfinite_at=[${steps}]" --set debug.inject_tensor=layers.2.weight
                --set scaler.init_scale=4096 --set scaler.min_scale=1024
                --set training.divergence_patience=5 --set logging.every_steps=5
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "a diverging run: expected exit 1, got ${rc}:\n${err}")
endif()
if(NOT err MATCHES "error: training diverged at step 16: " OR NOT err MATCHES "layers\\.2\\.weight"
   OR NOT err MATCHES "hint: ")
  message(FATAL_ERROR "the divergence error does not name the step and the tensor:\n${err}")
endif()
if(NOT out MATCHES "most overflowing: layers\\.2\\.weight")
  message(FATAL_ERROR "the console does not name the most overflowing tensor:\n${out}")
endif()
file(READ ${base}/diverged/summary.json summary)
string(JSON status GET "${summary}" status)
string(JSON where GET "${summary}" divergence step)
string(JSON ckpt_step GET "${summary}" divergence checkpoint_step)
if(NOT status STREQUAL "diverged" OR NOT where EQUAL 16)
  message(FATAL_ERROR "summary.json: expected status diverged at step 16:\n${summary}")
endif()
execute_process(COMMAND ${AMPCTL} inspect ${base}/diverged --json RESULT_VARIABLE rc
                OUTPUT_VARIABLE inspect ERROR_VARIABLE err)
string(JSON inspected_step GET "${inspect}" step)
if(NOT rc EQUAL 0 OR NOT inspected_step EQUAL ckpt_step)
  message(FATAL_ERROR "the checkpoint of the diverged run: inspect exit ${rc}, step "
                      "${inspected_step} (summary says ${ckpt_step}):\n${err}")
endif()
file(REMOVE_RECURSE ${base})
