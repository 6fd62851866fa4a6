#!/usr/bin/env bash
# q38-precision-study end to end on a tiny checkpoint: the contract's agreement with FP32 comes
# out within (0, 1], an op left exact is named, a smaller indexer budget changes the result, the
# emulation runs sharded at TP2 (with its error along the probe and its decisions), a forced routing
# flip is reported where it was made, a run that follows FP32's decisions loses less than a free one,
# its decisions judged against FP32 made to take them are named, and bad input is refused with
# exit 2.
# Usage: precision_study_test.sh Q38_MAKE_CHECKPOINT Q38_PRECISION_STUDY
set -euo pipefail
make=$1 study=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$make" --out "$dir/tiny" --seed 3 > /dev/null
out=$("$study" --model "$dir/tiny" --positions 80 --prefill 16 --exact_ops Linear)
echo "$out"
echo "$out" | grep -Eq '^FP16 contract \(exact: Linear\) against FP32: top-1 agreement (0\.[0-9]*[1-9][0-9]*|1\.0000) over 80 positions'
dense=$("$study" --model "$dir/tiny" --positions 80 --prefill 16 --indexer_budget 1024)
sparse=$("$study" --model "$dir/tiny" --positions 80 --prefill 16 --indexer_budget 16)
[[ $dense != "$sparse" ]] || { echo "--indexer_budget changed nothing: $dense"; exit 1; }
tp2=$("$study" --model "$dir/tiny" --positions 80 --prefill 16 --tp 2)
echo "$tp2" | grep -Eq '^FP16 contract against FP32: top-1 agreement (0\.[0-9]*[1-9][0-9]*|1\.0000) over 80 positions'
# The error along the probe: six runs of positions, the last ending at position 79.
echo "$tp2" | grep -Eq '^FP16 contract against FP32 along the probe: 0-12: max [0-9.e+-]+, [0-9]+ misses; .*; 66-79: max '
# The decisions: routing's nearest a tie, and where the emulation decides otherwise; a forced
# flip of a routing decision it takes as FP32 does (layer 5, position 40) shows there.
echo "$tp2" | grep -Eq '^FP32 routing decisions nearest a tie \(router logit gap\): layer [0-9]+ position [0-9]+ gap '
plain=$(echo "$tp2" | grep '^FP16 contract decides otherwise than FP32: ')
[[ $plain != *"experts at layer 5 position 40 "* ]] || { echo "unflipped, the emulation already differs at 5:40: $plain"; exit 1; }
"$study" --model "$dir/tiny" --positions 80 --prefill 16 --tp 2 --flip_route 5:40 |
  grep -Eq '^FP16 contract decides otherwise than FP32: .*experts at layer 5 position 40 \(reference gap [0-9.e+-]+, [0-9.]+ FP16 ulps\)'
echo "$tp2" | grep -Eq '^FP16 contract first decides otherwise than FP32: (experts|blocks) at layer [0-9]+ position '
# Unsteered, the emulation flips experts and blocks (above); following FP32's decisions takes the
# flips' cost out: its p90 error comes out below the free run's (5.3e-3 against 1.4e-2 here).
[[ $plain == *"experts at layer"* && $plain == *"blocks at layer"* ]] || { echo "no flips to take out: $plain"; exit 1; }
p90() { sed -nE 's/^FP16 contract against FP32: .* p90 ([0-9.e+-]+),.*/\1/p'; }
free=$(echo "$tp2" | p90)
followed_out=$("$study" --model "$dir/tiny" --positions 80 --prefill 16 --tp 2 --follow_fp32_decisions)
followed=$(echo "$followed_out" | p90)
awk -v f="$followed" -v g="$free" 'BEGIN { exit !(f < g / 2) }' || { echo "following: p90 $followed, free $free"; exit 1; }
# Judged against FP32 made to take its decisions, the free run names the widest gap it took
# otherwise; a run that followed FP32 took none.
echo "$tp2" | grep -Eq '^FP16 contract against FP32 deciding alike: top-1 agreement (0\.[0-9]*[1-9][0-9]*|1\.0000) over 80 '
echo "$tp2" | grep -Eq '^FP16 contract decides otherwise than FP32 would in the same state: widest gap [0-9]+\.[0-9] FP16 ulps$'
echo "$tp2" | grep -q 'same state: widest gap 0.0 ' && { echo "the free run took no decision otherwise"; exit 1; }
echo "$followed_out" | grep -q '^FP16 contract decides otherwise than FP32 would in the same state: widest gap 0.0 FP16 ulps$' ||
  { echo "following FP32: $followed_out"; exit 1; }
set +e
err=$("$study" --model "$dir/tiny" --flip_route 5:40 --follow_fp32_decisions 2>&1); rc=$?
[[ $rc -eq 2 && $err == *"a run follows FP32 or flips, not both"* ]] || { echo "flip and follow: rc $rc: $err"; exit 1; }
err=$("$study" --model "$dir/tiny" --positions 80 --flip_route 5:80 2>&1); rc=$?
[[ $rc -eq 2 && $err == *"--flip_route 5:80: want LAYER:POSITION, a layer below 8 and a position below 80"* ]] ||
  { echo "flip past the probe: rc $rc: $err"; exit 1; }
err=$("$study" --model "$dir/tiny" --indexer_budget -1 2>&1); rc=$?
[[ $rc -eq 2 && $err == *"--indexer_budget must be positive"* ]] || { echo "bad budget: rc $rc: $err"; exit 1; }
err=$("$study" --model "$dir/tiny" --indexer_budget 6 2>&1); rc=$?
[[ $rc -eq 2 && $err == *"must be a multiple of indexer_compress_ratio"* ]] || { echo "budget 6: rc $rc: $err"; exit 1; }
err=$("$study" --model "$dir/tiny" --tp 0 2>&1); rc=$?
[[ $rc -eq 2 && $err == *"tp must be at least 1"* ]] || { echo "tp 0: rc $rc: $err"; exit 1; }
err=$("$study" --model "$dir/tiny" --exact_ops Nope 2>&1); rc=$?
set -e
[[ $rc -eq 2 && $err == *"--exact_ops: no op Nope"* ]] || { echo "bad op: rc $rc: $err"; exit 1; }
err=$("$study" --model "$dir/missing" 2>&1) && { echo "a missing checkpoint was accepted"; exit 1; }
[[ $err == *"cannot open"* ]] || { echo "missing checkpoint: $err"; exit 1; }
echo "precision study: ok"
