/* serve_http.h — the libmicrohttpd side of `tokbench serve`
 * (serve_http.c): the daemon, and the events by which the dispatcher
 * (serve_batch.h) tells it each request's progress. */
#ifndef TB_SERVE_HTTP_H
#define TB_SERVE_HTTP_H

#include <netinet/in.h>

#include "serve_batch.h"

struct MHD_Daemon;

/* Listen on *addr (its port; 0 picks a free one), a thread per
 * connection, calling back with s. The daemon and *bound (the port
 * bound), or NULL with errno set. */
struct MHD_Daemon *tb_serve_http_start(tb_server *s, const struct sockaddr_in *addr, unsigned *bound);
/* Close the listening socket and every connection, join their threads. */
void tb_serve_http_stop(struct MHD_Daemon *d);

/* The dispatcher's news of a request turned into what its client gets:
 * the response's text, SSE chunks, its status or error event. */
extern const tb_sreq_events tb_serve_http_events;

#endif
