#!/usr/bin/env bash
# GPU smoke run: ddprobe drives the testbed's CUDA mode end to end on a GPU host.
#
#   bash benchmarks/gpu_smoke.sh            # from the repo root, on the GPU host itself
#   OUT=/some/dir STEPS="env tests sanitize sweep bisect bisect-sanitize" TOTAL=560 bash ...
#   TRANSPORT=ssh STEPS="env tests facts latent differential" bash ...   # issue 12's run
#
# TRANSPORT=ssh (the default when .debs/ holds openssh-server): ddprobe reaches the host over a
# real OpenSSH server on 127.0.0.1 (benchmarks/loopback_sshd.sh: Debian 12's packages unpacked
# with `dpkg -x`): the device image has no sshd.
# Steps of issue 12: `latent` = `ddprobe bisect -b $BUDGETS` with the latent check (on by
# default: the host's facts show compute-sanitizer); `differential` = `ddprobe run
# --differential` at b8 and b16 on the `stale` scenario (defect (g): a stale scalar in the
# captured graph).
#
# Needs: an NVIDIA GPU, python3 with torch + triton (the `gpu` extra), compute-sanitizer
# (CUDA's, for the sanitize steps), and ddprobe's own dependencies. Wheels under ./.whl (e.g.
# paramiko, fabric for a host without them) are installed into /tmp/site first, offline.
# It uses a local-transport inventory host `h200` (no sshd needed) running the testbed with
# --testbed-device cuda, the seed scenario, and writes everything under $OUT:
#   smoke.log (all of it, the plain bisect's report too), pytest.log, sweep.json,
#   bisect-sanitize.json, sanitize-b16.json, HOST-b16-graph-sanitize.log (the raw
#   compute-sanitizer output), runs.tgz (run dirs, server logs, the inventory used).
# docs/gpu-results.md records what this printed on an H200.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-smoke-out}
STEPS=${STEPS:-"env tests facts sanitize sweep bisect-sanitize bisect"}
BUDGETS=${BUDGETS:-8,16,32,64}
TASKS=${TASKS:-3}
DEVICE=${DEVICE:-cuda}  # cpu: the same run on the simulated device (to try the script anywhere)
if [ -z "${TRANSPORT:-}" ]; then
  if ls .debs/openssh-server_*.deb >/dev/null 2>&1; then TRANSPORT=ssh; else TRANSPORT=local; fi
fi
SSH_PORT=${SSH_PORT:-2222}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/smoke.log") 2>&1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if ! python3 -c 'import paramiko, fabric' 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

WORK=$(mktemp -d /tmp/ddprobe-gpu-smoke.XXXXXX)
chmod 755 "$WORK"
INV=$WORK/hosts.yaml
PY=$(command -v python3)
SSHCFG=()
HOSTLINE="host: localhost"
TRANSPORTLINE="transport: local"
if [ "$TRANSPORT" = ssh ]; then
  # a real sshd on loopback from the unpacked Debian packages (benchmarks/loopback_sshd.sh)
  . benchmarks/loopback_sshd.sh
  start_loopback_sshd "$WORK" "$SSH_PORT" h200 h200-stale || exit 1
  HOSTLINE="host: NAME"
  TRANSPORTLINE=""
fi
host_entry() {  # NAME SCENARIO PORT
  cat <<EOF
  $1:
    ${HOSTLINE/NAME/$1}
    $TRANSPORTLINE
    python: $PY
    package: ddtestbed
    env:
      PYTHONPATH: $WORK/site
      DDTESTBED_DEVICE: $DEVICE
      DDTESTBED_TIME_SCALE: '0.01'
      PATH: /usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      NCCL_NVLS_ENABLE: '0'
      TORCH_SYMM_MEM_DISABLE_MULTICAST: '1'
      NVSHMEM_DISABLE_NVLS: '1'
    server:
      port: $3
      model_path: ddtestbed/tiny-coder
      algorithm: DDTREE
      budget_flag: ddtree
      draft_model_path: ddtestbed/tiny-drafter
      budget: 8
      max_bs: 64
      args: ['--testbed-scenario', '$2']
      workdir: $WORK/work-$1
      health_timeout: 180
      prepare: testbed
EOF
}
TB_PORT=${TB_PORT:-31830}
{ echo "hosts:"; host_entry h200 seed "$TB_PORT"; host_entry h200-stale stale $((TB_PORT + 1)); } > "$INV"
echo "transport: $TRANSPORT; inventory $INV"
DD=(python3 -m ddprobe -i "$INV" "${SSHCFG[@]}")
# TOTAL (seconds, optional): skip steps once past it and cap each step's time to what is left
START=$SECONDS
left() { if [ -n "${TOTAL:-}" ]; then echo $(( TOTAL - (SECONDS - START) )); else echo 100000; fi; }
cap() { local l; l=$(left); echo $(( $1 < l ? $1 : l )); }
step() {
  [[ " $STEPS " == *" $1 "* ]] || return 1
  if (( $(left) < 30 )); then echo "(skipping $1: TOTAL=${TOTAL}s nearly spent)"; return 1; fi
}
banner() { echo; echo "===== $* ($(date -u +%H:%M:%S))"; }

if step env; then
  banner env
  date -u
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  nvidia-smi | grep -m1 "CUDA Version"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
  (command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer) && \
    PATH=$PATH:/usr/local/cuda/bin compute-sanitizer --version | tail -2
fi

if step tests; then
  banner "pytest tests/test_gpu_cuda.py tests/test_gpu_testbed.py"
  timeout $(cap 300) python3 -m pytest -q -p no:cacheprovider tests/test_gpu_cuda.py \
    tests/test_gpu_testbed.py 2>&1 | tee "$OUT/pytest.log" | tail -15
fi

if step facts; then
  banner "ddprobe facts"
  timeout $(cap 120) "${DD[@]}" facts -H h200
fi

if step sanitize; then
  # one sanitize cell at graph b16, the seed's first failing budget (ddprobe.cell.sanitize)
  banner "sanitize cell b16 (compute-sanitizer memcheck, PYTORCH_NO_CUDA_MEMORY_CACHING=1)"
  PATH=$PATH:/usr/local/cuda/bin timeout $(cap 480) python3 - "$INV" "$OUT" <<'EOF'
import json, sys
from pathlib import Path
from ddprobe.inventory import load_inventory
from ddprobe.remote import connect
from ddprobe.results import Config
from ddprobe.cell.sanitize import run_sanitize_cell
host = load_inventory(sys.argv[1]).get("h200")
with connect(host) as r:
    cell = run_sanitize_cell(r, host, Config(budget=16), log_dir=Path(sys.argv[2]),
                             health_timeout=300)
doc = cell.to_dict()
Path(sys.argv[2], "sanitize-b16.json").write_text(json.dumps(doc, indent=1))
san = doc["extra"]["sanitizer"] or {}
print("outcome:", doc["outcome"], "| signature:", (doc["signature"] or {}).get("key"),
      "| error:", doc["error"])
print("timings:", doc["timings"])
print("sanitizer ran:", san.get("ran"), "errors:", san.get("error_count"))
for f in san.get("findings", [])[:6]:
    print("  finding:", f["kernel"], f["access"], f["size"], "B at", f["address"],
          f"{f['distance']} B {f['direction']} allocation of {f['allocation_size']} B", "x", f["count"])
print("buffer:", json.dumps(doc["extra"].get("buffer")), "|", doc["extra"].get("buffer_match"))
EOF
fi

if step sweep; then
  banner "ddprobe sweep -b $BUDGETS --graph both"
  timeout $(cap 900) "${DD[@]}" sweep -H h200 -b "$BUDGETS" --graph both --tasks "$TASKS" --break-lock --json \
    > "$OUT/sweep.json"
  echo "sweep exit: $?"
  python3 - "$OUT/sweep.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
cells = doc.get("cells") or doc.get("results") or []
tok = {}
for c in cells:
    p = c.get("probes") or {}
    cfg = c["config"]
    key = (cfg["budget"], cfg["graph"])
    tok[key] = p.get("tok_s")
    print(f"b{cfg['budget']:<3} {'graph' if cfg['graph'] else 'eager'}  {c['outcome']:<8} "
          f"accept={p.get('accept_length')} coding={p.get('passed')}/{p.get('total')} "
          f"tok/s={p.get('tok_s')} sig={(c.get('signature') or {}).get('id') or (c.get('signature') or {}).get('key')}")
for b in sorted({k[0] for k in tok}):
    g, e = tok.get((b, True)), tok.get((b, False))
    if g and e:
        print(f"b{b}: graph/eager tok/s = {g / e:.2f}")
if tok.get((8, True)) and tok.get((16, False)):
    print(f"graph b8 / eager b16 tok/s = {tok[(8, True)] / tok[(16, False)]:.2f}")
EOF
fi

BISECT=(bisect -H h200 -b "$BUDGETS" --tasks "$TASKS" --break-lock)
if step bisect-sanitize; then
  # ddprobe.cell.experiment does not re-export run_sanitize_cell yet: hand it to the bisect here
  banner "ddprobe bisect --sanitize"
  PATH=$PATH:/usr/local/cuda/bin timeout $(cap 900) python3 - "$INV" "${SSHCFG[@]}" "${BISECT[@]}" \
    > "$OUT/bisect-sanitize.json" <<'EOF'
import sys
import ddprobe.cell.experiment as experiment
from ddprobe.cell.sanitize import run_sanitize_cell
if not hasattr(experiment, "run_sanitize_cell"):
    experiment.run_sanitize_cell = run_sanitize_cell
from ddprobe.cli import main
raise SystemExit(main(["-i", sys.argv[1], *sys.argv[2:], "--sanitize", "--json"]))
EOF
  echo "bisect --sanitize exit: $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print(json.dumps(v, indent=1)[:3000]) for v in (d.get("verdicts") or [])]' \
    "$OUT/bisect-sanitize.json" || head -c 3000 "$OUT/bisect-sanitize.json"
fi

if step bisect; then
  banner "ddprobe bisect"
  timeout $(cap 900) "${DD[@]}" "${BISECT[@]}" --no-latent-check
  echo "bisect exit: $?"
fi

if step latent; then
  # issue 12: the latent check runs by default (the host's facts show compute-sanitizer)
  banner "ddprobe bisect -b $BUDGETS --tasks $TASKS (latent check on by default)"
  PATH=$PATH:/usr/local/cuda/bin timeout $(cap 900) "${DD[@]}" "${BISECT[@]}" --json \
    > "$OUT/bisect-latent.json"
  echo "bisect (latent check) exit: $?"
  python3 - "$OUT/bisect-latent.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("restarts", d["restarts_used"], "vs full sweep", d["restarts_full_sweep"], "rounds",
      d["rounds"], "wall_s", d["wall_s"])
for g in d["groups"]:
    print("cells:", ", ".join(f"{c['key']}={c['outcome']}" for c in g["cells"]))
for v in d["verdicts"]:
    print(f"b{','.join(map(str, v['budgets']))}: {v['label']} ({v['decided_by']}, "
          f"{v['confidence']})")
    for e in v["evidence"]:
        print("   -", e["kind"] + ":", e["summary"][:400])
EOF
  PATH=$PATH:/usr/local/cuda/bin timeout 60 "${DD[@]}" report latest --format term 2>&1 | head -80
fi

if step differential; then
  # issue 12: defect (g) on the GPU: graph vs eager at b8 (no defect) and b16 (stale scalar)
  for b in 8 16; do
    banner "ddprobe run -H h200-stale -b $b --differential --tasks 8"
    timeout $(cap 300) "${DD[@]}" run -H h200-stale -b $b --differential --tasks \
      reverse_words,fizzbuzz,is_palindrome,flatten,chunk_list,binary_search,caesar_cipher,roman_to_int \
      --break-lock --stop-after --json > "$OUT/differential-b$b.json"
    echo "run --differential b$b exit: $?"
    python3 - "$OUT/differential-b$b.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("eager", "graph"):
    c = d[k]; p = c.get("probes") or {}; eff = c.get("effective") or {}
    cfg = c['config']; tag = f"b{cfg['budget']}-{'graph' if cfg['graph'] else 'eager'}"
    print(f"{k}: {tag} {c['outcome']} accept={p.get('accept_length')} "
          f"coding={p.get('passed')}/{p.get('total')} tok/s={p.get('tok_s')} "
          f"server cuda_graph={eff.get('cuda_graph')} sig={(c.get('signature') or {}).get('key')}")
dd = d["differential"]
print("differential:", dd["status"], "|", dd["summary"])
for x in dd["diverged"][:4]:
    print("   -", x["task"], "at token", x["token"], "char", x["char"], "| graph:",
          x["graph_at"] or x["graph_ids"], "| eager:", x["eager_at"] or x["eager_ids"])
print("determinism:", dd["determinism"])
EOF
  done
fi

banner "verify-pass timings from the server logs"
grep -h "Verify pass on" "$WORK"/work-*/logs/*.log 2>/dev/null | sed 's/^\[[^]]*\] //' | sort | uniq -c | tail -40
tar -czf "$OUT/runs.tgz" -C "$WORK" hosts.yaml $(cd "$WORK" && ls -d work-* sshd.log sshd_config 2>/dev/null) \
  $( [ -d runs ] && echo "-C $PWD runs" ) 2>/dev/null
[ "$TRANSPORT" = ssh ] && stop_loopback_sshd "$WORK"
banner done

