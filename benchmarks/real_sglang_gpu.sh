#!/usr/bin/env bash
# Real SGLang 0.5.11 on a GPU host, then ddprobe against it (issue 17, stages 2-3; the bisect).
#
#   WHL=/path/to/wheels OUT=/some/dir STEPS="env install model direct ddprobe" bash benchmarks/real_sglang_gpu.sh
#   MODEL_SRC=/dir/of/memorized/model STEPS="env model facts bisect plant differential" ... # the bisect
#
# Wheels (all --no-deps, downloaded elsewhere for cp312 manylinux): sglang 0.5.11, a repacked
# sglang-kernel 0.4.2 (flash_ops.abi3.so, sm100/, lib/mscclpp* and _mscclpp dropped: the
# triton backend on sm_90 loads none of them; sgl_kernel imports flash_ops lazily, only from
# sgl_kernel.flash_attn), what sglang's import chain needs beyond the image (fastapi 0.118,
# starlette 0.48, pydantic, uvicorn, orjson, pyzmq, msgspec, setproctitle, pybase64, openai
# 2.6.1, ipython, transformers 5.6.0 + tokenizers 0.22.2, jsonschema, soundfile,
# flashinfer-python 0.6.8.post1 + apache-tvm-ffi 0.1.9 (srt/layers/attention/vision.py imports
# flashinfer at module level), ...), and paramiko/fabric for ddprobe. docs/gpu-results.md lists
# each wheel and how far each launch got.
# Everything lands in /tmp/site (PYTHONPATH), the image's torch 2.11.0+cu130 / triton 3.6.0 stay.
# The model: MODEL_SRC (copied to MODEL), else made here (benchmarks/make_tiny_llama.py: random
# weights; `--memorize 8` makes one that answers the coding suite's first 8 tasks, which is what
# gives the bisect's coding probes a verdict that can fail).
# Speculative decoding without a trained drafter: --speculative-algorithm NGRAM, budget b ->
# --speculative-num-draft-tokens b+1. TRANSPORT=ssh (the default when .debs/ holds
# openssh-server): ddprobe reaches the host over a real sshd on loopback
# (benchmarks/loopback_sshd.sh); else the local transport.
# Steps: env install model direct (sglang.launch_server by hand) ddprobe (facts, flags,
# grep-buffers, `run` cells) facts (facts and grep-buffers only) bisect (`bisect -b
# $BISECT_BUDGETS --thorough`) plant (apply $PLANT with `ddprobe patch`, bisect, revert)
# differential (`run --differential` at the top budget).
# Output under $OUT: real.log (everything), server-*.log, *.json, runs.tgz; $OUT/DONE at the end.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/real-sglang-out}
WHL=${WHL:-$PWD/.whl}
STEPS=${STEPS:-"env install model direct ddprobe"}
BISECT_BUDGETS=${BISECT_BUDGETS:-7,15}
PLANT=${PLANT:-benchmarks/patches/sglang-0.5.11-plant-graph-input-ids.patch}
if [ -z "${TRANSPORT:-}" ]; then
  if ls "${DEBS:-.debs}"/openssh-server_*.deb >/dev/null 2>&1; then TRANSPORT=ssh; else TRANSPORT=local; fi
fi
TOTAL=${TOTAL:-540}
PORT=${PORT:-30123}
MODEL=${MODEL:-/tmp/tiny-llama}
COMMON=(--attention-backend triton --sampling-backend pytorch --grammar-backend none
        --mem-fraction-static 0.5 --max-running-requests 8 --cuda-graph-max-bs 8
        --context-length 2048 --skip-server-warmup ${EXTRA_ARGS:-})
mkdir -p "$OUT"
exec > >(tee -a "$OUT/real.log") 2>&1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=/tmp/site:$PWD
START=$SECONDS
left() { echo $(( TOTAL - (SECONDS - START) )); }
step() { [[ " $STEPS " == *" $1 "* ]] && (( $(left) > 30 )); }
banner() { echo; echo "===== $* ($(date -u +%H:%M:%S), $(( SECONDS - START )) s)"; }
gpumem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader; }

if step env; then
  banner env
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,memory.used --format=csv
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
fi

if step install; then
  banner install
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $(find "$WHL" -type f -name '*.whl') 2>&1 | tail -5
  python3 -c 'import sglang, sgl_kernel, transformers; print("sglang", sglang.__version__, "transformers", transformers.__version__, "sgl_kernel", sgl_kernel.__file__)' 2>&1 | tail -5
fi

if step model; then
  banner model
  if [ -n "${MODEL_SRC:-}" ]; then
    rm -rf "$MODEL"; cp -r "$MODEL_SRC" "$MODEL" && ls -la "$MODEL"
  else
    python3 benchmarks/make_tiny_llama.py "$MODEL" 2>&1 | grep -v "Writing model" | tail -3
  fi
fi

# launch NAME ARGS...: start sglang.launch_server, wait for /health_generate, probe, stop
launch() {
  local name=$1; shift
  local log=$OUT/server-$name.log t0=$SECONDS
  banner "direct launch $name: $*"
  echo "gpu memory before: $(gpumem)"
  python3 -m sglang.launch_server --model-path "$MODEL" --port "$PORT" "${COMMON[@]}" "$@" >"$log" 2>&1 &
  local pid=$! ok=0
  for _ in $(seq 1 ${HEALTH_S:-150}); do
    if ! kill -0 $pid 2>/dev/null; then echo "server exited: rc $(wait $pid; echo $?)"; break; fi
    if curl -sf -m 5 "localhost:$PORT/health_generate" >/dev/null; then ok=1; break; fi
    sleep 1
  done
  echo "healthy=$ok after $(( SECONDS - t0 )) s; gpu memory: $(gpumem)"
  if (( ok )); then
    for p in "def fib(n):" "for i in range(10):"; do
      curl -s -m 60 "localhost:$PORT/generate" -H 'content-type: application/json' \
        -d "{\"text\": \"$p\", \"sampling_params\": {\"temperature\": 0, \"max_new_tokens\": 64}}" \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); m=d.get("meta_info",{}); print("generate:", repr(d.get("text","")[:80]), {k: m.get(k) for k in sorted(m) if k not in ("output_token_logprobs",)})'
    done
    curl -s -m 30 "localhost:$PORT/v1/chat/completions" -H 'content-type: application/json' \
      -d '{"model": "x", "messages": [{"role": "user", "content": "Write add(a, b)."}], "temperature": 0, "max_tokens": 32}' | head -c 600; echo
    for ep in /server_info /get_server_info /get_model_info; do
      echo "$ep: $(curl -s -m 10 -o /dev/null -w '%{http_code}' localhost:$PORT$ep)"
    done
    curl -s -m 10 "localhost:$PORT/server_info" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("internal_states:", d.get("internal_states")); print({k: d.get(k) for k in ("version","speculative_algorithm","speculative_num_draft_tokens","speculative_eagle_topk","speculative_num_steps","cuda_graph_max_bs","cuda_graph_bs","disable_cuda_graph","attention_backend","max_running_requests","context_length")})' 2>&1 | tail -3
  fi
  kill -TERM $pid 2>/dev/null; local t1=$SECONDS
  for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  kill -0 $pid 2>/dev/null && { echo "still alive 30 s after SIGTERM: SIGKILL"; kill -KILL $pid; }
  sleep 2
  echo "stopped after $(( SECONDS - t1 )) s; gpu memory after: $(gpumem); leftover: $(pgrep -fa 'sglang' | grep -v pgrep | head -3)"
  grep -nE "Capture|capture|cuda graph|accept|Error|error|Traceback" "$log" | head -25
  tail -5 "$log"
}

if step direct; then
  launch ngram-b8-graph --speculative-algorithm NGRAM --speculative-num-draft-tokens 8
  step direct && launch ngram-b8-eager --speculative-algorithm NGRAM --speculative-num-draft-tokens 8 --disable-cuda-graph
fi

# the inventory (and the sshd) for every ddprobe step
if step ddprobe || step facts || step bisect || step plant || step differential; then
  banner "ddprobe inventory, transport $TRANSPORT"
  INV=$OUT/hosts.yaml
  SSHCFG=()
  HOSTLINE="host: localhost"
  TRANSPORTLINE="transport: local"
  if [ "$TRANSPORT" = ssh ]; then
    SSHWORK=$(mktemp -d /tmp/ddprobe-sshd.XXXXXX); chmod 755 "$SSHWORK"
    . benchmarks/loopback_sshd.sh
    start_loopback_sshd "$SSHWORK" "${SSH_PORT:-2222}" h200 || exit 1
    HOSTLINE="host: h200"
    TRANSPORTLINE=""
  fi
  cat > "$INV" <<EOF2
hosts:
  h200:
    $HOSTLINE
    $TRANSPORTLINE
    python: ${HOSTPY:-$(command -v python3)}
    package: sglang
    env:
      PYTHONPATH: /tmp/site
      PATH: $(dirname "${HOSTPY:-$(command -v python3)}"):/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      NCCL_NVLS_ENABLE: '0'
      TORCH_SYMM_MEM_DISABLE_MULTICAST: '1'
      NVSHMEM_DISABLE_NVLS: '1'
    server:
      port: $PORT
      model_path: $MODEL
      algorithm: NGRAM
      budget_flag: draft_tokens
      budget: 7
      max_bs: 8
      args: [$(printf "'%s', " "${COMMON[@]}" | sed 's/, $//' | sed "s/'--cuda-graph-max-bs', '8', //")]
      workdir: /tmp/ddprobe-work
      health_timeout: 240
EOF2
  cat "$INV"
  export DDPROBE_RUNS=$OUT/runs
  DD=(python3 -m ddprobe -i "$INV" "${SSHCFG[@]}")
  SUMMARY=(python3 benchmarks/summarise_ddprobe_json.py)
fi

if step ddprobe || step facts; then
  cmds=("facts -H h200" "grep-buffers -H h200")
  step ddprobe && cmds+=("flags -H h200")
  for c in "${cmds[@]}"; do
    banner "ddprobe $c"; timeout 120 "${DD[@]}" $c 2>&1 | tail -40
  done
fi

if step ddprobe; then
  for b in ${BUDGETS:-7 15}; do
    for g in --graph --no-graph; do
      step ddprobe || break
      banner "ddprobe run -b $b $g"
      timeout $(( $(left) - 10 )) "${DD[@]}" run -H h200 -b $b $g ${TASKS:+--tasks $TASKS} --max-tokens 64 --stop-after --break-lock --log-dir "$OUT/ddlogs" --json >"$OUT/run-b$b${g#--}.json" 2>"$OUT/run-b$b${g#--}.err"; echo "rc $?"
      tail -15 "$OUT/run-b$b${g#--}.err"; head -c 3000 "$OUT/run-b$b${g#--}.json"; echo
    done
  done
fi

# run_bisect NAME ARGS...: ddprobe bisect -H h200 ARGS --json > $OUT/bisect-NAME.json, summarised
run_bisect() {
  local name=$1; shift
  banner "ddprobe bisect -H h200 $* ($name)"
  local t0=$SECONDS
  timeout $(( $(left) - 10 )) "${DD[@]}" bisect -H h200 "$@" --break-lock --json \
    >"$OUT/bisect-$name.json" 2>"$OUT/bisect-$name.err"
  echo "bisect $name exit: $? after $(( SECONDS - t0 )) s"
  tail -25 "$OUT/bisect-$name.err"
  "${SUMMARY[@]}" bisect "$OUT/bisect-$name.json"
  timeout 60 "${DD[@]}" report latest --format term 2>&1 | head -60
}

if step bisect; then
  run_bisect clean -b "$BISECT_BUDGETS" --thorough --no-latent-check
fi

if step plant; then
  banner "ddprobe patch apply $PLANT"
  timeout 120 "${DD[@]}" patch apply "$PLANT" -H h200 --break-lock; echo "patch apply exit: $?"
  banner "grep-buffers on the planted tree (flagged rows)"
  timeout 120 "${DD[@]}" grep-buffers -H h200 --budgets "$BISECT_BUDGETS" --json >"$OUT/grep-planted.json" 2>&1
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print(r["attr"], r["file"], r["line"], r["shape"], r["flags"]) for r in d["rows"] if r.get("flags") and ("fixed-size-growing-use" in r["flags"] or "short-at-full-context" in r["flags"])]' "$OUT/grep-planted.json" 2>&1 | tail -8
  banner "bisect --plan before (cost history: none yet on this host unless an earlier step ran)"
  timeout 120 "${DD[@]}" bisect -H h200 -b "$BISECT_BUDGETS" --no-latent-check --plan 2>&1 | tail -25
  step plant && run_bisect plant -b "$BISECT_BUDGETS" --no-latent-check ${PLANT_ARGS:-}
  banner "bisect --plan after (the host's cost history from the run above)"
  timeout 120 "${DD[@]}" bisect -H h200 -b "$BISECT_BUDGETS" --no-latent-check --plan 2>&1 | tail -25
  banner "ddprobe patch revert --all"
  timeout 120 "${DD[@]}" patch revert --all -H h200 --break-lock; echo "patch revert exit: $?"
  timeout 60 "${DD[@]}" patch status -H h200 2>&1 | tail -5
fi

if step differential; then
  top=${BISECT_BUDGETS##*,}
  banner "ddprobe run -H h200 -b $top --differential"
  timeout $(( $(left) - 10 )) "${DD[@]}" run -H h200 -b "$top" --differential --tasks "${TASKS:-8}" --stop-after \
    --break-lock --json >"$OUT/differential-b$top.json" 2>"$OUT/differential-b$top.err"
  echo "run --differential exit: $?"
  tail -15 "$OUT/differential-b$top.err"
  "${SUMMARY[@]}" differential "$OUT/differential-b$top.json"
fi

if [ -n "${SSHWORK:-}" ]; then
  grep -c "Accepted publickey" "$SSHWORK/sshd.log" | sed 's/^/sshd logins accepted: /'
  cp "$SSHWORK/sshd.log" "$OUT/" 2>/dev/null
  stop_loopback_sshd "$SSHWORK"
fi
banner done
tar -czf "$OUT/runs.tgz" -C "$OUT" $(cd "$OUT" && ls -d runs ddlogs server-*.log hosts.yaml sshd.log 2>/dev/null)
touch "$OUT/DONE"
