#!/usr/bin/env python3
"""Mutation tries for the hand-written kernels: applies one mutation at a time to a file in kernels/
(deleting a `__syncthreads()` or `cluster.sync()`, or replacing a piece of code: a cp.async wait
one group short, a fragment index swapped, an edge predicate dropped), rebuilds the sim preset's
test program of that kernel family (the family_* targets of tests/CMakeLists.txt: one test file
each, not built by default), runs the chosen tests unshaken and, for a barrier, under shaker seeds
3 and 11 (whose blocks also take warp schedules), restores the file, and prints a Markdown table
of which runs caught each mutation. A mutation no run catches marks code that is unneeded or
untested. Needs a configured sim build (cmake --preset sim); about a minute per mutation on 2 cores.

    python3 scripts/try-mutations.py [INDEX ...] [--build DIR]   (indices into the list below; default all)

--build build/sim-asan runs them under AddressSanitizer, which is how CI sees a dropped predicate
whose only effect is a read past an operand (its values never reach a stored element).

The first 18 entries are issue 11's barrier deletions; the matmul entries (issue 12, 18-37) run
the int8 and the TF32 tests of mma_matmul as rows of their own, since those instantiations take the
B-by-columns path, and the bf16/fp16 exact test for the k-major B copies (36, 37) and for the
grouped launch order (38, 39); 40 tries the main loop's split into whole and last slabs on all three.
"""
import os
import subprocess
import sys
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


class M:
    """One mutation: the nth occurrence of `find` in `path` becomes `replace`."""
    def __init__(self, path, find, nth, what, family, specs, replace='', seeds=None):
        self.path, self.find, self.nth, self.what, self.family = path, find, nth, what, family
        self.specs = specs  # [(row label, Catch2 test spec)]
        self.replace = replace
        barrier = find in ('__syncthreads();', 'cluster.sync();') and not replace
        self.seeds = seeds if seeds is not None else ((None, '3', '11') if barrier else (None,))


FAMILY = {'[reduce]': 'family_test_reduce', '[rows]': 'family_test_rows', '[permute]': 'family_test_permute',
          '[matmul]': 'family_test_tiled_matmul'}
MMA = 'kernels/tessel/kernels/mma_matmul.cuh'
INT8_TF32 = [('int8', '*int8*'), ('tf32', 'mma_matmul on TF32 tensor cores: exact*')]  # Catch2 v2: wildcards at the ends only
BF16 = [('bf16/fp16', 'mma_matmul equals the exact product*')]  # k-major B (and B by columns)
muts = [
 M('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 0, 'reduce: after across_warps is written', FAMILY['[reduce]'], [('', '[reduce]')]),
 M('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 1, 'reduce: before across_warps is reused', FAMILY['[reduce]'], [('', '[reduce]')]),
 M('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 2, 'reduce_columns: after partials are written', FAMILY['[reduce]'], [('', '[reduce]')]),
 M('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 3, 'reduce_columns: before partials are reused', FAMILY['[reduce]'], [('', '[reduce]')]),
 M('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 4, 'reduce_partials: after across_warps is written', FAMILY['[reduce]'], [('', '[reduce]')]),
 M('kernels/tessel/kernels/reduce.cuh', '__syncthreads();', 5, 'reduce_partials: before across_warps is reused', FAMILY['[reduce]'], [('', '[reduce]')]),
 M('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 0, "block_combine: after the warps' values are written", FAMILY['[rows]'], [('', '[rows]')]),
 M('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 1, 'block_combine: after the block value is written', FAMILY['[rows]'], [('', '[rows]')]),
 M('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 2, 'block_combine: before across_warps is reused', FAMILY['[rows]'], [('', '[rows]')]),
 M('kernels/tessel/kernels/rows.cuh', '__syncthreads();', 3, "rows_per_cluster: after the row's statistics are combined", FAMILY['[rows]'], [('', '[rows]')]),
 M('kernels/tessel/kernels/rows.cuh', 'cluster.sync();', 0, 'rows_per_cluster: after the slice statistics are published', FAMILY['[rows]'], [('', '[rows]')]),
 M('kernels/tessel/kernels/rows.cuh', 'cluster.sync();', 1, 'rows_per_cluster: before exit', FAMILY['[rows]'], [('', '[rows]')]),
 M('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 0, 'permute_tiles whole tiles: after the tile is written', FAMILY['[permute]'], [('', '[permute]')]),
 M('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 1, 'permute_tiles whole tiles: before the tile is reused', FAMILY['[permute]'], [('', '[permute]')]),
 M('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 2, 'permute_tiles edge tiles: after the tile is written', FAMILY['[permute]'], [('', '[permute]')]),
 M('kernels/tessel/kernels/permute.cuh', '__syncthreads();', 3, 'permute_tiles edge tiles: before the tile is reused', FAMILY['[permute]'], [('', '[permute]')]),
 M('kernels/tessel/kernels/tiled_matmul.cuh', '__syncthreads();', 0, 'tiled_matmul: after the slabs are written', FAMILY['[matmul]'], [('', '[matmul]')]),
 M('kernels/tessel/kernels/tiled_matmul.cuh', '__syncthreads();', 1, 'tiled_matmul: before the slabs are overwritten', FAMILY['[matmul]'], [('', '[matmul]')]),
 M(MMA, '__syncthreads();', 0, 'mma_matmul: slab landed for every thread, stage free', 'family_test_mma_matmul', INT8_TF32, seeds=(None, '3', '11')),
 M(MMA, '__syncthreads();', 1, 'mma_matmul: pipeline drained before the epilogue reuses it', 'family_test_mma_matmul', INT8_TF32, seeds=(None, '3', '11')),
 M(MMA, '__syncthreads();', 2, 'mma_matmul: accumulators staged before rows are read', 'family_test_mma_matmul', INT8_TF32, seeds=(None, '3', '11')),
 M(MMA, '__syncthreads();', 3, 'mma_matmul: staging read before the next row tile', 'family_test_mma_matmul', INT8_TF32, seeds=(None, '3', '11')),
 M(MMA, 'ptx::cp_async_wait<S - 2>();', 0, 'mma_matmul: one cp.async group too few waited for', 'family_test_mma_matmul', INT8_TF32,
   replace='ptx::cp_async_wait<S - 1>();'),
 M(MMA, 'ptx::cp_async_wait<0>();', 0, 'mma_matmul: the pipeline not drained before the epilogue', 'family_test_mma_matmul', INT8_TF32,
   replace=''),
 M(MMA, 'ks * 2 + (lane >> 4))', 0, 'mma_matmul: A fragment rows and k-halves swapped (ldmatrix lane address)', 'family_test_mma_matmul',
   INT8_TF32, replace='ks * 2 + ((lane >> 3) & 1))'),
 M(MMA, 'ks * 2 + ((lane >> 3) & 1))', 0, 'mma_matmul: B-by-columns fragment k-halves swapped (ldmatrix lane address)',
   'family_test_mma_matmul', INT8_TF32, replace='ks * 2 + (lane >> 4))'),
 M(MMA, 'bf[j][0] = r4[0], bf[j][1] = r4[1]', 0, 'mma_matmul: b0 and b1 of a B fragment swapped', 'family_test_mma_matmul',
   INT8_TF32, replace='bf[j][0] = r4[1], bf[j][1] = r4[0]'),
 M(MMA, 'b_rows, k_bytes(b_ch)', 0, 'mma_matmul: B-by-columns K predicate dropped',
   'family_test_mma_matmul', INT8_TF32, replace='b_rows, 16u'),
 M(MMA, 'b_rows, k_bytes(b_ch)', 0, 'mma_matmul: B-by-columns N predicate dropped',
   'family_test_mma_matmul', INT8_TF32, replace='~0u, k_bytes(b_ch)'),
 M(MMA, 'a_rows, k_bytes(a_ch)', 0, 'mma_matmul: A M predicate dropped',
   'family_test_mma_matmul', INT8_TF32, replace='~0u, k_bytes(a_ch)'),
 M(MMA, 'const bool inside = full || gc + e < n;', 0, 'mma_matmul: epilogue column predicate dropped', 'family_test_mma_matmul',
   INT8_TF32, replace='const bool inside = true;'),
 M(MMA, 'sc[(r + 8) * Tile::c_stride + col] = acc[i][j][2];', 0, 'mma_matmul: C fragment rows c2 and c0 swapped',
   'family_test_mma_matmul', INT8_TF32, replace='sc[(r + 8) * Tile::c_stride + col] = acc[i][j][0];'),
 M(MMA, 'a_rows, k_bytes(a_ch)', 0, 'mma_matmul: A K predicate dropped',
   'family_test_mma_matmul', INT8_TF32, replace='a_rows, 16u'),
 M(MMA, 'a_offset(row, ch) + i * RA * 64', 0, "mma_matmul: A's and B^T's chunks one row apart in shared memory instead of RA",
   'family_test_mma_matmul', INT8_TF32, replace='a_offset(row, ch) + i * 64'),
 M(MMA, 'a_first, a_step,', 0, "mma_matmul: A's chunks one row apart in global memory instead of RA",
   'family_test_mma_matmul', INT8_TF32, replace='a_first, std::int64_t(lda),'),
 M(MMA, 'b_first, b_step,', 0, "mma_matmul: B^T's chunks not advanced along N",
   'family_test_mma_matmul', INT8_TF32, replace='b_first, std::int64_t(0),'),
 M(MMA, 'k0 + b_row + i * RB < k ? b_col_bytes : 0u', 0, 'mma_matmul: k-major B K predicate dropped',
   'family_test_mma_matmul', BF16, replace='b_col_bytes'),
 M(MMA, 'b_offset<BN>(b_row, b_ch) + i * RB * BN * 2', 0, "mma_matmul: k-major B's chunks one row apart in shared memory instead of RB",
   'family_test_mma_matmul', BF16, replace='b_offset<BN>(b_row, b_ch) + i * BN * 2'),
 M('include/tessel/core/tile_grid.hpp', 'first + within % rows', 0, "grouped_tile: a short last group's rows taken as a whole group's",
   'family_test_mma_matmul', BF16 + [('int8', '*int8*')], replace='first + within % group'),
 M('include/tessel/core/tile_grid.hpp', 'int(within / rows)', 0, "grouped_tile: column from a whole group's rows",
   'family_test_mma_matmul', BF16 + [('int8', '*int8*')], replace='int(within / group)'),
 M(MMA, 'k / BK - (S - 1);', 0, 'mma_matmul: one step too many in the whole-slab loop (a partial slab copied whole)',
   'family_test_mma_matmul', BF16 + INT8_TF32, replace='k / BK - (S - 2);'),
]
args = sys.argv[1:]
build = 'build/sim'
if '--build' in args:
    k = args.index('--build')
    build, args = args[k + 1].rstrip('/'), args[:k] + args[k + 2:]
only = [int(a) for a in args]
chosen = [(i, mu) for i, mu in enumerate(muts) if not only or i in only]


def mutated(mu, text):
    """text with the mutation applied; exits naming the entry when its text is not there."""
    pos = -1
    for _ in range(mu.nth + 1):
        pos = text.find(mu.find, pos + 1)
        if pos < 0:
            sys.exit(f'{mu.what}: occurrence {mu.nth} of {mu.find!r} is not in {mu.path}')
    return text[:pos] + mu.replace + text[pos + len(mu.find):]


def matching_tests(family, spec):
    r = subprocess.run([f'{build}/tests/{family}', spec, '--list-test-names-only'], capture_output=True, text=True)
    return [l for l in r.stdout.splitlines() if l.strip()]


# Everything is checked before any file changes: each text is there, each family builds unmutated
# and each spec selects a test.
for i, mu in chosen:
    mutated(mu, open(mu.path).read())
if subprocess.run(['cmake', '--build', build, '--target', *sorted({mu.family for _, mu in chosen}), '-j2'], capture_output=True).returncode:
    sys.exit(f'the unmutated family targets do not build in {build}')
for i, mu in chosen:
    for label, spec in mu.specs:
        if not matching_tests(mu.family, spec):
            sys.exit(f'the spec {spec!r} matches no test of {mu.family}')

results = []
try:
    for i, mu in chosen:
        orig = open(mu.path).read()
        try:
            open(mu.path, 'w').write(mutated(mu, orig))
            b = subprocess.run(['cmake', '--build', build, '--target', mu.family, '-j2'], capture_output=True, text=True)
            for label, spec in mu.specs:
                row = mu.what + (f' ({label})' if label else '')
                if b.returncode:
                    results.append((row, 'build failed', '', '')); continue
                outs = []
                for seed in (None, '3', '11'):
                    if seed not in mu.seeds:
                        outs.append('-'); continue
                    env = dict(os.environ)
                    env.pop('TESSEL_SIM_SHUFFLE', None)
                    if seed: env['TESSEL_SIM_SHUFFLE'] = seed
                    try:
                        r = subprocess.run([f'{build}/tests/{mu.family}', spec], capture_output=True, text=True, env=env, timeout=900)
                        outs.append('fails' if r.returncode else 'passes')
                    except subprocess.TimeoutExpired:
                        outs.append('hangs (900 s)')
                results.append((row,) + tuple(outs))
                print(i, results[-1], flush=True)
        finally:
            open(mu.path, 'w').write(orig)
finally:
    print('\n| mutation | unshaken | seed 3 | seed 11 |\n|---|---|---|---|')
    for r in results: print('| ' + ' | '.join(r) + ' |')
    subprocess.run(['cmake', '--build', build, '--target', *sorted({mu.family for _, mu in chosen}), '-j2'], capture_output=True)  # unmutated again
