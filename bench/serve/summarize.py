#!/usr/bin/env python3
"""summarize.py OUT_DIR [NAME...]: the medians (and ranges) over the rounds
that vs-llama-server.sh (names modrun, llama-server) or ab-modrun.sh (a, b)
wrote to OUT_DIR, per client count, and the median of the per-round ratios
of the second name to the first (TTFT p50 and tok/s)."""
import glob
import json
import os
import statistics as st
import sys


def rows(out, name):
    by = {}
    for f in sorted(glob.glob(os.path.join(out, name + "-*.json"))):
        rnd = f.rsplit("-", 1)[1].removesuffix(".json")
        for r in json.load(open(f))["rows"]:
            by.setdefault(r["clients"], {})[rnd] = r
    return by


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or ["llama-server", "modrun"]
    data = {n: rows(out, n) for n in names}
    for n in names:
        for c, rs in sorted(data[n].items()):
            tps = [r["tok_per_s"] for r in rs.values()]
            tt = [r["ttft_p50_ms"] for r in rs.values()]
            errs = sum(r["errors"] for r in rs.values())
            print(f"{n:13s} clients {c}: {st.median(tps):6.0f} tok/s ({min(tps):.0f}-{max(tps):.0f}), "
                  f"TTFT p50 {st.median(tt):6.1f} ms ({min(tt):.1f}-{max(tt):.1f}), {len(rs)} rounds, {errs} errors")
    if len(names) == 2:
        a, b = (data[n] for n in names)
        for c in sorted(a):
            both = sorted(set(a[c]) & set(b.get(c, {})))
            if not both:
                continue
            tt = [b[c][r]["ttft_p50_ms"] / a[c][r]["ttft_p50_ms"] for r in both]
            tps = [b[c][r]["tok_per_s"] / a[c][r]["tok_per_s"] for r in both]
            print(f"{names[1]}/{names[0]} clients {c}: TTFT p50 ratio {st.median(tt):.2f} "
                  f"({min(tt):.2f}-{max(tt):.2f}), tok/s ratio {st.median(tps):.2f} ({min(tps):.2f}-{max(tps):.2f})")


main()
