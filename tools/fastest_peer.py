#!/usr/bin/env python3
"""The "fastest peer / halfstep" tables of BENCHMARKS.md, from the JSON that
`../shared/bench/peers_user.py --json OUT` writes.

    tools/fastest_peer.py [--ipex] [--pool] OUT.json [MORE.json ...]    (--help: the flags)

In each alternation, the fastest fp32 peer is the shortest step time among torch fused and DeepSpeed
(and IPEX's fp32 step with --ipex, where installed); a cell is the median over the alternations of
that time over halfstep's in the same alternation (> 1: halfstep faster), as peers_user.py takes its own
one-peer ratios. Where two files hold the same update, workload and thread count, the later file's cell is
the one printed; with --pool, the cell is the median over the alternations of all of them (each alternation's
ratio within its own call). Printed as markdown:

- per update and thread count, fp32 / split (split weights, bf16 gradients) for each workload; with
  --ipex, halfstep's split step is also measured against IPEX's split step;
- under it, how many of those fp32 and split cells are >= 1.0, and the cells below 1.0 with three
  decimals (a cell printed as 1.00 may be just under it);
- AdamW's memory-saving layouts: split weights with bf16-SR states, and bf16-SR weights against
  DeepSpeed's bf16 step (round to nearest, no master weights).
"""
import argparse
import json
import statistics

FP32_PEERS = {"torch", "ds"}
ORDER = ["16", "4K", "64K", "256K", "1M", "4M", "16M", "64M", "gpt2"]


def workload_key(w):
    return (ORDER.index(w), w) if w in ORDER else (len(ORDER), w)


def cells(calls, peers, peer_of, halfstep, pool):
    """{(group, threads, workload): median over alternations of peer time / halfstep time}, from the
    rows of each call in turn: a later call's cell replaces an earlier one's, or with `pool` adds its
    alternations to it."""
    ratios = {}
    for rows in calls:
        by = {}
        for r in rows:
            if "times_s" in r:
                by.setdefault((r["group"], r["threads"], r["workload"]), {})[r["entry"]] = r["times_s"]
        for key, entries in by.items():
            if halfstep not in entries:
                continue
            mine = entries[halfstep]
            theirs = [entries[p] for p in peer_of(key[0], peers) if p in entries]
            if not theirs:
                continue
            these = [min(t[i] for t in theirs) / mine[i] for i in range(len(mine))]
            ratios[key] = ratios.get(key, []) + these if pool else these
    return {key: statistics.median(r) for key, r in ratios.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="OUT.json", help="peers_user.py --json files, in call order")
    ap.add_argument("--ipex", action="store_true", help="IPEX's fp32 step among the fp32 peers, its split step "
                    "a peer of halfstep's split step")
    ap.add_argument("--pool", action="store_true", help="a cell's median over every file's alternations, "
                    "instead of the last file's")
    args = ap.parse_args()
    ipex, pool = args.ipex, args.pool
    calls = []
    for f in args.files:
        d = json.load(open(f))
        # One run per thread count, merged under "runs" when --threads named several.
        calls.append([row for run in d.get("runs", [d]) for row in run["rows"]])
    peers = FP32_PEERS | ({"ipex"} if ipex else set())

    def fp32_peers(_group, peers):
        return sorted(peers)

    def split_peers(_group, peers):
        # IPEX's own split step is a peer of halfstep's, and faster than its fp32 one for SGD.
        return sorted(peers | ({"ipex_split"} if ipex else set()))

    fp32 = cells(calls, peers, fp32_peers, "hs", pool)
    split = cells(calls, peers, split_peers, "hs_split", pool)
    keys = sorted(set(fp32) | set(split))
    workloads = sorted({k[2] for k in keys}, key=workload_key)
    names = " and ".join(["torch fused", "DeepSpeed"] + (["IPEX"] if ipex else []))
    print(f"Fastest fp32 peer ({names}) / halfstep, fp32 / split" + (" (and IPEX split / split)" if ipex else "") + ":\n")
    print("| update | threads | " + " | ".join(workloads) + " |")
    print("|---|---|" + "---|" * len(workloads))
    for group, threads in sorted({(k[0], k[1]) for k in keys}):
        row = []
        for w in workloads:
            a, b = fp32.get((group, threads, w)), split.get((group, threads, w))
            row.append("–" if a is None else f"{a:.2f} / {b:.2f}" if b is not None else f"{a:.2f}")
        print(f"| {group} | {threads} | " + " | ".join(row) + " |")
    both = [(k, "fp32", v) for k, v in fp32.items()] + [(k, "split", v) for k, v in split.items()]
    below = sorted(((k, kind, v) for k, kind, v in both if v < 1.0),
                   key=lambda c: (c[0][0], c[1], workload_key(c[0][2]), c[0][1]))
    print(f"\n{len(both) - len(below)} of {len(both)} fp32 / split cells are >= 1.0" + (
        "; below: " + ", ".join(f"{g} {kind} {w} {t}T {v:.3f}" for (g, t, w), kind, v in below) if below else "."))

    states = cells(calls, peers, fp32_peers, "hs_split_sbf16", pool)
    bf16w = cells(calls, peers, lambda _g, _p: ["ds_bf16w"], "hs_bf16w", pool)
    if states or bf16w:
        print("\nAdamW: fastest fp32 peer / split weights with bf16-SR states; "
              "DeepSpeed bf16 weights (nearest) / bf16-SR weights:\n")
        print("| threads | " + " | ".join(workloads) + " |")
        print("|---|" + "---|" * len(workloads))
        for threads in sorted({k[1] for k in states} | {k[1] for k in bf16w}):
            row = []
            for w in workloads:
                a, b = states.get(("adamw", threads, w)), bf16w.get(("adamw", threads, w))
                row.append(("–" if a is None else f"{a:.2f}") + " / " + ("–" if b is None else f"{b:.2f}"))
            print(f"| {threads} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
