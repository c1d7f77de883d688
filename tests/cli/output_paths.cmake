# A command writes only paths it owns, one process writes a run directory, signals are honoured
# inside long steps: each case through the real binary, checked for its exit code, its message
# and what it leaves on disk (docs/reference.md, outputs, locks and signals).
#   * export --out / report --out refuse a device, a FIFO, a directory, a symlink to a FIFO, the
#     input checkpoint (also through a hard link), checkpoints/latest and a run's own files, and
#     an unusable output (missing folder, a file-size limit as a full disk) with exit 2 naming it,
#     leaving the target as it was; a new file, an existing regular file and a symlink to one are
#     written;
#   * report tolerates one torn last line of metrics.jsonl (not one in the middle) and confines
#     the run folders sweep.json names to the sweep folder;
#   * sweep refuses run folders it did not create (a user's base/, a grid run's name, a file) and
#     stale runs (the base config changed), and retrains a stale run once its folder is removed;
#   * train refuses a --config that is its run directory's config.yaml (directly, by a symlink,
#     by another spelling of the path);
#   * resume refuses a checkpoint outside a run directory's checkpoints/ (a file, a folder),
#     resumes one copied into a new run's checkpoints/, and branches from one with --run-dir;
#   * sweep refuses an --out it cannot create (exit 2 with the reason);
#   * lock_signals.sh (beside this file): a second writer of a run directory (train, train
#     without --run-dir, resume, a resume of a sweep's run, a sweep of a run resumed by hand) is
#     refused at once naming the holder; a SIGKILLed holder frees it; SIGUSR1 to a sweep reaches
#     its run; prune keeps a live writer's temporary file; SIGTERM with grad_accum_steps = 2^31-1
#     stops within seconds; a stop between micro-batches resumes bitwise to the uninterrupted
#     run; SIGHUP exits 129 with a checkpoint; SIGUSR1 writes a checkpoint and training goes on.
set(base ${WORK}/hardening-outputs-test)
file(REMOVE_RECURSE ${base})
file(MAKE_DIRECTORY ${base})

# Each check reports its failure with SEND_ERROR and the script goes on, so one run lists every
# case that fails (the test fails at the end); expect_exit is expect.cmake's.
include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
set(expect_failure SEND_ERROR)

function(expect_unchanged what file sha)
  file(SHA256 ${file} now)
  if(NOT now STREQUAL sha)
    message(SEND_ERROR "${what}: ${file} was changed")
  endif()
endfunction()

function(expect_type what path flag)  # flag: -c (char device), -p (FIFO), -d, -L
  execute_process(COMMAND test ${flag} ${path} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(SEND_ERROR "${what}: ${path} is no longer what it was (test ${flag} fails)")
  endif()
endfunction()

# A small, fast run: 20 steps, checkpoints at 10 and 20.
string(CONCAT fast_yaml "name: hard\nseed: 0\ndevice: cpu\nprecision: fp16\n"
              "model: {type: mlp, hidden: [32], activation: relu}\n"
              "data:\n  train: {source: synthetic, task: classification, samples: 1024, "
              "features: 8, classes: 4}\n  batch_size: 64\n"
              "optimizer: {type: adamw, lr: 1.0e-3}\n"
              "training: {max_steps: 20, eval_every: 0}\n")
file(WRITE ${base}/fast.yaml "${fast_yaml}")
set(run ${base}/run)
execute_process(COMMAND ${AMPCTL} train --config ${base}/fast.yaml --set checkpoint.every_steps=10
                --run-dir ${run} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
expect_exit("train" "${rc}" "${err}" 0 ".*")
set(ck ${run}/checkpoints/step-00000020.json)
foreach(f ${ck} ${run}/checkpoints/latest ${run}/metrics.jsonl ${run}/config.yaml
        ${run}/summary.json)
  file(SHA256 ${f} sha_${f})
endforeach()

# The special files: a device node of our own where we may create one (as root: never /dev/null
# itself, which the unfixed binary replaced), else /dev/null; a FIFO; a symlink to it; a folder.
execute_process(COMMAND mknod ${base}/null c 1 3 RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(rc EQUAL 0)
  set(dev ${base}/null)
else()
  set(dev /dev/null)
endif()
execute_process(COMMAND mkfifo ${base}/fifo RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed")
endif()
file(CREATE_LINK ${base}/fifo ${base}/fifo-link SYMBOLIC)
file(MAKE_DIRECTORY ${base}/adir)
file(WRITE ${base}/adir/keep.txt "keep\n")
file(CREATE_LINK ${ck} ${base}/hardlink.json)  # a hard link to the input checkpoint

# --- export --out ---
function(export_to what checkpoint out want pattern)
  execute_process(COMMAND timeout -s KILL 60 ${AMPCTL} export --checkpoint ${checkpoint}
                  --format safetensors --out ${out} RESULT_VARIABLE rc ERROR_VARIABLE err
                  OUTPUT_QUIET)
  expect_exit("export --out ${what}" "${rc}" "${err}" ${want} "${pattern}")
endfunction()
export_to("a device" ${run} ${dev} 2 "error: --out ${dev}: is a device")
expect_type("export to a device" ${dev} -c)
export_to("a FIFO" ${run} ${base}/fifo 2 "error: --out .*fifo: is a FIFO")
expect_type("export to a FIFO" ${base}/fifo -p)
export_to("a symlink to a FIFO" ${run} ${base}/fifo-link 2 "fifo-link: is a FIFO")
expect_type("export to a symlink to a FIFO" ${base}/fifo -p)
export_to("a directory" ${run} ${base}/adir 2 "adir: is a directory")
export_to("a folder name" ${run} ${base}/adir/ 2 "names a folder")
expect_type("export to a directory" ${base}/adir -d)
export_to("the input checkpoint" ${ck} ${ck} 2 "which this command reads")
export_to("a hard link to the input" ${ck} ${base}/hardlink.json 2 "which this command reads")
export_to("checkpoints/latest" ${run} ${run}/checkpoints/latest 2 "checkpoints folder")
export_to("another checkpoint of the run" ${ck} ${run}/checkpoints/step-00000010.json 2
          "checkpoints folder")
foreach(name metrics.jsonl config.yaml summary.json)
  export_to("the run's ${name}" ${run} ${run}/${name} 2 "the run's own file")
endforeach()
# A run file that does not exist yet is the run's too: a summary.json would mark it finished.
file(MAKE_DIRECTORY ${base}/unfinished)
file(WRITE ${base}/unfinished/metrics.jsonl "")
export_to("a new summary.json in an unfinished run" ${run} ${base}/unfinished/summary.json 2
          "the run's own file")
export_to("a missing folder" ${run} ${base}/no/such/folder/m.safetensors 2
          "the folder .*no/such/folder does not exist")
foreach(f ${ck} ${run}/checkpoints/latest ${run}/metrics.jsonl ${run}/config.yaml
        ${run}/summary.json)
  expect_unchanged("export refusals" ${f} "${sha_${f}}")
endforeach()
# A full disk: a 4 KiB file-size limit (the model is about 1.5 KiB: make the write itself fail
# with a limit below it).
execute_process(COMMAND prlimit --fsize=512 -- ${AMPCTL} export --checkpoint ${run} --format
                safetensors --out ${base}/full.safetensors RESULT_VARIABLE rc ERROR_VARIABLE err
                OUTPUT_QUIET)
expect_exit("export on a full disk" "${rc}" "${err}" 2 "error: --out: cannot write .*File too large")
if(EXISTS ${base}/full.safetensors)
  message(SEND_ERROR "export on a full disk left a partial file")
endif()
# Allowed: a new file, an existing regular file, a symlink to one (its target is written).
export_to("a new file" ${run} ${base}/new.safetensors 0 ".*")
file(WRITE ${base}/old.safetensors "old\n")
export_to("an existing regular file" ${run} ${base}/old.safetensors 0 ".*")
file(SIZE ${base}/old.safetensors size)
if(size LESS 100)
  message(SEND_ERROR "export over an existing regular file did not replace it")
endif()
file(WRITE ${base}/target.safetensors "old\n")
file(CREATE_LINK ${base}/target.safetensors ${base}/st-link SYMBOLIC)
export_to("a symlink to a regular file" ${run} ${base}/st-link 0 ".*")
expect_type("export through a symlink" ${base}/st-link -L)
file(SHA256 ${base}/target.safetensors a)
file(SHA256 ${base}/new.safetensors b)
if(NOT a STREQUAL b)
  message(SEND_ERROR "export through a symlink did not write its target")
endif()

# --- report --out ---
function(report_to what dir out want pattern)
  set(args)
  if(out)
    set(args --out ${out})
  endif()
  execute_process(COMMAND timeout -s KILL 60 ${AMPCTL} report ${dir} ${args} RESULT_VARIABLE rc
                  ERROR_VARIABLE err OUTPUT_QUIET)
  expect_exit("report ${what}" "${rc}" "${err}" ${want} "${pattern}")
endfunction()
report_to("--out a FIFO" ${run} ${base}/fifo 2 "error: --out .*fifo: is a FIFO")
expect_type("report to a FIFO" ${base}/fifo -p)
report_to("--out a device" ${run} ${dev} 2 "is a device")
expect_type("report to a device" ${dev} -c)
report_to("--out a directory" ${run} ${base}/adir 2 "is a directory")
# The files report reads are refused as its inputs, the others as the run's.
report_to("--out metrics.jsonl" ${run} ${run}/metrics.jsonl 2 "which this command reads")
report_to("--out summary.json" ${run} ${run}/summary.json 2 "which this command reads")
report_to("--out config.yaml" ${run} ${run}/config.yaml 2 "the run's own file")
report_to("--out checkpoints/latest" ${run} ${run}/checkpoints/latest 2 "checkpoints folder")
report_to("--out in a missing folder" ${run} ${base}/missing/r.html 2 "does not exist")
foreach(f ${run}/metrics.jsonl ${run}/summary.json ${run}/config.yaml ${run}/checkpoints/latest)
  expect_unchanged("report refusals" ${f} "${sha_${f}}")
endforeach()
execute_process(COMMAND prlimit --fsize=1024 -- ${AMPCTL} report ${run} --out ${base}/full.html
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
expect_exit("report on a full disk" "${rc}" "${err}" 2 "error: --out: cannot write .*File too large")
report_to("--out a new file" ${run} ${base}/r.html 0 ".*")
if(NOT EXISTS ${base}/r.html)
  message(SEND_ERROR "report --out a new file wrote nothing")
endif()

# A torn last line (a run killed while writing it) is skipped, as resume skips it; a line that
# does not parse in the middle is still damage.
file(COPY ${run} DESTINATION ${base}/torn)
file(APPEND ${base}/torn/run/metrics.jsonl "{\"kind\":\"train\",\"step\":21,\"lo")
report_to("a torn last line" ${base}/torn/run "" 0 ".*")
file(COPY ${run} DESTINATION ${base}/torn-mid)
file(READ ${run}/metrics.jsonl text)
file(WRITE ${base}/torn-mid/run/metrics.jsonl "{\"kind\":\"train\",\"st\n${text}")
report_to("a torn line in the middle" ${base}/torn-mid/run "" 2 "metrics.jsonl:1: not a JSON")

# sweep.json may not point outside its folder: a run name with .., an absolute name, a run_dir
# outside (absolute, or with ..). victim/ holds metrics the report must not read.
file(MAKE_DIRECTORY ${base}/victim)
file(WRITE ${base}/victim/metrics.jsonl "{\"kind\":\"train\",\"step\":1,\"loss\":31415.9}\n")
file(MAKE_DIRECTORY ${base}/sweepx/ok)
file(COPY ${run}/metrics.jsonl DESTINATION ${base}/sweepx/ok)
foreach(case "[{\"name\":\"../victim\",\"status\":\"ok\"}]|is not a folder name inside"
             "[{\"name\":\"${base}/victim\",\"status\":\"ok\"}]|is not a folder name inside"
             "[{\"name\":\"gone\",\"status\":\"ok\",\"run_dir\":\"${base}/victim\"}]|outside the sweep folder"
             "[{\"name\":\"gone\",\"status\":\"ok\",\"run_dir\":\"../victim\"}]|outside the sweep folder")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 runs)
  list(GET parts 1 says)
  file(WRITE ${base}/sweepx/sweep.json "{\"metric\":\"final_loss\",\"best\":null,\"runs\":${runs}}\n")
  report_to("a sweep.json with ${runs}" ${base}/sweepx ${base}/sweepx.html 2 "${says}")
endforeach()
file(WRITE ${base}/sweepx/sweep.json
     "{\"metric\":\"final_loss\",\"best\":\"ok\",\"runs\":[{\"name\":\"ok\",\"status\":\"ok\"}]}\n")
report_to("a sweep.json inside its folder" ${base}/sweepx ${base}/sweepx.html 0 ".*")

# --- sweep: only folders it created, never a stale run ---
function(sweep_in what out want pattern)
  execute_process(COMMAND timeout -s KILL 120 ${AMPCTL} sweep --config ${base}/fast.yaml ${ARGN}
                  --out ${out} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out_text)
  expect_exit("sweep ${what}" "${rc}" "${err}${out_text}" ${want} "${pattern}")
endfunction()
file(MAKE_DIRECTORY ${base}/sw1/base)
file(WRITE ${base}/sw1/base/notes.txt "the user's own base/\n")
sweep_in("over a user's base/" ${base}/sw1 2 "sw1/base was not created by ampctl sweep")
file(MAKE_DIRECTORY ${base}/sw2/lr=0.002)
file(WRITE ${base}/sw2/lr=0.002/notes.txt "the user's own folder\n")
sweep_in("over a folder named like a grid run" ${base}/sw2 2 "lr=0.002 was not created"
         --grid optimizer.lr=0.001,0.002)
file(MAKE_DIRECTORY ${base}/sw3)
file(WRITE ${base}/sw3/base "a file named base\n")
sweep_in("over a file named base" ${base}/sw3 2 "sw3/base exists and is not a folder")
sweep_in("into a path through a file" ${base}/sw3/base/out 2
         "error: --out .*sw3/base/out: cannot create it: ")
# Not into a run: its own folder, or its checkpoints/ (which holds its checkpoints alone).
sweep_in("into a run's folder" ${run} 2 "error: --out .*/run: holds a run")
sweep_in("into a run's checkpoints/" ${run}/checkpoints/sw 2
         "error: --out .*/run/checkpoints/sw: inside .*/run/checkpoints, the checkpoint folder")
if(EXISTS ${run}/sweep.json OR EXISTS ${run}/checkpoints/sw OR EXISTS ${run}/base)
  message(SEND_ERROR "a sweep refused in a run's folder wrote there")
endif()
foreach(f sw1/base/notes.txt sw2/lr=0.002/notes.txt sw3/base)
  if(NOT EXISTS ${base}/${f})
    message(SEND_ERROR "sweep removed ${base}/${f}")
  endif()
endforeach()
if(EXISTS ${base}/sw2/lr=0.001)
  message(SEND_ERROR "a refused sweep started a run")
endif()
sweep_in("in a new folder" ${base}/sw4 0 ".*" --grid training.max_steps=10,20)
foreach(r max_steps=10 max_steps=20)
  if(NOT EXISTS ${base}/sw4/${r}/.ampctl-sweep-run)
    message(SEND_ERROR "the sweep did not mark its run folder ${r}")
  endif()
endforeach()
sweep_in("run again" ${base}/sw4 0 "finished before" --grid training.max_steps=10,20)
# A run is not written into a sweep's folder (it would hold a run, and the sweep be refused).
execute_process(COMMAND ${AMPCTL} train --config ${base}/fast.yaml --run-dir ${base}/sw4
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
expect_exit("train into a sweep's folder" "${rc}" "${err}" 2 "sw4: holds a sweep \\(sweep.json\\)")
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${run} --run-dir ${base}/sw4
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
expect_exit("a branch into a sweep's folder" "${rc}" "${err}" 2 "sw4: holds a sweep")
if(EXISTS ${base}/sw4/metrics.jsonl OR EXISTS ${base}/sw4/checkpoints)
  message(SEND_ERROR "a refused run wrote into the sweep's folder")
endif()
file(SHA256 ${base}/sw4/max_steps=20/summary.json sum20)
# The base config edited: both runs are stale, and refused with their results intact.
string(REPLACE "lr: 1.0e-3" "lr: 2.0e-3" edited "${fast_yaml}")
file(WRITE ${base}/fast.yaml "${edited}")
sweep_in("after editing its base" ${base}/sw4 2 "max_steps=10 is stale.*max_steps=20 is stale"
         --grid training.max_steps=10,20)
expect_unchanged("a stale sweep" ${base}/sw4/max_steps=20/summary.json "${sum20}")
# Another edit (the model): still stale; removing one stale folder retrains just that one.
string(REPLACE "hidden: [32]" "hidden: [16]" edited "${edited}")
file(WRITE ${base}/fast.yaml "${edited}")
file(REMOVE_RECURSE ${base}/sw4/max_steps=10)
sweep_in("with one stale run left" ${base}/sw4 2 "max_steps=20 is stale"
         --grid training.max_steps=10,20)
file(REMOVE_RECURSE ${base}/sw4/max_steps=20)
sweep_in("with the stale runs removed" ${base}/sw4 0 "max_steps=20: starting"
         --grid training.max_steps=10,20)
file(WRITE ${base}/fast.yaml "${fast_yaml}")

# --- train never overwrites its input config ---
set(user_config "# my notes: keep these\n${fast_yaml}")
foreach(case "tc1|${base}/tc1/config.yaml|${base}/tc1" "tc2|${base}/tc2-link.yaml|${base}/tc2"
             "tc3|${base}/tc3/../tc3/./config.yaml|${base}/tc3/")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 config)
  list(GET parts 2 dir)
  file(MAKE_DIRECTORY ${base}/${name})
  file(WRITE ${base}/${name}/config.yaml "${user_config}")
  if(name STREQUAL "tc2")
    file(CREATE_LINK ${base}/tc2/config.yaml ${base}/tc2-link.yaml SYMBOLIC)
  endif()
  execute_process(COMMAND ${AMPCTL} train --config ${config} --run-dir ${dir}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  expect_exit("train --config ${config} --run-dir ${dir}" "${rc}" "${err}" 2 "which train writes")
  file(READ ${base}/${name}/config.yaml now)
  if(NOT now STREQUAL user_config)
    message(SEND_ERROR "train --config ${config} --run-dir ${dir} changed the user's config")
  endif()
endforeach()

# --- resume only from a run directory's checkpoints/ ---
file(MAKE_DIRECTORY ${base}/somewhere/downloads)
file(COPY ${ck} DESTINATION ${base}/somewhere/downloads)
file(RENAME ${base}/somewhere/downloads/step-00000020.json ${base}/somewhere/downloads/model.json)
file(COPY ${ck} DESTINATION ${base}/somewhere/downloads)
file(WRITE ${base}/somewhere/config.yaml "# the user's config\n")
file(WRITE ${base}/somewhere/metrics.jsonl "the user's file\n")
foreach(given downloads/model.json downloads)
  execute_process(COMMAND ${AMPCTL} resume --checkpoint ${base}/somewhere/${given}
                  --set training.max_steps=25 RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  expect_exit("resume --checkpoint somewhere/${given}" "${rc}" "${err}" 2
         "not inside a run directory's checkpoints/ folder.*hint: continue it in a new run directory.*--run-dir NEW_DIR")
endforeach()
file(READ ${base}/somewhere/config.yaml a)
file(READ ${base}/somewhere/metrics.jsonl b)
if(NOT a STREQUAL "# the user's config\n" OR NOT b STREQUAL "the user's file\n"
   OR EXISTS ${base}/somewhere/downloads/checkpoints)
  message(SEND_ERROR "a refused resume wrote beside the checkpoint")
endif()
file(MAKE_DIRECTORY ${base}/fresh/checkpoints)
file(COPY ${base}/somewhere/downloads/model.json DESTINATION ${base}/fresh/checkpoints)
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${base}/fresh/checkpoints/model.json
                --set training.max_steps=25 RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
expect_exit("resume from a copy in a new run's checkpoints/" "${rc}" "${err}" 0 ".*")
# A branch only reads the checkpoint: one outside a run continues in the new directory, and the
# files beside it stay the user's.
execute_process(COMMAND ${AMPCTL} resume --checkpoint ${base}/somewhere/downloads/model.json
                --run-dir ${base}/from-download --set training.max_steps=25
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
expect_exit("resume --run-dir from a downloaded checkpoint" "${rc}" "${err}" 0 ".*")
file(READ ${base}/somewhere/config.yaml a)
file(READ ${base}/somewhere/metrics.jsonl b)
if(NOT a STREQUAL "# the user's config\n" OR NOT b STREQUAL "the user's file\n"
   OR NOT EXISTS ${base}/from-download/checkpoints/step-00000020.json
   OR NOT EXISTS ${base}/from-download/checkpoints/step-00000025.json)
  message(SEND_ERROR "a branch from a downloaded checkpoint wrote beside it, or did not run")
endif()

# --- locks and signals: processes in the background ---
execute_process(COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/lock_signals.sh ${AMPCTL} ${base}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(SEND_ERROR "lock_signals.sh failed (exit ${rc}):\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${base})
