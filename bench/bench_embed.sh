#!/usr/bin/env bash
# Sentence embedding throughput of `loom embed` (all-MiniLM-L6-v2) against
# sentence-transformers (torch, CPU) on the same generated lines, same thread
# counts, median of REPS runs each, interleaved. The peer is timed in-process
# (model load excluded); loom is timed as a whole process, load included, so
# the ratio is conservative for loom.
#   bench/bench_embed.sh [LOOM] [MODEL_DIR] [PYTHON_WITH_SENTENCE_TRANSFORMERS] [N_LINES] [REPS]
# Without a Python that has sentence_transformers the peer columns are "-".
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
LOOM="${1:-$here/build/loom}"
MODEL="${2:-${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}/all-MiniLM-L6-v2}"
PY="${3:-python3}"
N="${4:-256}"
REPS="${5:-5}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$N" >"$tmp/lines.txt" <<'PYEOF'
import random, sys
random.seed(1)
words = ("the quick brown fox jumps over lazy dog a man is eating food in the park with his friends "
         "today while it rains embeddings compare sentences by meaning").split()
for _ in range(int(sys.argv[1])):
    print(" ".join(random.choice(words) for _ in range(random.randint(5, 40))))
PYEOF
peer=0
"$PY" -c "import sentence_transformers" 2>/dev/null && peer=1
cat >"$tmp/peer.py" <<'PYEOF'
import sys, time, torch
from sentence_transformers import SentenceTransformer
torch.set_num_threads(int(sys.argv[3]))
lines = [l.rstrip("\n") for l in open(sys.argv[2])]
m = SentenceTransformer(sys.argv[1], device="cpu")
m.encode(lines[:8])
t = time.perf_counter()
m.encode(lines, batch_size=64)
print(time.perf_counter() - t)
PYEOF
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "| threads | lines | loom s (median) | loom lines/s | sentence-transformers s (median) | ST lines/s | loom / ST speed |"
echo "|---|---|---|---|---|---|---|"
for t in 1 2; do
    : >"$tmp/loom.$t"; : >"$tmp/peer.$t"
    for r in $(seq 1 "$REPS"); do
        s=$(date +%s.%N); "$LOOM" embed -m "$MODEL" -f "$tmp/lines.txt" --format tsv -t "$t" >/dev/null; e=$(date +%s.%N)
        echo "$e - $s" | bc -l >>"$tmp/loom.$t"
        [ "$peer" = 1 ] && "$PY" "$tmp/peer.py" "$MODEL" "$tmp/lines.txt" "$t" 2>/dev/null >>"$tmp/peer.$t"
    done
    l=$(median <"$tmp/loom.$t")
    if [ "$peer" = 1 ]; then
        p=$(median <"$tmp/peer.$t")
        printf "| %d | %d | %.3f | %.1f | %.3f | %.1f | %.2fx |\n" "$t" "$N" "$l" "$(echo "$N / $l" | bc -l)" "$p" \
            "$(echo "$N / $p" | bc -l)" "$(echo "$p / $l" | bc -l)"
    else
        printf "| %d | %d | %.3f | %.1f | - | - | - |\n" "$t" "$N" "$l" "$(echo "$N / $l" | bc -l)"
    fi
done
