"""Usage: python3 bench/ncu_segments.py SASS.csv
Warp instructions and stall samples of an ncu SASS source export (--page source --csv
--print-source sass), split after each BAR.SYNC / BAR.RED (the kernel's phase barriers, in address
order, predicated or not) and each unpredicated EXIT, with each segment's top opcodes."""
import collections
import csv
import sys

if len(sys.argv) != 2:
    sys.exit("usage: python3 bench/ncu_segments.py SASS.csv  (ncu -i R.ncu-rep --page source --csv --print-source sass)")
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
h = rows[hdr]; ix = {n: i for i, n in enumerate(h)}
segs = [[]]
for r in rows[hdr + 1:]:
    if len(r) < len(h): continue
    src = r[ix['Source']].strip()
    if not src: continue
    ex = int(r[ix['Instructions Executed']] or 0); smp = int(r[ix['Warp Stall Sampling (All Samples)']] or 0)
    segs[-1].append((src, ex, smp))
    op = src.split()[1] if src.startswith('@') and len(src.split()) > 1 else src.split()[0]
    if op.startswith(('BAR.SYNC', 'BAR.RED')) or src.startswith('EXIT'): segs.append([])
tot = sum(e for s in segs for _, e, _ in s) or 1
tsm = sum(m for s in segs for _, _, m in s) or 1
print(f"total warp instructions {tot:,} stall samples {tsm:,}")
for i, s in enumerate(segs):
    ex = sum(e for _, e, _ in s); sm = sum(m for _, _, m in s)
    if ex == 0: continue
    ops = collections.Counter()
    for src, e, _ in s: ops[src.split()[0].split('.')[0] if not src.startswith('@') else src.split()[1].split('.')[0]] += e
    top = ', '.join(f"{k} {100*v/ex:.0f}%" for k, v in ops.most_common(6))
    print(f"seg {i:2d} ({len(s):4d} SASS) instr {100*ex/tot:5.1f}% samples {100*sm/tsm:5.1f}% | {top} | ends {s[-1][0][:30]}")
