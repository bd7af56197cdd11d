#!/usr/bin/env bash
# loom chat and Ctrl-C, typed into a pseudo-terminal (the line discipline
# sends SIGINT): during a reply it stops the reply and the conversation goes
# on; at the prompt it quits (exit status 130); twice in quick succession
# during a reply it quits. SmolLM2 writes replies long enough to interrupt.
source "$(dirname "$0")/lib.sh" "$@"
MDIR="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}"
M="$MDIR/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$M" ]; then
    if [ -n "${CI:-}" ]; then
        echo "FAIL: $M missing (CI runs scripts/fetch-models.sh through scripts/setup.sh)" >&2
        exit 1
    fi
    echo "SKIP: $M missing (run scripts/fetch-models.sh)" >&2
    exit 77
fi
python3 - "$LOOM" "$M" >"$TMP/log" 2>&1 <<'PY'
import os, pty, select, sys, time

loom, model = sys.argv[1], sys.argv[2]
ARGS = [loom, "chat", "-m", model, "--temp", "0", "-n", "3000", "-c", "4096"]
STORY = b"Write a very long story about a dragon and a knight, with many chapters.\n"

def spawn():
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(loom, ARGS)
    return pid, fd

def read_until(fd, buf, pred, timeout):
    """Reads the terminal's output into buf until pred(buf) or timeout; returns pred(buf)."""
    end = time.time() + timeout
    while not pred(buf) and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            buf += data
    return pred(buf)

def exit_status(pid, timeout):
    end = time.time() + timeout
    while time.time() < end:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p == pid:
            return os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
        time.sleep(0.1)
    return None

fails = 0
def check(ok, name, buf=b""):
    global fails
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + buf[-600:].decode("utf-8", "replace")))
    fails += not ok

# 1. Ctrl-C during a reply stops it; the program goes on; Ctrl-C at the prompt quits
pid, fd = spawn()
buf = bytearray()
check(read_until(fd, buf, lambda b: b"> " in b, 120), "banner and prompt", buf)
os.write(fd, STORY)
start = len(buf)
# the echoed line, then at least 40 bytes of reply
check(read_until(fd, buf, lambda b: b"chapters." in b[start:] and len(b) - b.rindex(b"chapters.") > 40, 120),
      "reply streaming", buf)
os.write(fd, b"\x03")
check(read_until(fd, buf, lambda b: b"reply stopped" in b, 60), "Ctrl-C stops the reply", buf)
after = buf.index(b"reply stopped")
check(read_until(fd, buf, lambda b: b"> " in b[after:], 30), "the prompt comes back", buf)
check(exit_status(pid, 0.5) is None, "still running after one Ctrl-C", buf)
mark = len(buf)
os.write(fd, b"Say hello.\n")
def answered(b):
    """The echoed message, a reply of some text, then the next prompt."""
    i = b.find(b"hello.\r\n", mark)
    j = b.find(b"> ", i) if i >= 0 else -1
    return j > 0 and len(bytes(b[i + 8:j]).strip()) > 2
def replying(b):
    """The echoed message and the start of a reply."""
    i = b.find(b"hello.\r\n", mark)
    return i >= 0 and len(bytes(b[i + 8:]).strip()) > 2
check(read_until(fd, buf, replying, 120), "a second message gets a reply", buf)
# A short reply ends at the next prompt. The first reply's length at its Ctrl-C depends on timing,
# and with it the history: some histories make greedy decoding loop for the whole -n (slow on a
# loaded machine), so a reply still running after 30 s is stopped like the first one.
if not read_until(fd, buf, answered, 30):
    os.write(fd, b"\x03")
check(read_until(fd, buf, answered, 60), "a second message is answered (the prompt comes back)", buf)
time.sleep(0.3)
os.write(fd, b"\x03")
st = exit_status(pid, 30)
check(st == 130, "Ctrl-C at the prompt quits with status 130 (got %s)" % st, buf)
os.close(fd)

# 2. two Ctrl-C in quick succession during a reply quit
pid, fd = spawn()
buf = bytearray()
read_until(fd, buf, lambda b: b"> " in b, 120)
os.write(fd, STORY)
start = len(buf)
read_until(fd, buf, lambda b: b"chapters." in b[start:] and len(b) - b.rindex(b"chapters.") > 40, 120)
os.write(fd, b"\x03")
time.sleep(0.05)
os.write(fd, b"\x03")
st = exit_status(pid, 60)
check(st == 130, "two quick Ctrl-C during a reply quit with status 130 (got %s)" % st, buf)
if st is None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
os.close(fd)
sys.exit(1 if fails else 0)
PY
rc=$?
while IFS= read -r line; do
    case "$line" in
        "ok   "*) pass "${line#ok   }" ;;
        "FAIL "*) fail "${line#FAIL }" ;;
        *) echo "$line" ;;
    esac
done <"$TMP/log"
[ $rc -eq 0 ] || fail "the pty driver exited with $rc"
finish
