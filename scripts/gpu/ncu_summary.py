#!/usr/bin/env python3
"""Per-kernel time per decode step from an ncu CSV run of `hart bench`.

  ncu --clock-control none --csv --metrics gpu__time_duration.sum \
      ./build-gpu/hart bench --batch 1 --context 4K --steps 2 --warmup 1 --prefill-chunk 0 > ncu.csv
  python3 scripts/gpu/ncu_summary.py ncu.csv 3      # 3 = warmup + timed steps

Prints the total and the top kernels in us per step (template arguments kept,
namespaces dropped); the bench's random-fill kernels are left out. ncu runs
kernels one at a time with cold caches, so small kernels read high.
"""
import collections
import csv
import re
import sys

FILL = ("e4m3_kernel", "byte_kernel", "f32_kernel", "bf16_kernel", "empty_kernel")


def main():
    path, steps = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    total, count = collections.defaultdict(float), collections.Counter()
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"^void ", "", re.sub(r"\(anonymous namespace\)::|<?unnamed>::|hart::|gpu::", "", r["Kernel Name"]))
        name = name.split("(")[0]
        if any(f in name for f in FILL):
            continue
        value, unit = float(r["Metric Value"].replace(",", "")), r["Metric Unit"]
        total[name] += value / 1000 if unit in ("ns", "nsecond") else value * 1000 if unit in ("ms", "msecond") else value
        count[name] += 1
    print(f"total {sum(total.values()) / steps:.0f} us/step over {sum(count.values()) / steps:.0f} launches/step")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{us / steps:9.1f} us {count[name] / steps:6.1f}x  {name}")


if __name__ == "__main__":
    main()
