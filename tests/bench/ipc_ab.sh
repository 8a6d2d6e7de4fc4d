#!/usr/bin/env bash
# kvpool_ipc_bench of two builds side by side (issue 32): runs OLD and NEW in turn, one
# repetition each, --reps times, so that drift on a shared machine weighs on both alike,
# then prints per table and client count the median aggregate rate (min-max) of each, each
# against its own one-client median, and NEW/OLD; the victim's p50/p99 medians; kvpoold's
# and quiet clients' idle CPU of each. Each build's own kvpoold (KVPOOLD beside its bench).
#   tests/bench/ipc_ab.sh OLD_BUILD_DIR NEW_BUILD_DIR [--reps 3] [--seconds 1]
#                         [--clients 1,2,4,8,16] [--idle-seconds 10]
set -euo pipefail
old=$1 new=$2
shift 2
reps=3 seconds=1 clients=1,2,4,8,16 idle=10
while [[ $# -gt 1 ]]; do
  case $1 in
    --reps) reps=$2 ;;
    --seconds) seconds=$2 ;;
    --clients) clients=$2 ;;
    --idle-seconds) idle=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # build tag rep extra-args...
  local dir=$1 tag=$2 rep=$3
  shift 3
  KVPOOLD=$dir/daemon/kvpoold "$dir/tests/bench/kvpool_ipc_bench" "$@" >"$out/$tag.$rep" 2>&1
}
echo "start: $(date -u +%H:%M:%S) UTC, $(uptime | sed 's/.*load/load/')"
for ((r = 0; r < reps; r++)); do
  for tag in old new; do
    dir=$old
    [[ $tag == new ]] && dir=$new
    run "$dir" "$tag" "$r" --samples 300 --reps 1 --seconds "$seconds" --idle-seconds 0 --alternatives 0 \
      --clients "$clients"
  done
done
if [[ $idle != 0 ]]; then
  for tag in old new; do
    dir=$old
    [[ $tag == new ]] && dir=$new
    run "$dir" "$tag" idle --samples 100 --reps 1 --seconds 0.1 --idle-seconds "$idle" --clients 1
  done
fi
echo "end:   $(date -u +%H:%M:%S) UTC, $(uptime | sed 's/.*load/load/')"
python3 - "$out" "$reps" <<'PY'
import glob, os, re, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
tables = {"match-64, client processes": "match-64 flat out",
          "engine steps": "engine-step mix flat out",
          "match-64, clients pinned two": "match-64, clients pinned two to a core"}
def parse(path):
    cells, victim, table, idle = {}, {}, None, None
    for line in open(path):
        for key, name in tables.items():
            if line.startswith(key):
                table = name
        m = re.match(r"\s+(\d+)\s+(\d+)\s+\d+\s+\d+\s+\d+%\s+[\d.]+x(.*)", line)
        if m and table:
            diag = m.group(3).strip().lstrip("|").split()
            cells[(table, int(m.group(1)))] = (float(m.group(2)), diag)
        m = re.search(r"beside\s+(\d+) flat-out clients: p50\s+([\d.]+) us, p99\s+([\d.]+) us", line)
        if m:
            victim[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
        if line.startswith("idle CPU"):
            idle = line.strip()
    return cells, victim, idle
runs = {t: [parse(f"{out}/{t}.{r}") for r in range(reps)] for t in ("old", "new")}
def med(v):
    return statistics.median(v) if v else 0.0
for name in tables.values():
    counts = sorted({c for t in runs for cells, _, _ in runs[t] for (tb, c) in cells if tb == name})
    if not counts:
        continue
    print(f"\n{name}: aggregate calls/s, median of {reps} (min-max); vs 1 = against the same build's 1 client")
    print(f"{'clients':>7} | {'old':>24} {'vs 1':>6} | {'new':>24} {'vs 1':>6} | {'new/old':>7} | kvpoold cpu, invol. cs/1k calls; clients' cpu us/call: old -> new")
    one = {}
    for t in ("old", "new"):
        v = [cells[(name, counts[0])][0] for cells, _, _ in runs[t] if (name, counts[0]) in cells]
        one[t] = med(v)
    for c in counts:
        row, meds, diag = [], {}, {}
        for t in ("old", "new"):
            v = [cells[(name, c)][0] for cells, _, _ in runs[t] if (name, c) in cells]
            d = [cells[(name, c)][1] for cells, _, _ in runs[t] if (name, c) in cells]
            meds[t] = med(v)
            cpu = [float(x[0].rstrip("%")) for x in d if len(x) >= 3]
            inv = [float(x[2]) for x in d if len(x) >= 3]
            ccpu = [float(x[4].rstrip("us")) for x in d if len(x) >= 5]
            diag[t] = f"{med(cpu):.0f}% {med(inv):.0f}; {med(ccpu):.1f}" if cpu else "-"
            rng = f"{meds[t]:,.0f} ({min(v):,.0f}-{max(v):,.0f})" if v else "-"
            row.append(f"{rng:>24} {meds[t] / one[t] if one[t] else 0:5.2f}x")
        ratio = meds["new"] / meds["old"] if meds["old"] else 0
        print(f"{c:>7} | {row[0]} | {row[1]} | {ratio:6.2f}x | {diag['old']} -> {diag['new']}")
print("\nvictim, one match-64 every 1 ms: p50 / p99 us, median of the runs")
for n in (0, 16):
    for t in ("old", "new"):
        p50 = [v[n][0] for _, v, _ in runs[t] if n in v]
        p99 = [v[n][1] for _, v, _ in runs[t] if n in v]
        print(f"  {t} beside {n:2d} flat-out clients: p50 {med(p50):8.1f}, p99 {med(p99):8.1f}")
for t in ("old", "new"):
    p = f"{out}/{t}.idle"
    if os.path.exists(p):
        print(f"{t}: {parse(p)[2]}")
PY
