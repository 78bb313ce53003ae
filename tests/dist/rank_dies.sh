#!/bin/sh
# ctest dist.rank-dies: rank 1 of 3 exits right after joining (dist_worker die). Ranks 0 and 2 must
# report their all_reduce failing, naming rank 1, and tessel-run must report rank 1's exit status.
# Usage: rank_dies.sh TESSEL_RUN DIST_WORKER LOG
"$1" -n 3 --grace 30 "$2" die >"$3" 2>&1
cat "$3"
grep -q 'rank 0: the all_reduce failed after .* s: .*rank 1' "$3" &&
  grep -q 'rank 2: the all_reduce failed after .* s: .*rank 1' "$3" &&
  grep -q 'tessel-run: rank 1 (pid [0-9]*) exited with status 3' "$3"
