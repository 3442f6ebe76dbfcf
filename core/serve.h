/* serve.h — `tokbench serve --backend LABEL SUITE [--port N]`: one backend
 * of a suite served as an OpenAI-compatible endpoint (libmicrohttpd), so
 * the same engine can be measured in-process and over HTTP (the difference
 * is the serving overhead), and so that plugins/http has a real server to
 * be tested against.
 *
 *   POST /v1/completions        {"prompt": ..., "max_tokens": N, "stream": ...}
 *   POST /v1/chat/completions   {"messages": [...], ...}
 *   GET  /v1/models, GET /health
 *
 * The backend runs in a worker process, as under `tokbench run` (worker.c),
 * with the options of its first case in the suite. Requests that arrive
 * while a batch runs wait for the next one; a batch takes up to
 * --max-batch waiting requests with the same max_tokens (static batching:
 * what the engine's generate() can do). Emissions are streamed as SSE
 * chunks as they happen, with their text when the plugin reports it
 * (tb_host.emit_output); otherwise the text follows when the request ends.
 * Failed requests keep their error class (backend.h): http_429 → 429,
 * http_4xx → 400, timeout → 504, other → 500 when nothing was sent yet (an
 * error event in the stream after that), dropped → the connection is
 * closed mid-response, malformed_stream → a garbage chunk. */
#ifndef TB_SERVE_H
#define TB_SERVE_H

/* argv[0] is "serve". Returns the process exit status: 0 after a clean
 * stop (SIGINT/SIGTERM), 1 when the backend cannot start, 2 on bad
 * input. */
int tb_cmd_serve(int argc, char **argv);

#endif
