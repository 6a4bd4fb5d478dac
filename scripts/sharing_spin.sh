#!/usr/bin/env bash
# Shared scans (issue 21, first increment): closed loop over the PostgreSQL
# protocol, sharing off against on, at several client counts.
#
#   scripts/sharing_spin.sh BIN SF DURATION "C1 C2 …" OUTDIR [PORT]
#
# For each mode a fresh `BIN --tpch SF --in-memory serve --sharing MODE` is
# started (no data directory: the user's default one is never touched);
# for each C, `BIN --tpch SF bench spin --pg 127.0.0.1:PORT --queries q1,q6
# --clients C --no-isolated` runs for DURATION seconds (drawn parameters,
# short:long 3:1 over the one schema) and writes OUTDIR/MODE-C.json; the
# summary (throughput over the stable window, latency p50/p90/p99 of the
# measured samples, batches and their mean size from stride.batches) is
# printed as a Markdown table.
set -euo pipefail
bin=$1 sf=$2 duration=$3 clients=$4 out=$5 port=${6:-55433}
mkdir -p "$out"
summary() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, mode, c = sys.argv[1:4]
run = json.load(open(path))
lat = sorted(s["latency_ms"] for s in run["samples"] if not s["warmup"] and not s["error"])
def pct(p):
    return lat[min(len(lat) - 1, max(0, int(round(p * len(lat) + 0.5)) - 1))] if lat else float("nan")
errors = sum(1 for s in run["samples"] if s["error"])
t = run["throughput"]
print(f"| {mode} | {c} | {t['mean_qps']:.2f} ± {2 * t['sem_qps']:.2f} | {pct(0.5):.0f} | {pct(0.9):.0f} | {pct(0.99):.0f} | {len(lat)} | {errors} |")
PY
}
echo "| sharing | C | completions/s (±2·SEM) | p50 ms | p90 ms | p99 ms | samples | errors |"
echo "|---|---|---|---|---|---|---|---|"
for mode in off scans; do
  "$bin" --tpch "$sf" --in-memory serve --port "$port" --sharing "$mode" >"$out/serve-$mode.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    if psql -h 127.0.0.1 -p "$port" -U stride -d postgres -Atc "select 1" >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  for c in $clients; do
    "$bin" --tpch "$sf" bench spin --pg "127.0.0.1:$port" --queries q1,q6 --clients "$c" \
      --duration "$duration" --warmup-s 3 --no-isolated --quiet --json "$out/$mode-$c.json" \
      >"$out/$mode-$c.log" 2>&1
    summary "$out/$mode-$c.json" "$mode" "$c"
  done
  psql -h 127.0.0.1 -p "$port" -U stride -d postgres -Atc \
    "select '$mode batches: ' || count(*) || ', mean members ' || round(avg(members), 1) || ', max ' || coalesce(max(members), 0) from stride.batches" \
    >>"$out/batches.txt" 2>&1 || true
  kill "$server"
  wait "$server" 2>/dev/null || true
done
cat "$out/batches.txt"
