#!/usr/bin/env bash
# Record passes of the H200 sample set on the GPUs of one host at once: each pass on a GPU of its own
# (CUDA_VISIBLE_DEVICES), one after another on it, each session in a process of its own as
# bench.gpu.record_samples records them; the GPU suite may take a GPU too. Run from the repository root,
# where `python3 -m bench.gpu.record_samples` and `python3 -m pytest` find the checkout:
#
#   bench/gpu/record_passes.sh "GPU:JOB,JOB;GPU:JOB,..." DIR
#
# JOB: uvmN, pass N of `bench.gpu.record_samples --set h200` into DIR/passes/passN; swapN, pass N of
# `--set h200 --mechanism swap` into DIR/passes_swap/passN; tests, the GPU suite into DIR/gpu_suite.txt.
# DIR/jobs.txt says, per job, its GPU, exit status and wall time. Passes run side by side share the host's
# CPUs and memory bandwidth: compare a configuration's passes to see whether that moved them.
set -u
plan=$1
out=$2
mkdir -p "$out"
IFS=';' read -ra gpus <<< "$plan"
for assignment in "${gpus[@]}"; do
  (
    gpu=${assignment%%:*}
    IFS=',' read -ra jobs <<< "${assignment#*:}"
    for job in "${jobs[@]}"; do
      start=$(date +%s)
      case $job in
        tests) CUDA_VISIBLE_DEVICES=$gpu python3 -m pytest -q -m gpu tests/gpu > "$out/gpu_suite.txt" 2>&1 ;;
        uvm*) CUDA_VISIBLE_DEVICES=$gpu python3 -m bench.gpu.record_samples --set h200 \
                --out "$out/passes/pass${job#uvm}" > "$out/$job.log" 2>&1 ;;
        swap*) CUDA_VISIBLE_DEVICES=$gpu python3 -m bench.gpu.record_samples --set h200 --mechanism swap \
                 --out "$out/passes_swap/pass${job#swap}" > "$out/$job.log" 2>&1 ;;
        *) echo "unknown job $job" >&2; false ;;
      esac
      echo "gpu $gpu $job exit $? $(( $(date +%s) - start )) s" >> "$out/jobs.txt"
    done
  ) &
done
wait
