#!/usr/bin/env python3
"""How long a benchmark's calling thread waited for a core each time another thread took its
core from it (docs/performance.md, "A caller preempted by kvpoold's wake-up").

Reads `perf script -F tid,cpu,time,event,trace` output of a `perf sched record` run of a
benchmark, finds the thread of COMM that switched out most often (the caller), and for every
switch-out while still runnable (prev_state R: preempted, not asleep) measures the time
until it ran again, grouped by the thread that took the core.

  perf sched record -o /tmp/s.data -- build/tests/bench/kvpool_cadence_split_bench \
      --op step --gaps 1,5,20 --order blocks --samples 200
  perf script -i /tmp/s.data -F tid,cpu,time,event,trace | \
      tests/bench/caller_preemptions.py [COMM]      # COMM: kvpool_cadence_ by default
"""
import re
import sys
from collections import Counter, defaultdict

SWITCH = re.compile(r"\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch: prev_comm=(.+?) "
                    r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.+?) next_pid=(\d+)")


def main() -> int:
    comm = sys.argv[1] if len(sys.argv) > 1 else "kvpool_cadence_"
    switches = [m for m in map(SWITCH.match, sys.stdin) if m]
    outs = Counter(m.group(5) for m in switches if m.group(4) == comm)
    if not outs:
        print(f"no sched_switch of a thread named {comm!r} in the input", file=sys.stderr)
        return 1
    caller = outs.most_common(1)[0][0]
    waits = defaultdict(list)  # by the thread that took the core
    since, taker = None, None
    for m in switches:
        t = float(m.group(3))
        if m.group(5) == caller and m.group(6).startswith("R"):
            since, taker = t, m.group(7)
        elif m.group(8) == caller and since is not None:
            waits[taker].append((t - since) * 1e6)
            since = None
    every = sorted(w for ws in waits.values() for w in ws)
    if not every:
        print(f"thread {caller} ({comm}) was never preempted")
        return 0
    pct = lambda v, q: v[min(len(v) - 1, int(len(v) * q))]
    print(f"thread {caller} ({comm}): preempted {len(every)} times; waited for a core "
          f"p50 {pct(every, 0.5):.0f} us, p90 {pct(every, 0.9):.0f} us, "
          f"total {sum(every) / 1e3:.1f} ms")
    for who, ws in sorted(waits.items(), key=lambda kv: -len(kv[1])):
        ws.sort()
        print(f"  by {who}: {len(ws)} times, p50 {pct(ws, 0.5):.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
