"""PNGs of one scripts/replay.sh run (Debian's python3-matplotlib, no display needed).

    python3 tools/replay/plot.py RESULTS_DIR OUT_DIR
RESULTS_DIR holds cap_<pct>.json (kvpool-replay --json at each capacity), sim_whole.json
(kvpool-replay --simulate-only over the whole trace) and ttft.json (bench_ttft.py --json).
"""

import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


def hit_rate_plot(res, out):
    runs = sorted((load(p) for p in glob.glob(os.path.join(res, "cap_*.json"))),
                  key=lambda j: j["capacity_blocks"])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if runs:
        pcts = [100 * j["capacity_blocks"] / j["distinct_blocks"] for j in runs]
        ax.plot(pcts, [100 * j["hit_rate"] for j in runs], "o-", label="kvpool (kvpoold, 4 workers)")
        ax.plot(pcts, [100 * j["simulated_hit_rate"] for j in runs], "x--",
                label="simulation (pool core in-process)")
        ax.axhline(100 * runs[0]["ceiling"], color="gray", ls=":",
                   label=f"infinite cache ({100 * runs[0]['ceiling']:.1f}%)")
        span = runs[0]["span_s"]
        ax.set_title(f"Prefix hit rate vs pool capacity: Mooncake conversation trace, "
                     f"first {span / 60:.0f} min ({runs[0]['requests']} requests)", fontsize=9)
    whole = os.path.join(res, "sim_whole.json")
    if os.path.exists(whole):
        w = load(whole)
        ax.plot([s["capacity_pct"] for s in w["simulation"]], [100 * s["hit_rate"] for s in w["simulation"]],
                "s-.", alpha=0.6, label="simulation, whole trace (capacity: % of its distinct blocks)")
        ax.axhline(100 * w["ceiling"], color="gray", ls="-.", alpha=0.5,
                   label=f"infinite cache, whole trace ({100 * w['ceiling']:.1f}%)")
    ax.set_xscale("log")
    ax.set_xticks([2, 5, 10, 20, 40])
    ax.set_xticklabels(["2%", "5%", "10%", "20%", "40%"])
    ax.set_xlabel("pool capacity (% of the distinct blocks of the trace replayed)")
    ax.set_ylabel("prompt blocks matched (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "replay_hit_rate.png"), dpi=110)


def latency_plot(res, out):
    paths = sorted(glob.glob(os.path.join(res, "cap_*.json")))
    if not paths:
        return
    # The run at 10% capacity when there is one.
    j = next((load(p) for p in paths if p.endswith("cap_10.json")), load(paths[0]))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for op, v in j["latency_us"].items():
        if not v:
            continue
        v = sorted(v)
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=op)
    ax.set_xscale("log")
    ax.set_xlabel("client-side latency (us)")
    ax.set_ylabel("fraction of calls")
    ax.set_title(f"Per-operation latency through kvpoold during the replay "
                 f"({j['workers']} workers, capacity {j['capacity_blocks']} blocks)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "replay_latency_cdf.png"), dpi=110)


def ttft_plot(res, out):
    path = os.path.join(res, "ttft.json")
    if not os.path.exists(path):
        return
    j = load(path)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, label in (("without_kvpool_s", "without kvpool"), ("with_kvpool_s", "with kvpool")):
        v = sorted(1000 * x for x in j[key])
        ax.plot(v, [(i + 1) / len(v) for i in range(len(v))],
                label=f"{label} (mean {sum(v) / len(v):.1f} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (ms), torch engine on CPU")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"TTFT over {j['requests']} trace requests; "
                 f"{100 * j['reused_tokens'] / max(j['prompt_tokens'], 1):.0f}% of prompt tokens reused",
                 fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "replay_ttft.png"), dpi=110)


def main():
    res, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    hit_rate_plot(res, out)
    latency_plot(res, out)
    ttft_plot(res, out)
    print(f"plots written to {out}")


if __name__ == "__main__":
    main()
