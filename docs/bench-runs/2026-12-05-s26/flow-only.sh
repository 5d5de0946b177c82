#!/usr/bin/env bash
# Session 26: bench/flow-only.sh three times on the final binary (delivery_loops auto = 1
# here), nothing else running. Run from the repository root.
set -u
out=docs/bench-runs/2026-12-05-s26
for i in 1 2 3; do
  bench/flow-only.sh > "$out/flow-only-$i.json" 2>> "$out/flow-only.err"
  echo "flow-only $i rc=$?" >> "$out/flow-only.err"
done
