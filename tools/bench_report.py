#!/usr/bin/env python3
"""The generated benchmark tables and plots in docs/bench/, from saved results (nothing typed).

  python3 tools/bench_report.py [--criterion target/criterion] [--peers target/peers.json]
  python3 tools/bench_report.py --instructions-only   # docs/bench/instructions.md alone (CI checks it)

Reads criterion's results of `cargo bench --bench kernels` (groups `<kernel>/<B>B-per-elem`, ids
`<backend>/<size>x<threads>T`, "copy-roof" the same-traffic copy loop run the same way) and, if the
file exists, the rows `tools/peers_side_by_side.py --json` wrote. Writes
  - in docs/bench/kernels.md, the section between `<!-- kernels:begin -->` and `<!-- kernels:end -->`:
    per kernel, per size and thread count, each backend's median ns/element, GB/s (B bytes per element
    moved once) and % of the copy loop ("% roof" = copy time / kernel time; above 100% is possible when
    the data is cache resident), and the peer's figures with peer / best-halfstep; and the side-by-side
    table (`<!-- peers:... -->`) from the peers file;
  - in docs/bench/instructions.md, the instruction-count table (`<!-- instructions:... -->`) from
    benches/instructions-baseline.json;
  - docs/bench/<kernel>.svg: GB/s against size per backend (1 thread solid, 2 threads dashed), the roof
    in grey, the peer as black marks.
`tools/benchmarks.sh` runs the benchmarks and this script in one go.
"""
import argparse
import json
import math
import os
import re
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["avx512", "avx2", "neon", "portable", "reference"]
COLORS = {"avx512": "#1f77b4", "avx2": "#ff7f0e", "neon": "#2ca02c", "portable": "#9467bd",
          "reference": "#8c564b", "copy-roof": "#999999"}
# Kernel group -> the peer row of tools/peers_side_by_side.py doing the same update on the same dtypes.
PEER_OF = {
    "sgd_split_bf16grad_f32momentum": "sgd",
    "adagrad_split_bf16grad_f32sum": "adagrad",
    "adam_split_bf16grad_f32state": "adam",
    "adamw_f32": "adamw_f32",
    "lamb_split_bf16grad_f32state": "lamb",
}


def size_of(label):
    return int(label[:-1]) << (20 if label.endswith("M") else 10)


def label_of(n):
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"


def load(criterion):
    """{kernel: {"bytes": B, "cells": {(n, t): {backend: ns/elem}}}}"""
    out = {}
    for dirpath, _, files in os.walk(criterion):
        if "benchmark.json" not in files or os.path.basename(dirpath) != "new":
            continue
        bench = json.load(open(os.path.join(dirpath, "benchmark.json")))
        m = re.fullmatch(r"(\w+)/([\d.]+)B-per-elem", bench["group_id"])
        v = re.fullmatch(r"(\d+[KM])x(\d+)T", bench.get("value_str") or "")
        if not m or not v:
            continue  # benches/parallel.rs (tools/scaling_table.py) or an older layout
        est = json.load(open(os.path.join(dirpath, "estimates.json")))
        n, t = size_of(v.group(1)), int(v.group(2))
        k = out.setdefault(m.group(1), {"bytes": float(m.group(2)), "cells": defaultdict(dict)})
        k["cells"][(n, t)][bench["function_id"]] = est["median"]["point_estimate"] / n
    return out


def load_peers(path):
    if not path or not os.path.exists(path):
        return {}, None
    d = json.load(open(path))
    peers = {}
    for r in d["rows"]:
        peers[(r["kernel"], r["elements"], r["threads"])] = (r["peer"], r["peer_ns"])
    return peers, d.get("torch")


def table(name, k, peers):
    nbytes, cells = k["bytes"], k["cells"]
    backends = [b for b in ORDER if any(b in c for c in cells.values())]
    peer_key = PEER_OF.get(name)
    head = ["size", "threads", "copy roof"] + backends
    if peer_key:
        head += ["peer", "peer / best halfstep"]
    lines = [f"**{name}** ({nbytes:g} B/element)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (n, t) in sorted(cells):
        c = cells[(n, t)]
        roof = c.get("copy-roof")
        row = [label_of(n), str(t), f"{roof:.3f} ns · {nbytes / roof:.1f} GB/s" if roof else "-"]
        for b in backends:
            if b in c:
                pct = f" · {100 * roof / c[b]:.0f}%" if roof else ""
                row.append(f"{c[b]:.3f} ns · {nbytes / c[b]:.1f} GB/s{pct}")
            else:
                row.append("-")
        if peer_key:
            p = peers.get((peer_key, n, t))
            if p:
                best = min(c[b] for b in backends if b in c)
                row += [f"{p[1]:.3f} ns · {nbytes / p[1]:.1f} GB/s", f"{p[1] / best:.2f}x"]
            else:
                row += ["-", "-"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def svg(name, k, peers, peer_name):
    nbytes, cells = k["bytes"], k["cells"]
    W, H, L, R, T, B = 720, 400, 60, 170, 30, 45
    sizes = sorted({n for n, _ in cells})
    series = defaultdict(list)  # (backend, threads) -> [(n, GB/s)]
    for (n, t), c in sorted(cells.items()):
        for b, ns in c.items():
            series[(b, t)].append((n, nbytes / ns))
    marks = []
    pk = PEER_OF.get(name)
    if pk:
        for (kk, n, t), (_, ns) in peers.items():
            if kk == pk and n in sizes:
                marks.append((n, t, nbytes / ns))
    ymax = max([g for s in series.values() for _, g in s] + [g for *_, g in marks] + [1.0])
    step = 10 ** math.floor(math.log10(ymax / 4))
    step *= 2 if ymax / step > 10 else 1
    ytop = math.ceil(ymax / step) * step
    lx0, lx1 = math.log2(sizes[0]), math.log2(sizes[-1])

    def px(n):
        return L + (W - L - R) * ((math.log2(n) - lx0) / max(lx1 - lx0, 1))

    def py(g):
        return H - B - (H - T - B) * g / ytop

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{L}" y="18" font-size="14">{name} — GB/s ({nbytes:g} B/element) vs elements</text>']
    y = 0.0
    while y <= ytop + 1e-9:
        o.append(f'<line x1="{L}" x2="{W - R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        y += step
    for n in sizes:
        o.append(f'<text x="{px(n):.1f}" y="{H - B + 16}" text-anchor="middle">{label_of(n)}</text>')
    o.append(f'<line x1="{L}" x2="{W - R}" y1="{H - B}" y2="{H - B}" stroke="black"/>')
    o.append(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H - B}" stroke="black"/>')
    legend = []
    for (b, t), pts in sorted(series.items(), key=lambda x: (x[0][1], (ORDER + ["copy-roof"]).index(x[0][0])
                                                              if x[0][0] in ORDER + ["copy-roof"] else 99)):
        color = COLORS.get(b, "#000")
        dash = "" if t == 1 else ' stroke-dasharray="6,4"'
        width = 1.5 if b == "copy-roof" else 2
        path = " ".join(f"{px(n):.1f},{py(g):.1f}" for n, g in pts)
        o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="{width}"{dash}/>')
        legend.append((f"{'roof (copy loop)' if b == 'copy-roof' else b}, {t}T", color, dash))
    for n, t, g in marks:
        if t == 1:
            o.append(f'<circle cx="{px(n):.1f}" cy="{py(g):.1f}" r="4" fill="black"/>')
        else:
            o.append(f'<rect x="{px(n) - 4:.1f}" y="{py(g) - 4:.1f}" width="8" height="8" fill="none" stroke="black"/>')
    if marks:
        legend.append((f"peer 1T ●, 2T □", "#000", None))
    for i, (text, color, dash) in enumerate(legend):
        yy = T + 14 + 16 * i
        if dash is not None:
            o.append(f'<line x1="{W - R + 10}" x2="{W - R + 34}" y1="{yy - 4}" y2="{yy - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{W - R + 40}" y="{yy}">{text}</text>')
    if marks and peer_name:
        o.append(f'<text x="{L}" y="{H - 8}" font-size="11">peer: {peer_name}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--criterion", default=os.path.join(ROOT, "target", "criterion"))
    ap.add_argument("--peers", default=os.path.join(ROOT, "target", "peers.json"))
    ap.add_argument("--instructions-only", action="store_true",
                    help="rewrite docs/bench/instructions.md from the committed baseline and nothing else")
    a = ap.parse_args()
    if a.instructions_only:
        print(f"instruction counts in {write_instructions()}")
        return
    kernels = load(a.criterion)
    if not kernels:
        raise SystemExit(f"no kernel results under {a.criterion}: run `cargo bench --bench kernels`")
    peers, torch_version = load_peers(a.peers)
    bench_dir = os.path.join(ROOT, "docs", "bench")
    os.makedirs(bench_dir, exist_ok=True)
    parts = []
    for name in sorted(kernels):
        pk = PEER_OF.get(name)
        peer_name = next((p for (kk, _, _), (p, _) in peers.items() if kk == pk), None)
        with open(os.path.join(bench_dir, f"{name}.svg"), "w") as f:
            f.write(svg(name, kernels[name], peers, peer_name))
        parts.append(table(name, kernels[name], peers)
                     + (f"\n\nPeer: {peer_name}." if peer_name else "")
                     + f"\n\n![{name}]({name}.svg)")
    peer_note = (f"Peer columns: `tools/peers_side_by_side.py` (torch {torch_version}), same sizes and threads."
                 if peers else "No peer results (target/peers.json) were present for this report.")
    body = "\n\n".join([peer_note] + parts)
    matrix = os.path.join(bench_dir, "kernels.md")
    with open(matrix) as f:
        text = replace_section(f.read(), "kernels", body)
    if peers:
        text = replace_section(text, "peers", peers_table(a.peers))
    with open(matrix, "w") as f:
        f.write(text)
    counts = write_instructions()
    print(f"{len(kernels)} kernels: tables and peers in {matrix}, plots in docs/bench/, instruction counts in {counts}")


def peers_table(path):
    """The side-by-side rows as tools/peers_side_by_side.py prints them."""
    d = json.load(open(path))
    runs = d.get("runs", 1)
    lines = [f"torch {d.get('torch')}, median of {runs} run(s)", "",
             "| kernel | peer | elements | threads | peer ns/param | halfstep ns/param | peer / halfstep |",
             "|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        lines.append(f"| {r['kernel']} | {r['peer']} | {r['elements']} | {r['threads']} | {r['peer_ns']:.3f} | "
                     f"{r['halfstep_ns']:.3f} | {r['peer_ns'] / r['halfstep_ns']:.2f}x |")
    return "\n".join(lines)


def write_instructions():
    """Rewrites the table of docs/bench/instructions.md from the baseline; returns the file's path."""
    counts = os.path.join(ROOT, "docs", "bench", "instructions.md")
    with open(counts) as f:
        text = replace_section(f.read(), "instructions", instructions_table())
    with open(counts, "w") as f:
        f.write(text)
    return counts


def instructions_table():
    """The committed instruction-count baseline (measured by gungraun, written by instructions_gate.py)."""
    base = json.load(open(os.path.join(ROOT, "benches", "instructions-baseline.json")))
    lines = ["| benchmark (4096 elements) | instructions | per element |", "|---|---|---|"]
    lines += [f"| {k} | {v} | {v / 4096:.1f} |" for k, v in sorted(base.items())]
    return "\n".join(lines)


def replace_section(text, name, body):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text:
        raise SystemExit(f"the {begin} ... {end} markers are missing")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


if __name__ == "__main__":
    main()
