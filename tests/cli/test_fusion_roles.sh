#!/usr/bin/env bash
# A rules file that swaps $w_gate / $w_up or $wk / $wv still matches the graph,
# and fused mode computed garbage with exit 0: the fusion builders' roles refuse
# it, naming the rule, the pattern node and the wrong binding, in run and plan.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
RULES="$(dirname "$0")/../../configs/fusion/default.yaml"
sed -e 's/inputs: \[\$x, \$w_gate\]/inputs: [$x, $SWAP]/; s/inputs: \[\$x, \$w_up\]/inputs: [$x, $w_gate]/; s/\$SWAP/$w_up/' \
    "$RULES" >"$TMP/ffn_swapped.yaml"
sed -e 's/inputs: \[\$x, \$wk\]/inputs: [$x, $SWAP]/; s/inputs: \[\$x, \$wv\]/inputs: [$x, $wk]/; s/\$SWAP/$wv/' \
    "$RULES" >"$TMP/kv_swapped.yaml"
grep -q 'name: gate, op: matmul, inputs: \[\$x, \$w_up\]' "$TMP/ffn_swapped.yaml" \
    && grep -q 'name: k, op: matmul, inputs: \[\$x, \$wv\]' "$TMP/kv_swapped.yaml" && pass "swapped rule files written" \
    || fail "sed did not swap the bindings"
expect_error "run --mode fused, \$w_gate / \$w_up swapped" \
    "^loom run: --rules: .*ffn_swapped.yaml:[0-9]+:[0-9]+: rule 'ffn_residual': fused op ffn takes gate = matmul\(\\\$x, \\\$w_gate\); pattern node 'gate' binds \\\$w_up" \
    "$LOOM" run -m "$M" -z "$Z" --mode fused --rules "$TMP/ffn_swapped.yaml" -n 8
expect_error "run --mode fused, \$wk / \$wv swapped" \
    "^loom run: --rules: .*kv_swapped.yaml:[0-9]+:[0-9]+: rule 'qkv_rope_cache': .*pattern node 'k' binds \\\$wv as input 2 where \\\$wk belongs" \
    "$LOOM" run -m "$M" -z "$Z" --mode fused --rules "$TMP/kv_swapped.yaml" -n 8
expect_error "plan with \$wk / \$wv swapped" "^loom plan: --rules: .*kv_swapped.yaml.*rule 'qkv_rope_cache'" \
    "$LOOM" plan --config tinyllama --seq 8 --hw h200 --rules "$TMP/kv_swapped.yaml"
# the default rules written with mul / add inputs the other way round still fuse and agree
sed -e 's/inputs: \[act, up\]/inputs: [up, act]/; s/inputs: \[\$res, down\]/inputs: [down, $res]/' "$RULES" >"$TMP/commuted.yaml"
a=$("$LOOM" run -m "$M" -z "$Z" --mode fused --rules "$TMP/commuted.yaml" --temp 0 -n 48 2>"$TMP/err")
b=$("$LOOM" run -m "$M" -z "$Z" --temp 0 -n 48 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "commuted mul / add inputs: accepted, same text" || fail "commuted: '$a' $(cat "$TMP/err")"
finish
