#!/usr/bin/env python3
"""Tries deleting each barrier in kernels/ (issue 11, part 4): deletes one `__syncthreads()` or
`cluster.sync()` at a time, rebuilds the sim preset's test program of that kernel family (the
family_* targets of tests/CMakeLists.txt: one test file each), runs it unshaken and under shaker
seeds 3 and 11 (whose blocks also take warp schedules), restores the file, and prints a Markdown
table of which runs caught each deletion. A barrier whose deletion no run catches is either
unneeded or untested. Needs a configured sim build (cmake --preset sim); about a minute per
barrier on 2 cores.

    python3 scripts/try-barrier-deletions.py [INDEX ...]   (indices into the list below; default all)
"""
import os
import subprocess
import sys
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
muts = [
 ('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 0, 'reduce: after across_warps is written', '[reduce]'),
 ('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 1, 'reduce: before across_warps is reused', '[reduce]'),
 ('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 2, 'reduce_columns: after partials are written', '[reduce]'),
 ('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 3, 'reduce_columns: before partials are reused', '[reduce]'),
 ('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 4, 'reduce_partials: after across_warps is written', '[reduce]'),
 ('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 5, 'reduce_partials: before across_warps is reused', '[reduce]'),
 ('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 0, 'block_combine: after the warps\' values are written', '[rows]'),
 ('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 1, 'block_combine: after the block value is written', '[rows]'),
 ('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 2, 'block_combine: before across_warps is reused', '[rows]'),
 ('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 3, 'rows_per_cluster: after the row\'s statistics are combined', '[rows]'),
 ('kernels/tessel/kernels/rows.cuh', 'cluster.sync();', 0, 'rows_per_cluster: after the slice statistics are published', '[rows]'),
 ('kernels/tessel/kernels/rows.cuh', 'cluster.sync();', 1, 'rows_per_cluster: before exit', '[rows]'),
 ('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 0, 'permute_tiles whole tiles: after the tile is written', '[permute]'),
 ('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 1, 'permute_tiles whole tiles: before the tile is reused', '[permute]'),
 ('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 2, 'permute_tiles edge tiles: after the tile is written', '[permute]'),
 ('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 3, 'permute_tiles edge tiles: before the tile is reused', '[permute]'),
 ('kernels/tessel/kernels/tiled_matmul.cuh', '__syncthreads();', 0, 'tiled_matmul: after the slabs are written', '[matmul]'),
 ('kernels/tessel/kernels/tiled_matmul.cuh', '__syncthreads();', 1, 'tiled_matmul: before the slabs are overwritten', '[matmul]'),
]
FAMILY = {'[reduce]': 'family_test_reduce', '[rows]': 'family_test_rows', '[permute]': 'family_test_permute',
          '[matmul]': 'family_test_tiled_matmul'}
only = [int(a) for a in sys.argv[1:]]
results = []
for i, (path, text, nth, what, tag) in enumerate(muts):
    if only and i not in only: continue
    orig = open(path).read()
    pos = -1
    for _ in range(nth + 1):
        pos = orig.index(text, pos + 1)
    open(path, 'w').write(orig[:pos] + orig[pos + len(text):])
    try:
        target = FAMILY[tag]
        b = subprocess.run(['cmake', '--build', 'build/sim', '--target', target, '-j2'], capture_output=True, text=True)
        if b.returncode:
            results.append((what, 'build failed', '', '')); continue
        outs = []
        for seed in (None, '3', '11'):
            env = dict(os.environ)
            env.pop('TESSEL_SIM_SHUFFLE', None)
            if seed: env['TESSEL_SIM_SHUFFLE'] = seed
            r = subprocess.run(['build/sim/tests/' + target, tag], capture_output=True, text=True, env=env, timeout=900)
            outs.append('fails' if r.returncode else 'passes')
        results.append((what,) + tuple(outs))
    finally:
        open(path, 'w').write(orig)
    print(results[-1], flush=True)
print('\n| barrier deleted | unshaken | seed 3 | seed 11 |\n|---|---|---|---|')
for r in results: print('| ' + ' | '.join(r) + ' |')
subprocess.run(['cmake', '--build', 'build/sim', '--target', *sorted(set(FAMILY.values())), '-j2'], capture_output=True)
