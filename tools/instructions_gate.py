#!/usr/bin/env python3
"""The instruction-count gate: compares the callgrind instruction counts of benches/instructions.rs
(run with `cargo bench --bench instructions -- --save-summary=json`) with the committed baseline
benches/instructions-baseline.json.

  python3 tools/instructions_gate.py            check (CI); exit 1 on a regression
  python3 tools/instructions_gate.py --update   write the current counts as the new baseline

A benchmark regresses when it executes more than 2% more instructions than its baseline. A
regression passes only if the commit being checked (HEAD) itself changes the baseline file and its
message carries a line `instructions-baseline: <reason>`; the counts must then match the new
baseline (within 2%). New benchmarks must be added to the baseline; missing ones fail.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(ROOT, "benches", "instructions-baseline.json")
RESULTS = os.path.join(ROOT, "target", "gungraun", "halfstep-benches", "instructions")
LIMIT = 0.02


def current():
    counts = {}
    for dirpath, _, files in os.walk(RESULTS):
        if "summary.json" in files:
            s = json.load(open(os.path.join(dirpath, "summary.json")))
            m = s["profiles"][0]["summaries"]["total"]["summary"]["Callgrind"]["Ir"]["metrics"]
            # "Left": this run only; "Both": [this run, gungraun's previous run].
            ir = (m["Left"] if "Left" in m else m["Both"][0])["Int"]
            counts[f"{s['function_name']}/{s['id']}"] = ir
    if not counts:
        sys.exit(f"no gungraun summaries under {RESULTS}: run `cargo bench --bench instructions -- --save-summary=json`")
    return counts


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout


def compare(now, base, label):
    bad = []
    for name, ir in sorted(now.items()):
        if name not in base:
            bad.append(f"  {name}: {ir} instructions, not in the {label} baseline")
            continue
        change = ir / base[name] - 1
        mark = "REGRESSION" if change > LIMIT else ""
        print(f"  {name:<40} {base[name]:>10} -> {ir:>10}  {100 * change:+6.2f}%  {mark}")
        if change > LIMIT:
            bad.append(f"  {name}: {base[name]} -> {ir} ({100 * change:+.2f}%)")
    for name in sorted(set(base) - set(now)):
        bad.append(f"  {name}: in the {label} baseline but not measured")
    return bad


def main():
    now = current()
    if "--update" in sys.argv:
        json.dump(dict(sorted(now.items())), open(BASELINE, "w"), indent=1)
        open(BASELINE, "a").write("\n")
        print(f"wrote {len(now)} counts to {BASELINE}")
        # The table of the counts in docs/bench/ follows the baseline (CI checks that it does).
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_report.py"), "--instructions-only"],
                       check=True)
        return
    base = json.load(open(BASELINE))
    print(f"instruction counts vs {os.path.relpath(BASELINE, ROOT)} (limit +{100 * LIMIT:.0f}%):")
    bad = compare(now, base, "committed")
    if bad:
        print("\nregressions or mismatches against the committed baseline:\n" + "\n".join(bad))
        sys.exit(1)
    # The committed baseline may itself have been raised by HEAD: then HEAD must say why.
    rel = os.path.relpath(BASELINE, ROOT)
    if rel in git("diff", "--name-only", "HEAD~1", "HEAD").split():
        previous = json.loads(git("show", f"HEAD~1:{rel}") or "{}")
        raised = [n for n in now if n in previous and now[n] / previous[n] - 1 > LIMIT]
        message = git("log", "-1", "--format=%B")
        reason = [l for l in message.splitlines() if l.startswith("instructions-baseline:")]
        if raised and not reason:
            print(f"\nHEAD raises the baseline of {', '.join(raised)} by more than {100 * LIMIT:.0f}% "
                  "without an `instructions-baseline: <reason>` line in its message")
            sys.exit(1)
        if raised:
            print(f"\nbaseline raised by HEAD for {len(raised)} benchmarks: {reason[0]}")
    print("\nno regressions")


if __name__ == "__main__":
    main()
