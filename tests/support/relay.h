/* relay.h -- integration-test support: a TCP relay on loopback that a test pauses, to cut a client off its server without closing anything. */
#ifndef FQ_RELAY_H
#define FQ_RELAY_H

/*
 * A network partition on one machine: the client connects to the relay's
 * port instead of the server's, and the relay forwards each connection to
 * the server on a thread of its own. Paused, it forwards nothing either
 * way and accepts no new connection, while every socket stays open: the
 * client sees what a cut cable shows, silence, and notices only when its
 * pings go unanswered; resumed, what waited in the buffers flows again.
 * Functions return 0 on success and -1 on failure after writing the reason
 * to stderr.
 */

#include <stdbool.h>

typedef struct nt_relay nt_relay;

/* Listen on a free loopback port and forward to 127.0.0.1:to_port. */
int nt_relay_start(nt_relay **out, int to_port);
/* The port to connect to. */
int nt_relay_port(const nt_relay *r);
/* Stop forwarding both ways, keeping every socket open; or resume. */
void nt_relay_pause(nt_relay *r, bool paused);
/* Stop the thread, close every socket, free. Safe on NULL. */
void nt_relay_destroy(nt_relay *r);

#endif
