# Hostile inputs through the real binary: each case below was a crash, a hang, unbounded memory or
# bad input accepted in silence, and must now be an error (exit 2) at once, naming the file, line
# or key, or the documented behaviour:
#   * sizes: widths whose parameter count overflows, a run that cannot fit the memory (refused by
#     validate and train, naming model.hidden / data.batch_size; a language model's by train once
#     its text's vocabulary is known), an idx header declaring more
#     than an idx file may hold, a checkpoint shape that overflows;
#   * strict sweeps: a sweep: section with a syntax error, a TAB, deep nesting, a duplicate key
#     (grid, runs) or a second sweep: section is an error with file:line, never the base run;
#   * checkpoints: bytes after the JSON (garbage, NULs, a second document), duplicate keys, a step
#     near int64's end or beyond max_steps are refused, naming the file;
#   * inputs: a FIFO, a device or a directory as config, checkpoint, latest or data file is refused
#     at once (never blocks); a .gz that expands past the cap is refused; non-UTF-8 strings,
#     float32 values that round to zero or a subnormal, max_steps near int64's end are refused
#     at validation;
#   * messages: a checkpoint that does not restore names its file; inspect escapes control
#     characters in tensor names; a `latest` holding something else is not echoed;
#   * defaults: AdamW's weight_decay is PyTorch's 0.01, sgd and adam keep 0, a written value wins.
set(base ${WORK}/hardening-inputs)
file(REMOVE_RECURSE ${base})
file(MAKE_DIRECTORY ${base})

# expect_run (expect.cmake): every command gets a timeout of expect_timeout seconds, so a FIFO
# that blocks is a failure, not a hung test.
include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
set(expect_timeout 60)

# Writes bytes with printf (octal escapes such as \377 and \000 are what cmake cannot write).
function(write_bytes file format)
  execute_process(COMMAND printf "${format}" OUTPUT_FILE ${file} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "printf into ${file} failed")
  endif()
endfunction()

set(body "device: cpu\nmodel: {type: mlp, hidden: [16]}\ndata:\n"
         "  train: {source: synthetic, samples: 256, features: 8, classes: 4}\n  batch_size: 32\n"
         "training: {max_steps: 5, eval_every: 0}\n")
string(CONCAT body ${body})
file(WRITE ${base}/base.yaml "name: base\n${body}")
set(cfg ${base}/base.yaml)

# ---- 1. sizes ----
# Two widths near 2^31 (each in range): the parameter count overflows int64 bytes. Before: the
# arena was allocated small and filled past its end (SIGSEGV).
expect_run(overflow-validate 2 "model\\.hidden\\[1\\].*overflows" ${AMPCTL} validate --config ${cfg}
       "--set" "model.hidden=[2147483647, 2147483647]")
expect_run(overflow-train 2 "model\\.hidden\\[1\\].*overflows" ${AMPCTL} train --config ${cfg}
       --run-dir ${base}/overflow-run "--set" "model.hidden=[2147483647, 2147483647]")
expect_run(overflow-three-layers 2 "model\\.hidden\\[[12]\\].*overflows" ${AMPCTL} validate
       --config ${cfg} "--set" "model.hidden=[4, 2147483647, 2147483647]")
# Too large to fit (the process is limited to 4 GiB so the answer is the same on any machine):
# refused by its estimate, naming the key and the size, instead of "out of host memory" (exit 1).
# Under ASan (SANITIZE) no ulimit -v: the sanitizer reserves terabytes of shadow address space
# and cannot start inside one; the sizes asked here (69.5 GiB and more) exceed this machine anyway.
if(SANITIZE)
  set(limited ${AMPCTL})
else()
  # Two OpenBLAS threads: with one per core, a machine of 30 cores or more would reserve more than
  # the 4 GiB for OpenBLAS's 128 MiB buffers alone, and be refused for that (reference.md).
  set(limited env OPENBLAS_NUM_THREADS=2 sh -c "ulimit -v 4194304 && exec \"$0\" \"$@\""
              ${AMPCTL})
endif()
expect_run(too-large-validate 2 "model\\.hidden: the run needs about [0-9.]+ GiB of host memory"
       ${limited} validate --config ${cfg} "--set" "model.hidden=[100000000]")
expect_run(too-large-train 2 "model\\.hidden: the run needs about [0-9.]+ GiB" ${limited} train
       --config ${cfg} --run-dir ${base}/too-large-run "--set" "model.hidden=[100000000]")
expect_run(too-large-batch 2 "data\\.batch_size: the run needs about" ${limited} validate
       --config ${cfg} "--set" "model.hidden=[65536]" "--set" "data.batch_size=2147483647"
       "--set" "data.drop_last=false")
# A language model on a text source: validate counts its vocabulary as 1 (the file is not read),
# so a run that fits with one token but not with the file's 20000 code points passes validate;
# train reads the data first and refuses it from the estimate (data.batch_size: the logits of
# 262144 windows of 8 tokens over 20000 ids), before anything is allocated or written. Before:
# "out of host memory allocating ..." (exit 1) from the batcher or the model. 20000 code points
# from U+4E00, three bytes each in UTF-8.
set(wide "")
foreach(i RANGE 0 19999)
  math(EXPR cp "0x4E00 + ${i}")
  math(EXPR b0 "224 + (${cp} >> 12)")
  math(EXPR b1 "128 + ((${cp} >> 6) & 63)")
  math(EXPR b2 "128 + (${cp} & 63)")
  string(ASCII ${b0} ${b1} ${b2} ch)
  string(APPEND wide "${ch}")
endforeach()
file(WRITE ${base}/wide.txt "${wide}${wide}${wide}")
file(WRITE ${base}/wide-lm.yaml "name: wide-lm\ndevice: cpu\nprecision: fp16\n"
     "model: {type: gpt, n_layer: 1, n_head: 1, n_embd: 16, block_size: 8, bias: false}\n"
     "data:\n  train: {source: text, path: ${base}/wide.txt, vocab: char, split_fraction: 0.1}\n"
     "  batch_size: 262144\ntraining: {max_steps: 2}\n")
expect_run(lm-validate-fits 0 "" ${limited} validate --config ${base}/wide-lm.yaml)
expect_run(lm-train-too-large 2 "data\\.batch_size: the run needs about [0-9.]+ GiB of host memory.*323248 parameters"
       ${limited} train --config ${base}/wide-lm.yaml --run-dir ${base}/wide-lm-run)
if(EXISTS ${base}/wide-lm-run)
  message(FATAL_ERROR "lm-train-too-large: the refused run wrote ${base}/wide-lm-run")
endif()
# The same sizes on a GPU device are still checked for overflow (the device reports the rest).
expect_run(overflow-cuda 2 "model\\.hidden\\[1\\].*overflows" ${AMPCTL} validate --config ${cfg}
       "--set" "device=cuda" "--set" "model.hidden=[2147483647, 2147483647]")
# A small run still validates and trains.
expect_run(small-ok 0 "" ${limited} validate --config ${cfg})

# An idx header that declares more than an idx file may hold (1 GiB): refused from the header,
# before a byte of data is decompressed or allocated.
write_bytes(${base}/huge-images.idx "\\000\\000\\010\\003\\000\\001\\000\\000\\000\\000\\001\\000\\000\\000\\100\\000")
write_bytes(${base}/labels.idx "\\000\\000\\010\\001\\000\\000\\000\\002\\000\\001")
file(WRITE ${base}/idx.yaml "name: idx\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: idx, images: ${base}/huge-images.idx, labels: ${base}/labels.idx}\n"
     "  batch_size: 2\ntraining: {max_steps: 2}\n")
expect_run(idx-declared-too-large 2 "huge-images\\.idx: the header declares 65536 x 256 x 16384 bytes"
       ${AMPCTL} train --config ${base}/idx.yaml --run-dir ${base}/idx-run)
# A header within the cap whose stream goes on: reading stops at the declared size (+1 byte).
write_bytes(${base}/long-images.idx "\\000\\000\\010\\003\\000\\000\\000\\002\\000\\000\\000\\001\\000\\000\\000\\001\\001\\002\\003\\004\\005")
write_bytes(${base}/labels2.idx "\\000\\000\\010\\001\\000\\000\\000\\002\\000\\001")
file(WRITE ${base}/idx-long.yaml "name: idxl\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: idx, images: ${base}/long-images.idx, labels: ${base}/labels2.idx}\n"
     "  batch_size: 2\ntraining: {max_steps: 2}\n")
expect_run(idx-longer-than-header 2 "long-images\\.idx: more data than the header describes" ${AMPCTL}
       train --config ${base}/idx-long.yaml --run-dir ${base}/idxl-run)

# ---- 4. strict sweeps ----
file(WRITE ${base}/sweep-syntax.yaml "name: base\n${body}sweep:\n  grid: {optimizer.lr: [1e-3, 2e-3}\n")
expect_run(sweep-syntax-validate 2 "sweep-syntax\\.yaml:[0-9]+:[0-9]+: invalid YAML" ${AMPCTL}
       validate --config ${base}/sweep-syntax.yaml)
expect_run(sweep-syntax-sweep 2 "sweep-syntax\\.yaml:[0-9]+:[0-9]+: invalid YAML" ${AMPCTL} sweep
       --config ${base}/sweep-syntax.yaml --out ${base}/sweep-syntax-out)
if(EXISTS ${base}/sweep-syntax-out/base)
  message(FATAL_ERROR "a broken sweep section still trained the base run")
endif()
file(WRITE ${base}/sweep-tab.yaml "name: base\n${body}sweep:\n  grid:\n\toptimizer.lr: [1e-3]\n")
expect_run(sweep-tab 2 "sweep-tab\\.yaml:[0-9]+:[0-9]+: invalid YAML" ${AMPCTL} validate
       --config ${base}/sweep-tab.yaml)
string(REPEAT "[" 3000 open)
string(REPEAT "]" 3000 close)
file(WRITE ${base}/sweep-deep.yaml "name: base\n${body}sweep:\n  grid: {seed: [1, 2]}\n  runs: ${open}1${close}\n")
expect_run(sweep-deep 2 "sweep-deep\\.yaml:[0-9]+:[0-9]+: .*(nested|depth|invalid YAML)" ${AMPCTL}
       validate --config ${base}/sweep-deep.yaml)
file(WRITE ${base}/sweep-dup.yaml
     "name: base\n${body}sweep:\n  grid:\n    optimizer.lr: [1e-3]\n    optimizer.lr: [2e-3]\n")
expect_run(sweep-dup-grid 2 "sweep-dup\\.yaml:11:5: sweep\\.grid\\.optimizer\\.lr: duplicate key \\(also at [^)]*sweep-dup\\.yaml:10:5\\)"
       ${AMPCTL} validate --config ${base}/sweep-dup.yaml)
expect_run(sweep-dup-grid-sweep 2 "duplicate key" ${AMPCTL} sweep --config ${base}/sweep-dup.yaml
       --out ${base}/sweep-dup-out)
file(WRITE ${base}/sweep-dup-run.yaml
     "name: base\n${body}sweep:\n  runs:\n    - {seed: 1, seed: 2}\n")
expect_run(sweep-dup-run 2 "sweep\\.runs\\[0\\]\\.seed: duplicate key" ${AMPCTL} validate
       --config ${base}/sweep-dup-run.yaml)
file(WRITE ${base}/sweep-dup-section.yaml
     "name: base\n${body}sweep:\n  grid: {optimizer.lr: [1e-3]}\nsweep:\n  grid: {seed: [1, 2]}\n")
expect_run(sweep-second-section 2 "sweep-dup-section\\.yaml:10:1: sweep: a second sweep: section" ${AMPCTL}
       validate --config ${base}/sweep-dup-section.yaml)
# A duplicate key in the base part of a sweep file is an error too.
file(WRITE ${base}/sweep-dup-base.yaml
     "name: base\nseed: 1\nseed: 2\n${body}sweep:\n  grid: {optimizer.lr: [1e-3]}\n")
expect_run(sweep-dup-base 2 "sweep-dup-base\\.yaml:3:1: seed: duplicate key" ${AMPCTL} validate
       --config ${base}/sweep-dup-base.yaml)
# A good sweep still validates.
file(WRITE ${base}/sweep-good.yaml "name: base\n${body}sweep:\n  grid: {seed: [1, 2]}\n")
expect_run(sweep-good 0 "" ${AMPCTL} validate --config ${base}/sweep-good.yaml)
if(NOT last_out MATCHES "# sweep: 2 run\\(s\\), each valid")
  message(FATAL_ERROR "a good sweep did not list its runs:\n${last_out}")
endif()

# ---- checkpoints ----
expect_run(train-base 0 "" ${AMPCTL} train --config ${cfg} --run-dir ${base}/good)
set(ck ${base}/good/checkpoints/step-00000005.json)
file(READ ${ck} text)
file(WRITE ${base}/ck-trailing.json "${text}garbage\n")
file(WRITE ${base}/ck-two.json "${text}${text}")
file(COPY_FILE ${ck} ${base}/ck-nul.json)
execute_process(COMMAND sh -c "printf '\\000\\000\\000' >> \"$0\"" ${base}/ck-nul.json)
string(REPLACE "\"step\": 5," "\"step\": 1,\n\t\"step\": 5," dup "${text}")
file(WRITE ${base}/ck-dup.json "${dup}")
string(REPLACE "\"lr\":" "\"lr\": 1,\n\"lr\":" dup_nested "${text}")
file(WRITE ${base}/ck-dup-nested.json "${dup_nested}")
string(REPLACE "\"step\": 5," "\"step\": 9223372036854775807," big "${text}")
file(WRITE ${base}/ck-step-max.json "${big}")
string(REPLACE "\"step\": 5," "\"step\": 6," beyond "${text}")
file(WRITE ${base}/ck-step-beyond.json "${beyond}")
foreach(case trailing two nul dup dup-nested step-max step-beyond)
  expect_run(checkpoint-${case} 2 "ck-${case}\\.json: " ${AMPCTL} inspect ${base}/ck-${case}.json)
endforeach()
expect_run(checkpoint-dup-says 2 "duplicate key \"step\"" ${AMPCTL} inspect ${base}/ck-dup.json)
expect_run(checkpoint-step-max-says 2 "step: 9223372036854775807 is beyond" ${AMPCTL} inspect
       ${base}/ck-step-max.json)
expect_run(checkpoint-step-beyond-says 2 "step: 6 is beyond the run's training\\.max_steps \\(5\\)"
       ${AMPCTL} inspect ${base}/ck-step-beyond.json)
# ... and resume refuses it before training at a negative step.
file(MAKE_DIRECTORY ${base}/big-run/checkpoints)
file(WRITE ${base}/big-run/checkpoints/step-00000005.json "${big}")
expect_run(resume-step-max 2 "step-00000005\\.json: step: 9223372036854775807 is beyond" ${AMPCTL}
       resume --checkpoint ${base}/big-run/checkpoints/step-00000005.json)
# A tensor shape whose element count overflows.
string(REGEX REPLACE "\"shape\": \\[[^]]*\\]" "\"shape\": [4294967296, 4294967296]" shape "${text}")
file(WRITE ${base}/ck-shape.json "${shape}")
expect_run(checkpoint-shape-overflow 2 "ck-shape\\.json: " ${AMPCTL} inspect ${base}/ck-shape.json)

# ---- 5. inputs that are not regular files ----
execute_process(COMMAND mkfifo ${base}/fifo.yaml ${base}/fifo.json ${base}/fifo.csv
                        ${base}/fifo-images RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed")
endif()
expect_run(fifo-validate 2 "fifo\\.yaml: cannot read the configuration file: is a FIFO" ${AMPCTL}
       validate --config ${base}/fifo.yaml)
expect_run(fifo-train 2 "fifo\\.yaml: cannot read the configuration file: is a FIFO" ${AMPCTL} train
       --config ${base}/fifo.yaml --run-dir ${base}/fifo-run)
expect_run(fifo-sweep 2 "fifo\\.yaml: cannot read the configuration file: is a FIFO" ${AMPCTL} sweep
       --config ${base}/fifo.yaml --out ${base}/fifo-sweep)
expect_run(fifo-inspect 2 "fifo\\.json: is a FIFO" ${AMPCTL} inspect ${base}/fifo.json)
# resume takes only a checkpoint inside a run's checkpoints/: the FIFO is put there, so the
# refusal is the FIFO's (read at once, never blocking), not the location's.
file(MAKE_DIRECTORY ${base}/fifo-run-ck/checkpoints)
execute_process(COMMAND mkfifo ${base}/fifo-run-ck/checkpoints/step-00000005.json)
expect_run(fifo-resume 2 "step-00000005\\.json: is a FIFO" ${AMPCTL} resume --checkpoint
       ${base}/fifo-run-ck/checkpoints/step-00000005.json)
# A FIFO as latest: passed over (with a warning) for the newest complete checkpoint.
file(MAKE_DIRECTORY ${base}/fifo-latest/checkpoints)
file(COPY_FILE ${ck} ${base}/fifo-latest/checkpoints/step-00000005.json)
execute_process(COMMAND mkfifo ${base}/fifo-latest/checkpoints/latest)
expect_run(fifo-latest 0 "" ${AMPCTL} inspect ${base}/fifo-latest)
if(NOT "${last_out}${last_err}" MATCHES "latest: is a FIFO")
  message(FATAL_ERROR "a FIFO as latest was not named:\n${last_out}${last_err}")
endif()
file(WRITE ${base}/csv-fifo.yaml "name: c\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: csv, path: ${base}/fifo.csv}\n  batch_size: 2\n"
     "training: {max_steps: 2}\n")
expect_run(fifo-csv 2 "fifo\\.csv: is a FIFO" ${AMPCTL} train --config ${base}/csv-fifo.yaml
       --run-dir ${base}/csv-fifo-run)
file(WRITE ${base}/idx-fifo.yaml "name: i\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: idx, images: ${base}/fifo-images, labels: ${base}/labels.idx}\n"
     "  batch_size: 2\ntraining: {max_steps: 2}\n")
expect_run(fifo-idx 2 "fifo-images: is a FIFO" ${AMPCTL} train --config ${base}/idx-fifo.yaml
       --run-dir ${base}/idx-fifo-run)
# Devices and directories.
expect_run(dev-zero-config 2 "/dev/zero: cannot read the configuration file: is a character device"
       ${AMPCTL} validate --config /dev/zero)
expect_run(dev-zero-sweep 2 "is a character device" ${AMPCTL} sweep --config /dev/zero --out
       ${base}/zero-sweep)
expect_run(dir-config 2 "cannot read the configuration file: is a directory" ${AMPCTL} validate
       --config ${base})
expect_run(dev-zero-checkpoint 2 "/dev/zero: is a character device" ${AMPCTL} inspect /dev/zero)
file(WRITE ${base}/csv-zero.yaml "name: c\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: csv, path: /dev/zero}\n  batch_size: 2\ntraining: {max_steps: 2}\n")
expect_run(dev-zero-csv 2 "/dev/zero: is a character device" ${AMPCTL} train
       --config ${base}/csv-zero.yaml --run-dir ${base}/csv-zero-run)
file(WRITE ${base}/fashion-file.yaml "name: f\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: fashion_mnist, dir: ${base}/fm}\n  batch_size: 2\n"
     "training: {max_steps: 2}\n")
file(MAKE_DIRECTORY ${base}/fm/train-images-idx3-ubyte.gz)
file(COPY_FILE ${base}/labels.idx ${base}/fm/train-labels-idx1-ubyte.gz)
expect_run(fashion-dir-as-file 2 "train-images-idx3-ubyte\\.gz: is a directory" ${AMPCTL} train
       --config ${base}/fashion-file.yaml --run-dir ${base}/fm-run)

# A .gz CSV that expands past the 512 MiB cap: refused once the cap is passed (before: the whole
# expansion was held in memory, then std::bad_alloc).
execute_process(COMMAND sh -c "head -c 540000000 /dev/zero | gzip -1 > \"$0\"" ${base}/bomb.csv.gz
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not make the compressed file")
endif()
file(WRITE ${base}/csv-bomb.yaml "name: c\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\n"
     "data:\n  train: {source: csv, path: ${base}/bomb.csv.gz}\n  batch_size: 2\n"
     "training: {max_steps: 2}\n")
# Decompressing 512 MiB takes a few seconds alone and over a minute on a loaded machine (or under
# the sanitizers): this one case waits longer; a hang is still caught.
set(expect_timeout 300)
expect_run(gz-bomb-csv 2 "bomb\\.csv\\.gz: more than 512\\.0 MiB once decompressed" ${AMPCTL} train
       --config ${base}/csv-bomb.yaml --run-dir ${base}/csv-bomb-run)
set(expect_timeout 60)
file(REMOVE ${base}/bomb.csv.gz)

# Strings that are written to JSON must be UTF-8.
write_bytes(${base}/utf8-name.yaml "name: \"r\\377un\"\n")
file(APPEND ${base}/utf8-name.yaml "${body}")
expect_run(utf8-name 2 "utf8-name\\.yaml:1:[0-9]+: name: must be valid UTF-8 \\(byte 0xff at offset 1" ${AMPCTL}
       validate --config ${base}/utf8-name.yaml)
write_bytes(${base}/utf8-path.yaml "name: p\ndevice: cpu\nmodel: {type: mlp, hidden: [4]}\ndata:\n  train: {source: csv, path: \"data\\300\\257.csv\"}\n")
expect_run(utf8-path 2 "data\\.train\\.path: must be valid UTF-8 \\(byte 0xc0" ${AMPCTL} validate
       --config ${base}/utf8-path.yaml)
write_bytes(${base}/utf8-set.sh "exec \"\$1\" validate --config \"\$2\" --set \"debug.inject_tensor=x\\355\\240\\200\"")
expect_run(utf8-inject-tensor 2 "debug\\.inject_tensor: must be valid UTF-8" sh ${base}/utf8-set.sh
       ${AMPCTL} ${cfg})

# float32 keys must be normal float32 values.
foreach(case "scaler.init_scale=1e-46|scaler.init_scale: must be a normal float32"
             "scaler.init_scale=1e-44|scaler.init_scale: must be a normal float32"
             "scaler.backoff_factor=1e-40|scaler.backoff_factor: must be a normal float32"
             "optimizer.eps=1e-45|optimizer.eps: must be a normal float32"
             "scaler.max_scale=1e-39|scaler.max_scale: must be a normal float32"
             "scaler.max_scale=1e39|scaler.max_scale: must be finite in float32")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 set)
  list(GET parts 1 says)
  expect_run(f32-${set} 2 "${says}" ${AMPCTL} validate --config ${cfg} --set ${set})
endforeach()
expect_run(f32-min-scale 2 "scaler\\.min_scale: must be a normal float32" ${AMPCTL} validate
       --config ${cfg} --set scaler.min_scale=1e-45 --set scaler.init_scale=1)
expect_run(f32-smallest-normal 0 "" ${AMPCTL} validate --config ${cfg}
       --set scaler.init_scale=1.2e-38 --set scaler.min_scale=0)
# Step counters.
expect_run(max-steps-int64 2 "training\\.max_steps: must be in \\[1, 1000000000000\\]" ${AMPCTL}
       validate --config ${cfg} --set training.max_steps=9223372036854775807)
expect_run(max-steps-bound 0 "" ${AMPCTL} validate --config ${cfg}
       --set training.max_steps=1000000000000)

# ---- 7. messages ----
# A checkpoint whose state does not restore names the file.
string(REPLACE "\"steady\": true" "\"steady\": 1" unsteady "${text}")
string(REPLACE "\"steady\": false" "\"steady\": 1" unsteady "${unsteady}")
# Without its document CRC (as written before the CRC existed), or the edit is refused as damage.
string(REGEX REPLACE ",[\t\n ]*\"crc32\": \"[0-9a-f]+\"[\t\n ]*}[\t\n ]*$" "\n}\n" unsteady "${unsteady}")
file(MAKE_DIRECTORY ${base}/restore-run/checkpoints)
file(WRITE ${base}/restore-run/checkpoints/step-00000005.json "${unsteady}")
expect_run(restore-names-file 2 "restore-run/checkpoints/step-00000005\\.json: checkpoint metrics"
       ${AMPCTL} resume --checkpoint ${base}/restore-run/checkpoints/step-00000005.json)
# Control characters in tensor names are escaped on the terminal (and in JSON).
string(REPLACE "\"layers.0.weight\"" "\"evil\\u001b[31mred\\u0007\"" evil "${text}")
string(REGEX REPLACE ",[\t\n ]*\"crc32\": \"[0-9a-f]+\"[\t\n ]*}[\t\n ]*$" "\n}\n" evil "${evil}")
file(WRITE ${base}/ck-escape.json "${evil}")
string(ASCII 27 esc)
string(ASCII 7 bel)
expect_run(inspect-escape 0 "" ${AMPCTL} inspect ${base}/ck-escape.json)
string(FIND "${last_out}" "${esc}" at_esc)
string(FIND "${last_out}" "${bel}" at_bel)
if(NOT at_esc EQUAL -1 OR NOT at_bel EQUAL -1 OR NOT last_out MATCHES "evil\\\\x1b\\[31mred\\\\x07")
  message(FATAL_ERROR "inspect printed a control character raw:\n${last_out}")
endif()
expect_run(inspect-escape-json 0 "" ${AMPCTL} inspect --json ${base}/ck-escape.json)
string(FIND "${last_out}" "${esc}" at_esc)
if(NOT at_esc EQUAL -1 OR NOT last_out MATCHES "evil\\\\u001b")
  message(FATAL_ERROR "inspect --json printed ESC raw:\n${last_out}")
endif()
# A latest that holds another file's bytes: not echoed.
file(MAKE_DIRECTORY ${base}/secret-latest/checkpoints)
file(COPY_FILE ${ck} ${base}/secret-latest/checkpoints/step-00000005.json)
file(WRITE ${base}/secret.txt "SECRET-TOKEN-abc123\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E create_symlink ${base}/secret.txt
                        ${base}/secret-latest/checkpoints/latest)
expect_run(latest-not-echoed 0 "" ${AMPCTL} inspect ${base}/secret-latest)
if(NOT "${last_out}${last_err}" MATCHES "does not hold a checkpoint file name")
  message(FATAL_ERROR "the unusable latest was not reported:\n${last_out}${last_err}")
endif()
if(last_err MATCHES "SECRET" OR last_out MATCHES "SECRET")
  message(FATAL_ERROR "inspect echoed the file latest points at:\n${last_err}")
endif()
file(MAKE_DIRECTORY ${base}/bad-latest/checkpoints)
file(WRITE ${base}/bad-latest/checkpoints/latest "PASSWORD=hunter2\n")
expect_run(latest-bad-only 2 "no complete checkpoint" ${AMPCTL} inspect ${base}/bad-latest)
if(last_err MATCHES "hunter2")
  message(FATAL_ERROR "inspect echoed latest's content:\n${last_err}")
endif()

# ---- 8. PyTorch's defaults ----
expect_run(wd-adamw 0 "" ${AMPCTL} validate --config ${cfg})
if(NOT last_out MATCHES "\n  weight_decay: 0\\.01 ")
  message(FATAL_ERROR "AdamW's weight_decay default is not 0.01:\n${last_out}")
endif()
foreach(type sgd adam)
  expect_run(wd-${type} 0 "" ${AMPCTL} validate --config ${cfg} --set optimizer.type=${type})
  if(NOT last_out MATCHES "\n  weight_decay: 0\\.0 ")
    message(FATAL_ERROR "${type}'s weight_decay default is not 0:\n${last_out}")
  endif()
endforeach()
expect_run(wd-explicit 0 "" ${AMPCTL} validate --config ${cfg} --set optimizer.weight_decay=0)
if(NOT last_out MATCHES "\n  weight_decay: 0\\.0 ")
  message(FATAL_ERROR "an explicit weight_decay: 0 did not win:\n${last_out}")
endif()
