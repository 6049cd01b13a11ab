/* creds.h -- why a NATS server may refuse a credentials file: what can be checked without it. */
#ifndef FQ_CREDS_H
#define FQ_CREDS_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/* Check the credentials file at path (a user JWT and its nkey seed, as nsc
 * writes it) as far as a client can: the file is readable and holds both;
 * the JWT is a user's, with readable claims, signed by the key it names as
 * its issuer; it is valid at now (Unix
 * seconds: not expired, not before its nbf); the seed is a user's and is
 * the key the JWT names (its ed25519 public key is the JWT's sub). Whether
 * the JWT's signer is an account the server knows, and whether that account
 * revoked the user, only the server can tell.
 *
 * FQ_OK: nothing wrong here; why holds who the JWT names ("user NAME (U...)
 * signed by A..., expires ..."). FQ_EINVAL (FQ_EIO: unreadable; FQ_ENOMEM):
 * why holds the cause, in words an operator can act on. Never writes the
 * seed into why. */
fq_status fq_creds_check(char *why, size_t cap, const char *path, int64_t now);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The same checks on text, the file's content (NUL-terminated). */
fq_status fq_creds_check_text(char *why, size_t cap, const char *text, int64_t now);
#endif

#endif
