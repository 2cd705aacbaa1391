#!/usr/bin/env python3
"""Usage: scripts/bench/table.py DIR REPEATS

One table from the `tpllama bench --json` reports of a sweep: DIR/order lists the workload names,
DIR/NAME.I.json (I = 1..REPEATS) are their runs. Every figure is the median over the repeats; the
roofline fractions and limits are those each run measured itself (scripts/bench/cpu.sh,
scripts/device/check.sh). Where the sweep has them, the scaling of tp=2 and pp=2 over one rank x one
thread at 32 sequences follows, with pp=2's ceiling: both stages busy all the time, each running the
16-sequence groups that one rank x one thread runs at 16 sequences."""
import json
import statistics
import sys

out, repeats = sys.argv[1], int(sys.argv[2])
names = open(f"{out}/order").read().split()
med = statistics.median
rows = []
values = {}
giga = True
for name in names:
    runs = [json.load(open(f"{out}/{name}.{i}.json")) for i in range(1, repeats + 1)]
    bw = med([r["machine"]["read_bandwidth_bytes_per_second"] for r in runs]) / 1e9
    peak = med([r["machine"]["gemm_flops_per_second"] for r in runs])
    giga = giga and peak < 1e13
    if name.startswith("prefill"):
        metric, value = "prefill tok/s", med([r["prefill_tokens_per_second"] for r in runs])
        frac = f'{100 * med([r["prefill_gemm_fraction"] for r in runs]):.1f}% of GEMM peak'
    else:
        metric, value = "decode tok/s", med([r["decode_tokens_per_second"] for r in runs])
        frac = f'{100 * med([r["decode_bandwidth_fraction"] for r in runs]):.1f}% of bandwidth'
    coll = med([r["ranks"][0]["collective_seconds"] / max(r["elapsed_seconds"], 1e-9) for r in runs])
    lay = runs[0]["layout"]
    dtype = runs[0]["dtype"]
    if runs[0].get("kv_dtype", dtype) != dtype:
        dtype += f' (kv {runs[0]["kv_dtype"]})'
    values[name] = value
    rows.append([name, f'{lay["ranks"]}x{lay["threads_per_rank"]} tp{lay["tp"]} pp{lay["pp"]}', dtype,
                 metric, f"{value:.1f}", frac, f"{100 * coll:.1f}%", f"{bw:.1f}", peak])
for row in rows:
    row[-1] = f"{row[-1] / 1e9:.1f}" if giga else f"{row[-1] / 1e12:.1f}"
head = ["workload", "ranks x threads", "dtype", "metric", f"median of {repeats}", "roofline", "rank 0 collectives",
        "read GB/s", "GEMM GFLOP/s" if giga else "GEMM TFLOP/s"]
widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
for row in [head] + rows:
    print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))

one = values.get("decode-32-1x1")
if one:
    print()
    for name, label in (("decode-32-tp2", "tp=2"), ("decode-32-pp2", "pp=2")):
        if name in values:
            print(f"{label} at 32 sequences: {values[name] / one:.2f}x one rank x one thread ({values[name]:.1f} / {one:.1f})")
    if "decode-16-1x1" in values:
        ceiling = 2 * values["decode-16-1x1"]
        line = f"pp=2 ceiling (2 x one rank x one thread at 16 sequences): {ceiling / one:.2f}x"
        if "decode-32-pp2" in values:
            line += f"; pp=2 reaches {100 * values['decode-32-pp2'] / ceiling:.0f}% of it"
        print(line)
