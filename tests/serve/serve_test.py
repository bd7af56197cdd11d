"""loom serve end to end, with the official `openai` client (a test-only
dependency in the repository's .venv, installed by scripts/setup.sh).

    serve_test.py api  LOOM MODELS_DIR   endpoints, streaming, embeddings, errors, metrics
    serve_test.py load LOOM MODELS_DIR   32 concurrent clients vs alone, disconnects,
                                         the queue limit, timeouts, SIGTERM

Every server binds 127.0.0.1 on a free port (--port 0) and is killed when the
test ends, whatever happens; loads are bounded in count and time."""
import asyncio
import base64
import http.client
import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time

from openai import AsyncOpenAI, OpenAI
import openai

# a sanitizer build (serve_lib.sh sets it) runs ~10x slower: shorter generations, longer limits
SLOW = os.environ.get("LOOM_SERVE_TEST_SLOW") == "1"
LLM = "SmolLM2-135M-Instruct.Q4_1"
BERT = "all-MiniLM-L6-v2"
KEY = "test-key-123"
SERVERS = []
PASSES, FAILS = 0, 0


def ok(name):
    global PASSES
    PASSES += 1
    print("ok   " + name, flush=True)


def fail(name, why):
    global FAILS
    FAILS += 1
    print("FAIL %s: %s" % (name, why), file=sys.stderr, flush=True)


def check(name, cond, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why)
    return cond


class Server:
    """loom serve on 127.0.0.1, a free port; its stderr kept in self.log."""

    def __init__(self, loom, args):
        self.proc = subprocess.Popen([loom, "serve", "--host", "127.0.0.1", "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        SERVERS.append(self)
        self.log = []
        self.port = None
        deadline = time.time() + 30
        while self.port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            raise RuntimeError("loom serve did not start: " + "".join(self.log))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def url(self):
        return "http://127.0.0.1:%d/v1" % self.port

    def wait_ready(self, timeout=180):
        deadline = time.time() + timeout
        saw_503 = False
        while time.time() < deadline:
            try:
                st, _, _ = request(self, "GET", "/health")
                if st == 200:
                    return saw_503
                saw_503 = saw_503 or st == 503
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("loom serve exited: " + "".join(self.log))
            time.sleep(0.05)
        raise RuntimeError("loom serve not ready in %d s" % timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def request(srv, method, path, body=None, headers=None, timeout=60):
    """A raw HTTP request: (status, headers, parsed JSON or text)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        raw = r.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return r.status, dict(r.getheaders()), parsed
    finally:
        c.close()


def auth(extra=None):
    h = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    h.update(extra or {})
    return h


def metrics(srv, key=KEY):
    st, _, text = request(srv, "GET", "/metrics", headers={"Authorization": "Bearer " + key} if key else {})
    vals = {}
    for line in text.splitlines() if st == 200 else []:
        if line and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            vals[name] = float(v)
    return vals


def is_error(body, status, code=None, param=None):
    e = body.get("error") if isinstance(body, dict) else None
    return (isinstance(e, dict) and set(e) >= {"message", "type", "param", "code"} and e["message"]
            and (code is None or e["code"] == code) and (param is None or e["param"] == param))


# ------------------------------------------------------------------ api

def test_api(loom, mdir):
    llm, bert = os.path.join(mdir, LLM + ".gguf"), os.path.join(mdir, BERT)
    srv = Server(loom, ["-m", llm, "--embed-model", bert, "-t", "2", "-np", "4", "--api-key", KEY,
                        "--max-body", "65536", "--quiet"])
    saw_loading = srv.wait_ready()
    ok("listens before loading; /health 200 once loaded (503 seen while loading: %s)" % saw_loading)
    client = OpenAI(base_url=srv.url(), api_key=KEY, max_retries=0, timeout=120)

    ids = sorted(m.id for m in client.models.list().data)
    check("/v1/models lists both ids", ids == sorted([LLM, BERT]), ids)

    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name three colours."}]
    for temp, seed in ((0.0, None), (0.8, 1234)):
        extra = {} if seed is None else {"seed": seed}
        plain = client.chat.completions.create(model=LLM, messages=msgs, max_tokens=24, temperature=temp, **extra)
        chunks = list(client.chat.completions.create(model=LLM, messages=msgs, max_tokens=24, temperature=temp,
                                                     stream=True, stream_options={"include_usage": True}, **extra))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        usage = [c.usage for c in chunks if c.usage]
        c0 = plain.choices[0]
        check("chat temp %g: plain text == streamed text" % temp, c0.message.content == text,
              "%r vs %r" % (c0.message.content, text))
        check("chat temp %g: finish_reason, usage, id, model" % temp,
              c0.finish_reason in ("stop", "length") and finish == [c0.finish_reason] and
              plain.usage.completion_tokens <= 24 and plain.usage.prompt_tokens > 10 and
              plain.id.startswith("chatcmpl-") and plain.model == LLM and plain.object == "chat.completion" and
              plain.created > 1e9 and len(usage) == 1 and usage[0].completion_tokens == plain.usage.completion_tokens,
              "%s %s %s" % (plain, finish, usage))
        check("chat temp %g: role in the first chunk, [DONE] parsed" % temp,
              chunks[0].choices[0].delta.role == "assistant" and chunks[-1].usage is not None, chunks[0])

    # completions: greedy equals `loom run`; token-id prompts equal text prompts
    prompt = "The capital of France is"
    comp = client.completions.create(model=LLM, prompt=prompt, max_tokens=12, temperature=0)
    run = subprocess.run([loom, "run", "-m", llm, "-p", prompt, "-n", "12", "--temp", "0", "-t", "2"],
                         capture_output=True, text=True, timeout=120).stdout
    check("completions: greedy text equals loom run's", run.startswith(prompt) and run[len(prompt):].rstrip("\n") ==
          comp.choices[0].text, "%r vs %r" % (comp.choices[0].text, run))
    check("completions: object, id, usage", comp.object == "text_completion" and comp.id.startswith("cmpl-") and
          comp.usage.completion_tokens == 12 and comp.choices[0].finish_reason == "length", comp)
    st, _, tk = request(srv, "POST", "/tokenize", {"content": prompt}, auth())
    comp_ids = client.completions.create(model=LLM, prompt=tk["tokens"], max_tokens=12, temperature=0)
    check("completions: a prompt of token ids gives the same text", st == 200 and
          comp_ids.choices[0].text == comp.choices[0].text, "%s %r" % (tk, comp_ids.choices[0].text))
    st, _, dt = request(srv, "POST", "/detokenize", {"tokens": tk["tokens"]}, auth())
    check("/tokenize and /detokenize round trip", st == 200 and dt == {"content": prompt}, dt)
    st, _, tp = request(srv, "POST", "/tokenize", {"content": "hello world", "with_pieces": True}, auth())
    check("/tokenize with_pieces", st == 200 and "".join(t["piece"] for t in tp["tokens"]) == "hello world", tp)
    clp = client.completions.create(model=LLM, prompt=prompt, max_tokens=5, temperature=0, logprobs=2)
    lp = clp.choices[0].logprobs
    check("completions logprobs", len(lp.tokens) == 5 and len(lp.token_logprobs) == 5 and
          all(len(t) >= 1 for t in lp.top_logprobs) and all(v <= 0 for v in lp.token_logprobs), lp)

    # chat logprobs: greedy picks the most likely token
    r = client.chat.completions.create(model=LLM, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    check("chat logprobs: one per token, 3 alternatives, greedy = top 1",
          len(content) == r.usage.completion_tokens and all(len(c.top_logprobs) == 3 for c in content) and
          all(abs(c.logprob - c.top_logprobs[0].logprob) < 1e-6 for c in content) and
          "".join(c.token for c in content) == r.choices[0].message.content, content[:2])

    # stop strings are cut
    full = client.completions.create(model=LLM, prompt=prompt, max_tokens=12, temperature=0).choices[0].text
    word = full.split()[1] if len(full.split()) > 1 else full.strip()
    cut = client.completions.create(model=LLM, prompt=prompt, max_tokens=12, temperature=0, stop=[word])
    check("stop: the text ends before the stop string", cut.choices[0].finish_reason == "stop" and
          word not in cut.choices[0].text and full.startswith(cut.choices[0].text), (full, word, cut.choices[0].text))

    # embeddings against `loom embed`
    texts = ["The cat sits on the mat.", "A quick brown fox", "loom serves embeddings", "x"]
    emb = client.embeddings.create(model=BERT, input=texts)  # the client asks for base64 by default
    embf = client.embeddings.create(model=BERT, input=texts[0], encoding_format="float")
    ref = json.loads(subprocess.run([loom, "embed", "-m", bert, "-t", "2"], input="\n".join(texts) + "\n",
                                    capture_output=True, text=True, timeout=120).stdout)

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    cs = [cos(e.embedding, r) for e, r in zip(emb.data, ref)]
    check("embeddings: cosine >= 0.9999 against loom embed", len(cs) == 4 and min(cs) >= 0.9999 and
          cos(embf.data[0].embedding, ref[0]) >= 0.9999 and emb.usage.prompt_tokens > 4, cs)
    check("embeddings: model, indices, dimension", emb.model == BERT and [d.index for d in emb.data] == [0, 1, 2, 3]
          and len(emb.data[0].embedding) == 384, emb.model)
    before = metrics(srv)

    async def many():
        ac = AsyncOpenAI(base_url=srv.url(), api_key=KEY, max_retries=0, timeout=120)
        rs = await asyncio.gather(*[ac.embeddings.create(model=BERT, input=[t, t + " again"]) for t in texts * 4])
        await ac.close()
        return rs
    rs = asyncio.run(many())
    after = metrics(srv)
    batches = after["loom_embedding_batches_total"] - before["loom_embedding_batches_total"]
    check("embeddings: 16 concurrent requests share encoder calls", len(rs) == 16 and batches < 16 and
          all(len(r.data) == 2 for r in rs), "%d calls" % batches)

    # errors, each class, in OpenAI's shape
    def expect_exc(name, exc, fn, code=None, param=None):
        try:
            fn()
            fail(name, "no error")
        except exc as e:
            body = e.body if isinstance(e.body, dict) else {}
            body = body.get("error", body)
            check(name, (code is None or body.get("code") == code) and (param is None or body.get("param") == param),
                  body)
    expect_exc("400 temperature out of range (named)", openai.BadRequestError,
               lambda: client.chat.completions.create(model=LLM, messages=msgs, temperature=5), param="temperature")
    expect_exc("400 bad message role (named)", openai.BadRequestError,
               lambda: client.chat.completions.create(model=LLM, messages=[{"role": "tool", "content": "x"}]),
               param="messages[0].role")
    expect_exc("401 wrong API key", openai.AuthenticationError,
               lambda: OpenAI(base_url=srv.url(), api_key="wrong", max_retries=0).models.list())
    expect_exc("404 model_not_found (chat)", openai.NotFoundError,
               lambda: client.chat.completions.create(model="gpt-4", messages=msgs), code="model_not_found")
    expect_exc("404 model_not_found (embeddings asked of the chat model)", openai.NotFoundError,
               lambda: client.embeddings.create(model=LLM, input="x"), code="model_not_found")
    expect_exc("400 context length exceeded", openai.BadRequestError,
               lambda: client.completions.create(model=LLM, prompt="hello " * 5000, max_tokens=1),
               code="context_length_exceeded")
    raw = [
        ("400 invalid JSON", "POST", "/v1/chat/completions", b"{not json", 400, "invalid_json"),
        ("400 body not an object", "POST", "/v1/completions", b"[1]", 400, "invalid_json"),
        ("400 embeddings without input", "POST", "/v1/embeddings", b"{}", 400, "missing_required_parameter"),
        ("400 detokenize out of vocabulary", "POST", "/detokenize", b'{"tokens": [99999999]}', 400, "invalid_value"),
        ("404 unknown route", "GET", "/v2/nothing", None, 404, "not_found"),
        ("405 GET on a POST endpoint", "GET", "/v1/chat/completions", None, 405, "method_not_allowed"),
        ("405 POST on a GET endpoint", "POST", "/v1/models", b"{}", 405, "method_not_allowed"),
        ("413 body over --max-body", "POST", "/v1/completions", b'{"prompt": "' + b"a" * 70000 + b'"}', 413,
         "request_too_large"),
    ]
    for name, method, path, body, status, code in raw:
        st, hd, b = request(srv, method, path, body, auth())
        check(name, st == status and is_error(b, status, code), "%d %s" % (st, b))
    st, hd, b = request(srv, "GET", "/v1/models")
    check("401 without a key (and WWW-Authenticate)", st == 401 and is_error(b, 401) and "WWW-Authenticate" in hd, b)
    st, _, b = request(srv, "GET", "/health")
    check("/health needs no key", st == 200 and b == {"status": "ok"}, b)
    st, _, b = request(srv, "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]',
                        auth())
    check("no file paths in errors", st == 400 and "/" not in b["error"]["message"], b)

    m = metrics(srv)
    need = ['loom_requests_total{endpoint="/v1/chat/completions",status="200"}',
            'loom_requests_total{endpoint="/v1/chat/completions",status="400"}',
            'loom_requests_total{endpoint="/v1/completions",status="413"}',
            "loom_kv_blocks_used", "loom_kv_blocks_free", "loom_queue_depth", "loom_running_sequences",
            "loom_prefix_cache_hit_rate", 'loom_time_to_first_token_seconds_bucket{le="+Inf"}',
            'loom_inter_token_latency_seconds_bucket{le="+Inf"}', 'loom_step_layer_kernels{layer="L0"}',
            'loom_step_layer_bytes_read{layer="L0"}', 'loom_step_layer_bytes_written{layer="L29"}',
            "loom_generation_tokens_total", "loom_prompt_tokens_total"]
    missing = [k for k in need if k not in m]
    check("/metrics: counters, gauges, histograms, per-layer kernels and bytes", not missing and
          m['loom_step_layer_bytes_read{layer="L0"}'] > 0 and m["loom_prefix_cache_hit_rate"] > 0 and
          m['loom_time_to_first_token_seconds_bucket{le="+Inf"}'] >= 8, missing or m)
    srv.proc.send_signal(signal.SIGTERM)
    check("SIGTERM when idle: exit 0", srv.proc.wait(timeout=30) == 0, srv.log[-3:])


# ------------------------------------------------------------------ load

PROMPTS = ["Write a haiku about the sea.", "What is 2 + 2?", "Name a fruit.", "Say hello in French.",
           "Describe a cat in one sentence.", "Give me a word that rhymes with light.", "What colour is the sky?",
           "Tell me a fun fact about space."]


def wait_idle(srv, seconds=20):
    """/metrics once no request is in flight (a cancelled one ends at the engine's next step)."""
    deadline = time.time() + seconds
    while True:
        m = metrics(srv, None)
        if m.get("loom_requests_in_flight", 1) == 0 or time.time() > deadline:
            return m
        time.sleep(0.05)


def test_load(loom, mdir, n_clients):
    llm = os.path.join(mdir, LLM + ".gguf")
    srv = Server(loom, ["-m", llm, "-t", "2", "-np", "8", "--batch-invariant", "--max-queue", "64", "--quiet"])
    srv.wait_ready()
    client = OpenAI(base_url=srv.url(), api_key="none", max_retries=0, timeout=300)

    def ask(i):
        return dict(model=LLM, messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + " (%d)" % i}],
                    max_tokens=4 if SLOW else 12, temperature=0.9, top_p=0.95, seed=1000 + i)
    t0 = time.time()
    alone = [client.chat.completions.create(**ask(i)).choices[0].message.content for i in range(n_clients)]
    t_alone = time.time() - t0

    async def together():
        ac = AsyncOpenAI(base_url=srv.url(), api_key="none", max_retries=0, timeout=300)

        async def one(i):
            if i % 2:  # half of them streamed
                s = await ac.chat.completions.create(stream=True, **ask(i))
                return "".join([c.choices[0].delta.content or "" async for c in s if c.choices])
            return (await ac.chat.completions.create(**ask(i))).choices[0].message.content
        rs = await asyncio.gather(*[one(i) for i in range(n_clients)])
        await ac.close()
        return rs
    t0 = time.time()
    both = asyncio.run(together())
    t_both = time.time() - t0
    diff = [i for i in range(n_clients) if alone[i] != both[i]]
    check("%d concurrent clients, seeded sampling: each gets what it gets alone (%.1f s alone, %.1f s together)" %
          (n_clients, t_alone, t_both), not diff, [(alone[i], both[i]) for i in diff[:3]])

    # a client that disconnects mid-stream: its request is cancelled and its KV blocks freed
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 4000,
                                                     "ignore_eos": True, "stream": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    got = b""
    while got.count(b"data: ") < 4:
        got += r.read1(4096)
    busy = metrics(srv, None)
    c.sock.shutdown(2)
    c.close()
    deadline, freed = time.time() + 10, None
    while time.time() < deadline:
        m = metrics(srv, None)
        if m["loom_kv_blocks_used"] == 0 and m["loom_requests_in_flight"] == 0:
            freed = m
            break
        time.sleep(0.05)
    check("disconnect mid-stream frees the KV blocks (visible in /metrics)",
          busy["loom_kv_blocks_used"] > 0 and freed is not None and freed["loom_client_disconnects_total"] >= 1,
          "busy %s, after %s" % (busy.get("loom_kv_blocks_used"), freed))
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(timeout=30)

    # the queue limit: 1 running + 1 waiting; the others get 429 with Retry-After, and the server stays healthy
    timeout = 20 if SLOW else 10
    # -c 8192 (the model's trained context): the timeout request below may run to 8191 tokens, far past
    # the timeout even on a fast host (a 2-core Zen 4 made 1024 tokens, the default -c, in 3.9 s)
    srv = Server(loom, ["-m", llm, "-t", "2", "-np", "1", "-c", "8192", "--max-queue", "1", "--timeout", str(timeout),
                        "--quiet"])
    srv.wait_ready()
    results = []

    def post(i):  # (long enough that all six arrive while the first two run, on a fast host too)
        results.append(request(srv, "POST", "/v1/completions", {"prompt": "Once upon a time %d" % i,
                                                                "max_tokens": 24 if SLOW else 48,
                                                                "ignore_eos": True}))
    threads = [threading.Thread(target=post, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    codes = sorted(st for st, _, _ in results)
    r429 = [(h, b) for st, h, b in results if st == 429]
    check("queue limit: 429 with Retry-After beyond --parallel + --max-queue", codes.count(200) >= 2 and r429 and
          all(h.get("Retry-After") and is_error(b, 429, "queue_full") for h, b in r429), codes)
    wait_idle(srv)
    st, _, _ = request(srv, "GET", "/health")
    st2, _, b = request(srv, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 4})
    check("after the 429s the server is healthy and answers", st == 200 and st2 == 200, b)
    # the per-request timeout: a request that would run far longer gets 504
    t0 = time.time()
    st, _, b = request(srv, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 100000, "ignore_eos": True})
    check("--timeout: 504 in OpenAI's shape, on time", st == 504 and is_error(b, 504, "timeout") and
          time.time() - t0 < timeout + 6, "%d %s after %.1f s" % (st, b, time.time() - t0))
    m = wait_idle(srv)
    check("after the timeout the request's blocks are free", m["loom_kv_blocks_used"] == 0 and
          m["loom_request_timeouts_total"] >= 1, m["loom_kv_blocks_used"])
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(timeout=30)

    # SIGTERM drains: in-flight requests finish, then the server exits 0 and stops accepting
    srv = Server(loom, ["-m", llm, "-t", "2", "-np", "4", "--grace", "60" if SLOW else "20"])
    srv.wait_ready()
    done = []

    def stream(i):
        cl = OpenAI(base_url=srv.url(), api_key="none", max_retries=0, timeout=120)
        # (a sanitizer build at the AVX2 level makes ~3.6 tokens/s a stream with three: 200 tokens
        # would outlast the grace period there)
        s = cl.completions.create(model=LLM, prompt="Once upon a time %d" % i, max_tokens=40 if SLOW else 200,
                                  stream=True, extra_body={"ignore_eos": True})
        chunks = [c for c in s]
        done.append((len(chunks), chunks[-1].choices[0].finish_reason if chunks and chunks[-1].choices else None))
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.time() + 30  # all three admitted (a client may take a while to connect) and generating
    while time.time() < deadline and (metrics(srv, None).get("loom_requests_in_flight", 0) < 3 or
                                      metrics(srv, None).get("loom_generation_tokens_total", 0) < 3):
        time.sleep(0.02)
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(90)
    rc = srv.proc.wait(timeout=90)
    check("SIGTERM: in-flight streams finish, then exit 0", rc == 0 and len(done) == 3 and
          all(f == "length" for _, f in done), "rc %s, %s, %s" % (rc, done, srv.log[-4:]))
    refused = False
    try:
        request(srv, "GET", "/health", timeout=5)
    except OSError:
        refused = True
    check("SIGTERM: no longer accepting", refused)

    # SIGTERM with a grace period too short: the rest is cancelled, still exit 0
    srv = Server(loom, ["-m", llm, "-t", "2", "-np", "2", "-c", "8192", "--grace", "1"])  # (-c: as for --timeout)
    srv.wait_ready()
    box = []

    def long_one():
        box.append(request(srv, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 100000,
                                                            "ignore_eos": True}, timeout=60))
    t = threading.Thread(target=long_one)
    t.start()
    while time.time() < deadline + 30 and metrics(srv, None).get("loom_generation_tokens_total", 0) < 2:
        time.sleep(0.02)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc = srv.proc.wait(timeout=30)
    t.join(30)
    check("SIGTERM past the grace period: cancelled (503), exit 0 promptly", rc == 0 and time.time() - t0 < 10 and
          box and box[0][0] == 503 and is_error(box[0][2], 503, "shutting_down"), "rc %s %s" % (rc, box))


def main():
    mode, loom, mdir = sys.argv[1:4]
    n_clients = int(os.environ.get("LOOM_SERVE_TEST_CLIENTS", "32"))

    def stop(sig, frame):  # ctest's timeout, Ctrl-C, the alarm: the finally below kills the servers
        raise SystemExit("stopped by signal %d" % sig)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, stop)
    signal.alarm(int(os.environ.get("LOOM_SERVE_TEST_LIMIT_S", "900")))
    try:
        (test_api if mode == "api" else lambda a, b: test_load(a, b, n_clients))(loom, mdir)
    except Exception as e:  # noqa: BLE001 - a broken test is a failure with its log
        import traceback
        traceback.print_exc()
        fail("%s test aborted" % mode, repr(e))
        for s in SERVERS:
            print("".join(s.log[-20:]), file=sys.stderr)
    finally:
        for s in SERVERS:
            s.kill()
    print("%d passed, %d failed" % (PASSES, FAILS))
    sys.exit(0 if FAILS == 0 and PASSES > 0 else 1)


if __name__ == "__main__":
    main()
