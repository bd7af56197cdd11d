#!/usr/bin/env python3
"""A/B of two (or more) bench_attention builds on a noisy host.

Runs the given binaries in turn, RUNS times each, with the same arguments, and
summarises the rows both printed:

  decode rows ("% of read BW")  -> median and range of the percentage per row
  kernel rows (--sets kernels)  -> the best (smallest) ns per key of each step,
                                   and the best compute-bound GB/s

Alternating the builds puts both through the same host states; the host of
the results in bench/results/ swings between a quick and a slow state every few
seconds, so a kernel's best time is its time in the quick state, while a DRAM
ratio is taken per sample against a probe and its median is the fair summary.

  bench/ab_attention.py OLD_BIN,NEW_BIN RUNS [bench_attention arguments...]

Example (copy the old build's binary aside before rebuilding):
  bench/ab_attention.py /tmp/old,build-bench/bench/bench_attention 6 \\
      --threads 1,2 --reps 7 --sets decode --caches f32,bf16,i8
"""
import collections
import statistics
import subprocess
import sys


def dec_cell(v):
    return f'{statistics.median(v):.0f}% ({min(v)}–{max(v)})' if v else '-'


def ker_cell(v, steps):
    if not v['sum']:
        return '-'
    return ' / '.join(f'{min(v[s]):.2f}' for s in steps[:4]) + f', {max(v["gbs"]):.1f}'


def print_table(head, nkey, bins, what, rows, cell):
    """A markdown table: the nkey key fields of each row, then cell(build, row) per build."""
    print(head + ' | '.join(f'{b}: {what}' for b in bins) + ' |')
    print('|' + '---|' * nkey + '---|' * len(bins))
    for r in rows:
        print('| ' + ' | '.join(str(x) for x in r) + ' | ' +
              ' | '.join(cell(b, r) for b in bins) + ' |')


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    bins = argv[1].split(',')
    try:
        runs = int(argv[2])
    except ValueError:
        runs = 0
    if runs < 1 or len(bins) < 1:
        sys.stderr.write('ab_attention: RUNS must be a positive integer\n')
        return 2
    extra = argv[3:]
    dec = collections.defaultdict(list)  # (bin, cache, ctx, threads) -> [%]
    ker = collections.defaultdict(list)  # (bin, cache, level, step) -> [value]
    steps = ['dot', 'softmax', 'pv', 'sum', 'gbs']
    for _ in range(runs):
        for b in bins:
            try:
                p = subprocess.run([b] + extra, capture_output=True, text=True)
            except OSError as e:
                sys.stderr.write(f'ab_attention: cannot run {b}: {e.strerror}\n')
                return 1
            if p.returncode != 0:
                sys.stderr.write(f'ab_attention: {b} exited with {p.returncode}\n{p.stderr}')
                return 1
            for ln in p.stdout.splitlines():
                f = [x.strip() for x in ln.strip().strip('|').split('|')]
                if len(f) == 10 and f[6].endswith('%'):
                    dec[(b, f[0], int(f[1]), int(f[2]))].append(int(f[6].rstrip('%')))
                elif len(f) == 7 and f[1] in ('avx512', 'avx2', 'generic'):
                    for j, name in enumerate(steps):
                        ker[(b, f[0], f[1], name)].append(float(f[2 + j]))
    if dec:
        print_table('| cache | context | threads | ', 3, bins, 'median (range)',
                    sorted({k[1:] for k in dec}, key=lambda k: (k[0], k[2], k[1])),
                    lambda b, r: dec_cell(dec.get((b,) + r, [])))
    if ker:
        if dec:
            print()
        print_table('| cache | level | ', 2, bins, 'best dot / softmax / pv / sum ns per key, GB/s',
                    sorted({k[1:3] for k in ker}),
                    lambda b, r: ker_cell({s: ker.get((b,) + r + (s,), []) for s in steps}, steps))
    if not dec and not ker:
        sys.stderr.write('ab_attention: no decode or kernel rows in the output\n')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
