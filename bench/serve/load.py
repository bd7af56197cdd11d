"""A load generator for OpenAI-compatible servers (the official openai client
with asyncio): N concurrent clients stream chat completions of mixed prompt
lengths; prints output tokens/s, time to first token and inter-token latency
(p50, p99) as one JSON line.

    load.py BASE_URL MODEL --clients N --requests R [--max-tokens T] [--seed S]

Every request is greedy with ignore_eos and max_tokens T, so that each server
generates the same number of tokens; a token is a streamed chunk with text."""
import argparse
import asyncio
import json
import random
import statistics
import time

from openai import AsyncOpenAI

TOPICS = ["the history of bridges", "how bees make honey", "the rules of chess", "why the sky is blue",
          "a day in a lighthouse", "the water cycle", "how trains run on time", "the life of a tree",
          "volcanoes", "the first computers", "a recipe for bread", "the planets of the solar system"]
FILLER = ("Please be thorough and precise, give examples, and explain each step so that a curious reader "
          "who knows nothing about the subject can follow along. ")


def prompts(n, seed):
    """Chat messages of mixed lengths: short (~15 tokens), medium (~120) and long (~450)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 3
        text = "Tell me about %s." % TOPICS[rng.randrange(len(TOPICS))]
        if kind == 1:
            text += " " + FILLER * 4
        elif kind == 2:
            text += " " + FILLER * 16
        out.append([{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": text}])
    return out


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


async def run(args):
    client = AsyncOpenAI(base_url=args.base_url, api_key="none", max_retries=0, timeout=600)
    queue = asyncio.Queue()
    for m in prompts(args.requests, args.seed):
        queue.put_nowait(m)
    ttft, itl, tokens, errors, first_error = [], [], [0], [0], []

    async def worker():
        while not queue.empty():
            msgs = queue.get_nowait()
            t0 = time.perf_counter()
            last = None
            try:
                stream = await client.chat.completions.create(
                    model=args.model, messages=msgs, max_tokens=args.max_tokens, temperature=0, stream=True,
                    extra_body={"ignore_eos": True})
                async for chunk in stream:
                    if not chunk.choices or not chunk.choices[0].delta.content:
                        continue
                    now = time.perf_counter()
                    if last is None:
                        ttft.append(now - t0)
                    else:
                        itl.append(now - last)
                    last = now
                    tokens[0] += 1
            except Exception as e:  # noqa: BLE001 - counted, the run goes on
                errors[0] += 1
                if not first_error:
                    first_error.append("%s: %s" % (type(e).__name__, str(e)[:200]))
    # one request first: warms both servers the same way (not measured)
    warm = await client.chat.completions.create(model=args.model, messages=prompts(1, 0)[0], max_tokens=8,
                                                temperature=0)
    assert warm.choices
    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(args.clients)])
    wall = time.perf_counter() - t0
    await client.close()
    print(json.dumps({"clients": args.clients, "requests": args.requests, "errors": errors[0],
                      "output_tokens": tokens[0], "wall_s": round(wall, 3),
                      "output_tok_s": round(tokens[0] / wall, 2),
                      "ttft_p50_ms": round(1e3 * pct(ttft, 50), 1), "ttft_p99_ms": round(1e3 * pct(ttft, 99), 1),
                      "itl_p50_ms": round(1e3 * pct(itl, 50), 2), "itl_p99_ms": round(1e3 * pct(itl, 99), 2),
                      "itl_mean_ms": round(1e3 * statistics.mean(itl), 2) if itl else None,
                      "first_error": first_error[0] if first_error else None}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=7)
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
