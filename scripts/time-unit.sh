#!/usr/bin/env bash
# CMake compiler launcher (scripts/test.sh sets it): runs the command after the first argument
# and appends "<wall milliseconds> <object file>" to the file that argument names, so that a
# build can say which translation units cost it the most (CI's log lists them).
log=$1
shift
start=$(date +%s%N)
"$@"
rc=$?
out=
prev=
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  prev=$a
done
echo "$((($(date +%s%N) - start) / 1000000)) ${out:-?}" >> "$log"
exit $rc
