# Issue 33: CUDA is a plugin. ampctl itself links no CUDA library (ldd), and a copy of the app
# without the plugin beside it, with an empty LD_LIBRARY_PATH, trains the quickstart (device:
# auto) on the CPU, while device: cuda exits 2 naming the missing plugin, before any run
# directory exists.
# An installed copy (cmake --install) finds its plugin in ../lib.
# -DAMPCTL=<app> -DBUILD=<build folder> -DCONFIG=<quickstart.yaml> -DWORK=<dir>
execute_process(COMMAND ldd ${AMPCTL} RESULT_VARIABLE rc OUTPUT_VARIABLE libs ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${AMPCTL} failed (${rc}): ${err}")
endif()
foreach(lib libcuda libcudart libcublas libnccl)
  if(libs MATCHES "${lib}[^ ]*\\.so")
    message(FATAL_ERROR "ampctl links ${lib} at load time:\n${libs}")
  endif()
endforeach()
if(NOT libs MATCHES "libc\\.so")
  message(FATAL_ERROR "ldd does not show libc: the check would see nothing:\n${libs}")
endif()

set(dir ${WORK}/cuda-plugin-test)
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir}/bin)
file(COPY ${AMPCTL} DESTINATION ${dir}/bin)
get_filename_component(app ${AMPCTL} NAME)
set(run ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH= AMPCTL_CUDA_PLUGIN= ${dir}/bin/${app})

execute_process(COMMAND ${run} train --config ${CONFIG} --set training.max_steps=30
                --set training.eval_every=0 --run-dir ${dir}/cpu-run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "without the plugin, the quickstart did not train (exit ${rc}):\n${out}\n${err}")
endif()
if(NOT EXISTS ${dir}/cpu-run/metrics.jsonl)
  file(GLOB made ${dir}/cpu-run/*)
  message(FATAL_ERROR "no metrics.jsonl in the run directory: ${made}")
endif()

execute_process(COMMAND ${run} train --config ${CONFIG} --set device=cuda
                --run-dir ${dir}/cuda-run RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "device=cuda without the plugin: expected exit 2, got ${rc}:\n${err}")
endif()
if(NOT err MATCHES "error: device: 'cuda' requested, but libampctl_cuda\\.so, the CUDA plugin, was not found")
  message(FATAL_ERROR "the error does not name the missing plugin:\n${err}")
endif()
if(NOT err MATCHES "a build with nvcc makes it: cmake --build BUILD --target ampctl_cuda")
  message(FATAL_ERROR "the error does not say how to build the plugin:\n${err}")
endif()
if(EXISTS ${dir}/cuda-run)
  message(FATAL_ERROR "a run directory was created although the device was refused")
endif()
set(missing_plugin_err "${err}")

# `cmake --install`'s layout (bin/ampctl, lib/libampctl_cuda.so): the app finds its plugin, so a
# GPU run gets past the plugin (here it stops at the driver, or trains where there is a GPU).
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${dir}/inst
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS ${dir}/inst/bin/${app} OR NOT EXISTS ${dir}/inst/lib/libampctl_cuda.so)
  message(FATAL_ERROR "cmake --install did not give bin/${app} and lib/libampctl_cuda.so (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH= AMPCTL_CUDA_PLUGIN=
                ${dir}/inst/bin/${app} train --config ${CONFIG} --set device=cuda
                --set training.max_steps=30 --run-dir ${dir}/inst-run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(err MATCHES "CUDA plugin, was not found" OR err MATCHES "is not this build's")
  message(FATAL_ERROR "the installed app does not find its plugin:\n${err}")
endif()
if(NOT rc EQUAL 0 AND NOT err MATCHES "error: device: 'cuda' requested, but ")
  message(FATAL_ERROR "the installed app, device=cuda: exit ${rc} without naming the device:\n${err}")
endif()
message(STATUS "ldd: no CUDA library; without the plugin: CPU training ok, device: cuda refused:\n"
               "${missing_plugin_err}installed: device=cuda exit ${rc}:\n${err}")
