/* loom serve: the OpenAI-compatible HTTP server (src/serve/http, docs/serve.md).
 * The listener starts before the models load (/health answers 503 until they
 * are); SIGTERM or SIGINT stop accepting, let in-flight requests finish within
 * --grace seconds, cancel the rest and exit 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "server.h"

/* The signal thread: SIGTERM / SIGINT (blocked in every other thread) stop the server. */
static void *signal_main(void *arg) {
    serve_server *srv = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int sig = 0;
    if (sigwait(&set, &sig) == 0) {
        fprintf(stderr, "loom serve: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        serve_stop(srv);
    }
    return NULL;
}

int cmd_serve(int argc, char **argv) {
    serve_params p = serve_default_params();
    const char *model = NULL, *kv_dtype = NULL;
    int threads = loom_model_default_params().n_threads, timeout = 600, max_body = 8 << 20, grace = 30;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model, "MODEL",
         "chat model (GGUF, Hugging Face folder, llama2.c) or a BERT folder alone (embeddings only); "
         "default: SmolLM2-135M-Instruct"},
        {"-z", "--tokenizer", ARG_STR, &p.tokenizer, "TOKENIZER", "the chat model's tokenizer (default: its own)"},
        {NULL, "--embed-model", ARG_STR, &p.embed_model, "DIR", "a BERT folder for /v1/embeddings beside -m"},
        {NULL, "--alias", ARG_STR, &p.alias, "NAME", "the model id of -m (default: its file name without extension)"},
        {NULL, "--host", ARG_STR, &p.host, "ADDR", "address to listen on (default 127.0.0.1: this machine only)"},
        {NULL, "--port", ARG_INT, &p.port, "N", "port (default 8080; 0 = any free port, printed)"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads of each model (default: the CPUs loom may run on)"},
        {"-np", "--parallel", ARG_INT, &p.parallel, "N", "sequences that run at once (default 16)"},
        {"-c", "--ctx-size", ARG_INT, &p.n_ctx, "N", "KV positions of all sequences together (default 1024 per --parallel)"},
        {"-b", "--batch-size", ARG_INT, &p.n_batch, "N", "token rows one step may run (default 512)"},
        {NULL, "--kv-dtype", ARG_STR, &kv_dtype, "TYPE", CLI_KV_DTYPE_HELP},
        {NULL, "--batch-invariant", ARG_FLAG, &p.batch_invariant, NULL,
         "a request's output does not depend on what runs with it (seeded sampling reproducible under load)"},
        {NULL, "--chat-template", ARG_STR, &p.chat_template, "NAME",
         "chatml, qwen3, llama2, llama3, mistral, phi3 or gemma (default: the model's own)"},
        {NULL, "--api-key", ARG_STR, &p.api_key, "KEY", "require 'Authorization: Bearer KEY' (all but /health)"},
        {NULL, "--timeout", ARG_INT, &timeout, "S", "seconds a request may take from its arrival (default 600; 0 = none)"},
        {NULL, "--max-queue", ARG_INT, &p.max_queue, "N",
         "requests that may wait beyond the running ones; more get 429 (default 256)"},
        {NULL, "--max-body", ARG_INT, &max_body, "BYTES", "largest request body; larger get 413 (default 8 MiB)"},
        {NULL, "--grace", ARG_INT, &grace, "S", "on SIGTERM: seconds in-flight requests may finish (default 30)"},
        {NULL, "--quiet", ARG_FLAG, &p.quiet, NULL, "no access log on stderr"},
    };
    const char *usage = "[-m MODEL] [--embed-model DIR] [--host ADDR] [--port N] [-t N] [-np N] [-c N] [-b N] "
                        "[--kv-dtype T] [--batch-invariant] [--api-key KEY] [--timeout S] [--max-queue N] "
                        "[--alias NAME] [--max-body BYTES] [--grace S]";
    int r = args_parse("serve", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (threads < 1 || threads > 1024 || p.parallel < 1 || p.parallel > 256 || p.n_ctx < 0 || p.n_batch < 0 ||
        timeout < 0 || p.max_queue < 0 || max_body < 1 || grace < 0) {
        fprintf(stderr, "loom serve: -t must be 1..1024, -np 1..256, --max-body >= 1, -c, -b, --timeout, "
                        "--max-queue and --grace >= 0\n");
        return 2;
    }
    char buf[1024];
    if (cli_resolve_model("serve", &model, buf, sizeof buf)) return 1;
    if (cli_kv_dtype("serve", kv_dtype, &p.kv_dtype)) return 1;
    p.model = model;
    p.n_threads = threads;
    p.timeout_s = timeout;
    p.max_body = (size_t)max_body;
    p.grace_s = grace;
    /* every thread started from here on inherits the blocked signals: only signal_main takes them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that goes away is an error of one write, not of the process */
    serve_server *srv;
    if (serve_start(&p, &srv)) return 1;
    pthread_t sig_thread;
    if (pthread_create(&sig_thread, NULL, signal_main, srv) != 0) {
        fprintf(stderr, "loom serve: cannot start the signal thread\n");
        serve_free(srv);
        return 1;
    }
    int rc = serve_load(srv);
    if (rc == 0) serve_run(srv);
    pthread_cancel(sig_thread); /* sigwait is a cancellation point: no signal reaches a freed server */
    pthread_join(sig_thread, NULL);
    serve_free(srv);
    fprintf(stderr, "loom serve: stopped\n");
    return rc;
}
