# shellcheck shell=bash
# Sourced by the bench scripts that compare rule sets (not run).
# rules_without OUT RULE...: configs/fusion/default.yaml with the named rules
# disabled (`enabled: false` after each one's fused_op line) into OUT; exits
# when a name is not found (so a renamed rule cannot pass unnoticed).
rules_without() {
    local out=$1
    shift
    local src names
    src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/configs/fusion/default.yaml"
    names=$(IFS='|'; echo "$*")
    awk -v re="^  - name: ($names)\$" '$0 ~ re {print; getline; print; print "    enabled: false"; next} {print}' \
        "$src" >"$out"
    local want=$(($(grep -c 'enabled: false' "$src") + $#))
    [ "$(grep -c 'enabled: false' "$out")" = "$want" ] \
        || { echo "rules_without: could not disable all of: $*" >&2; exit 1; }
}
