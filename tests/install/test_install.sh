#!/usr/bin/env bash
# loom as an installed library: `cmake --install` into a temporary prefix,
# then the examples built against that prefix as a user would build them,
# with pkg-config and with a CMake project using find_package(loom), and run.
#   $1 build folder   $2 source folder   $3 C compiler
#   $4 flags for compiling and linking the programs (the sanitizers of a
#      sanitized build, whose libloom needs their runtime)   $5 shared data folder
set -u
BUILD="$1" SRC="$2" CC="$3" FLAGS="$4"
SHARED="${LOOM_SHARED_DIR:-$5}"
S260="$SHARED/models/stories260K"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PREFIX="$TMP/prefix"
FAILS=0
PASSES=0
pass() { PASSES=$((PASSES + 1)); echo "ok   $1"; }
fail() { FAILS=$((FAILS + 1)); echo "FAIL $1" >&2; }
finish() {
    echo "$PASSES passed, $FAILS failed"
    [ "$FAILS" -eq 0 ] && [ "$PASSES" -gt 0 ]
    exit $?
}
# run NAME CMD...: CMD must succeed; its output is kept in $TMP/out
run() {
    local name="$1"; shift
    if "$@" >"$TMP/out" 2>&1; then pass "$name"; else fail "$name: $(tail -c 1500 "$TMP/out")"; return 1; fi
}

if ! cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1; then
    fail "cmake --install: $(tail -20 "$TMP/install.log")"
    finish
fi
pass "cmake --install --prefix"

# What is installed: the public headers only, the libraries, loom.pc, the CMake package, the CLI.
headers=$(cd "$PREFIX/include" && ls)
[ "$headers" = "$(printf 'loom.h\nloom_engine.h\nloom_ops.h')" ] && pass "include/ holds loom.h, loom_engine.h and loom_ops.h only" \
    || fail "installed headers: $headers"
so=$(readlink "$PREFIX/lib/libloom.so")
soname=$(objdump -p "$PREFIX/lib/libloom.so" | awk '$1 == "SONAME" {print $2}')
[ -f "$PREFIX/lib/libloom.a" ] && [ -n "$soname" ] && [ "$so" = "$soname" ] && [ -f "$PREFIX/lib/$soname" ] \
    && pass "libloom.a, and libloom.so -> $soname (the soname)" || fail "libraries: so '$so', soname '$soname'"
for f in lib/pkgconfig/loom.pc lib/cmake/loom/loomConfig.cmake lib/cmake/loom/loomConfigVersion.cmake bin/loom; do
    [ -f "$PREFIX/$f" ] || fail "missing $f"
done
"$PREFIX/bin/loom" --version >"$TMP/out" 2>&1 && grep -q "^loom [0-9]" "$TMP/out" \
    && pass "the installed loom CLI runs" || fail "installed loom --version: $(cat "$TMP/out")"

# The ABI: libloom.so exports the public functions (loom_*) and nothing else
# (sanitizer builds add the instrumentation's own __asan/__ubsan symbols).
nm -D --defined-only "$PREFIX/lib/libloom.so" | awk '{print $NF}' \
    | grep -v -E '^(loom_|__(odr_)?asan|___asan|__ubsan|__sanitizer)' >"$TMP/foreign"
n_exported=$(nm -D --defined-only "$PREFIX/lib/libloom.so" | grep -c ' loom_')
if [ -s "$TMP/foreign" ]; then fail "libloom.so exports non-loom symbols: $(head -5 "$TMP/foreign" | tr '\n' ' ')"
elif [ "$n_exported" -lt 100 ]; then fail "libloom.so exports only $n_exported loom_ symbols"
else pass "libloom.so exports $n_exported loom_* symbols and nothing else"; fi
# every function the headers name is exported, and every export is named there
cat "$PREFIX/include/loom.h" "$PREFIX/include/loom_engine.h" "$PREFIX/include/loom_ops.h" | grep -oE '\bloom_[a-z0-9_]+\(' | tr -d '(' \
    | sort -u >"$TMP/declared"
nm -D --defined-only "$PREFIX/lib/libloom.so" | awk '{print $NF}' | grep '^loom_' | sort -u >"$TMP/exported"
if cmp -s "$TMP/declared" "$TMP/exported"; then pass "the exports are the functions the public headers name"
else fail "declared but not exported: $(comm -23 "$TMP/declared" "$TMP/exported" | tr '\n' ' '); exported but not declared: $(comm -13 "$TMP/declared" "$TMP/exported" | tr '\n' ' ')"; fi
nm -D --defined-only "$PREFIX/lib/libloom.so" | grep -q " loom_set_error\$" \
    && fail "libloom.so exports the internal loom_set_error"

# The headers stand alone: C99 and C11, all warnings.
printf '#include <loom.h>\n#include <loom_ops.h>\nint main(void) { return loom_version()[0] ? 0 : 1; }\n' >"$TMP/h.c"
# loom_engine.h first: it brings loom.h with it
printf '#include <loom_engine.h>\nint main(void) { loom_engine_params p = loom_engine_default_params(); return p.n_seq_max < 0; }\n' >"$TMP/e.c"
for std in c99 c11; do
    run "headers compile alone (-std=$std -Wall -Wextra -Werror)" \
        $CC -std=$std -Wall -Wextra -Werror -I"$PREFIX/include" -c "$TMP/h.c" -o "$TMP/h.o"
    run "loom_engine.h compiles alone (-std=$std)" \
        $CC -std=$std -Wall -Wextra -Werror -I"$PREFIX/include" -c "$TMP/e.c" -o "$TMP/e.o"
done

# 1. pkg-config.
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
if run "pkg-config --modversion loom" pkg-config --modversion loom; then
    grep -q "^[0-9]" "$TMP/out" || fail "pkg-config version: $(cat "$TMP/out")"
fi
libs_static=$(pkg-config --static --libs loom)
for l in -lloom -lcjson -lyaml -lm -pthread; do
    case " $libs_static " in *" $l "*) ;; *) fail "pkg-config --static --libs lacks $l: $libs_static" ;; esac
done
# shellcheck disable=SC2046,SC2086
if run "pkg-config: build examples/fused_op.c" \
    $CC $FLAGS -o "$TMP/fused_op_pc" "$SRC/examples/fused_op.c" $(pkg-config --cflags --libs loom) -lm \
        -Wl,-rpath,"$PREFIX/lib"; then
    run "pkg-config: fused_op runs (against the installed libloom.so)" "$TMP/fused_op_pc"
    ldd "$TMP/fused_op_pc" | grep -q "$PREFIX/lib/libloom.so" || fail "fused_op_pc does not use $PREFIX/lib"
fi

# shellcheck disable=SC2046,SC2086
if run "pkg-config --static: build examples/fused_op.c against libloom.a" \
    $CC $FLAGS -o "$TMP/fused_op_pc_static" "$SRC/examples/fused_op.c" $(pkg-config --cflags loom) \
        $(pkg-config --static --libs loom | sed 's/-lloom /-l:libloom.a /'); then
    ldd "$TMP/fused_op_pc_static" | grep -q libloom && fail "fused_op_pc_static links libloom.so"
    run "pkg-config --static: fused_op runs" "$TMP/fused_op_pc_static"
fi

# 2. CMake: find_package(loom), loom::loom (shared) and loom::loom_static.
mkdir -p "$TMP/proj"
cat >"$TMP/proj/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.20)
project(uses_loom C)
find_package(loom REQUIRED)
add_executable(fused_op "$SRC/examples/fused_op.c")
target_link_libraries(fused_op loom::loom m)
add_executable(generate "$SRC/examples/generate.c")
target_link_libraries(generate loom::loom)
add_executable(generate_static "$SRC/examples/generate.c")
target_link_libraries(generate_static loom::loom_static)
EOF
if run "cmake: configure a project with find_package(loom)" \
    cmake -S "$TMP/proj" -B "$TMP/proj/build" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
        -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" -DCMAKE_BUILD_TYPE=Release &&
    run "cmake: build against loom::loom and loom::loom_static" cmake --build "$TMP/proj/build"; then
    run "cmake: fused_op runs" "$TMP/proj/build/fused_op"
    ldd "$TMP/proj/build/generate_static" | grep -q libloom && fail "generate_static links libloom.so"
    # 3. generate.c on stories260K: greedy text as llama2.c's run.c prints it.
    if [ -f "$S260/stories260K.bin" ] && [ -f "$S260/tok512.bin" ]; then
        g="$SRC/tests/golden/stories260K_prompt_1.txt"
        tail -n +3 "$g" | sed -e 's/[[:space:]]*$//' >"$TMP/expect"
        for prog in generate generate_static; do
            if "$TMP/proj/build/$prog" "$S260/stories260K.bin" "$S260/tok512.bin" "$(sed -n 1p "$g")" \
                "$(sed -n 2p "$g")" >"$TMP/gen" 2>"$TMP/err" &&
                diff "$TMP/expect" <(sed -e 's/[[:space:]]*$//' "$TMP/gen") >"$TMP/diff"; then
                pass "cmake: $prog writes llama2.c's greedy text for stories260K"
            else
                fail "$prog: $(cat "$TMP/err") $(head -5 "$TMP/diff")"
            fi
        done
    elif [ -n "${CI:-}" ]; then
        fail "shared models missing under $SHARED/models (CI must have them)"
    else
        echo "SKIP: generate on stories260K: shared models missing under $SHARED/models" >&2
    fi
fi
finish
