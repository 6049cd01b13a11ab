/* creds.c -- why a NATS server may refuse a credentials file: what can be checked without it. */
/*
 * Principles:
 *
 * - nats-server answers every refused user JWT with the same "Authorization
 *   Violation" (the cause is in its debug log only), so a proxy that says
 *   only that leaves the operator guessing. This module is asked after such
 *   a refusal, and names what a client can check itself: an expired JWT, a
 *   seed that is not the JWT's key, a file that is not a credentials file.
 *   What is left (an unknown signing account, a revoked user) it names as
 *   the server's to tell. It never decides whether to connect: nats.c reads
 *   the file for every connect, and the server is the authority.
 *
 * - The formats are nats-io's: a credentials file has a "-----BEGIN ...-----"
 *   line before the user JWT and another before the seed; a JWT is three
 *   base64url parts, the second the claims (read by lib/msg.c); an nkey is
 *   base32 of a prefix, 32 raw key bytes and a CRC-16/XMODEM, little-endian
 *   (tests/support/nkey.py says how each is made).
 *
 * - The adapter of libcrypto (OpenSSL): an ed25519 seed's public key, and
 *   the JWT's signature checked against the key it names as its issuer.
 *   The seed's bytes are wiped.
 */
#include "creds.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "msg.h"

#define CREDS_MAX_FILE (64 * 1024)  /* nsc writes about 1 KB */
#define NKEY_RAW 32                 /* an ed25519 key's bytes */
#define NKEY_PREFIX_SEED (18 << 3)  /* 'S' */
#define NKEY_PREFIX_USER (20 << 3)  /* 'U' */

__attribute__((format(printf, 3, 4)))
static fq_status creds_fail(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (why && cap)
        vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return FQ_EINVAL;
}

/* CRC-16/XMODEM, as nkeys computes it over prefix and key. */
static uint16_t creds_crc16(const unsigned char *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* s[0..n) in an unpadded RFC 4648 alphabet of 2^width letters (base32: 5,
 * base64url: 6) into out; its length, or SIZE_MAX for a letter not in the
 * alphabet or an out too small. */
static size_t creds_decode(unsigned char *out, size_t cap, const char *s, size_t n,
                           const char *alphabet, int width)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *at = s[i] ? strchr(alphabet, s[i]) : NULL;
        if (!at)
            return SIZE_MAX;
        acc = acc << width | (uint32_t)(at - alphabet);
        if ((bits += width) >= 8) {
            if (k == cap)
                return SIZE_MAX;
            out[k++] = (unsigned char)(acc >> (bits -= 8));
        }
    }
    return k;
}

/* RFC 4648 base32 without padding, s[0..n) into out; its length, or 0. */
static size_t creds_base32(unsigned char *out, size_t cap, const char *s, size_t n)
{
    size_t k = creds_decode(out, cap, s, n, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 5);
    return k == SIZE_MAX ? 0 : k;
}

/* base64url without padding, s[0..n) into out; its length, or SIZE_MAX. */
static size_t creds_base64url(unsigned char *out, size_t cap, const char *s, size_t n)
{
    return creds_decode(out, cap, s, n,
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", 6);
}

/* A public nkey of prefix for raw, into out (57 bytes with the NUL). */
static void creds_encode_public(char out[64], unsigned char prefix, const unsigned char *raw)
{
    unsigned char b[1 + NKEY_RAW + 2];
    b[0] = prefix;
    memcpy(b + 1, raw, NKEY_RAW);
    uint16_t crc = creds_crc16(b, 1 + NKEY_RAW);
    b[1 + NKEY_RAW] = (unsigned char)(crc & 0xff);
    b[2 + NKEY_RAW] = (unsigned char)(crc >> 8);
    const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < sizeof b; i++) {
        acc = acc << 8 | b[i];
        for (bits += 8; bits >= 5; bits -= 5)
            out[k++] = a[(acc >> (bits - 5)) & 31];
    }
    if (bits > 0)
        out[k++] = a[(acc << (5 - bits)) & 31];
    out[k] = '\0';
}

/* The public user nkey of the seed s[0..n), into pub; NULL, or the reason
 * it is not a user's seed. */
static const char *creds_seed_public(char pub[64], const char *s, size_t n)
{
    unsigned char raw[2 + NKEY_RAW + 2];
    size_t k = creds_base32(raw, sizeof raw, s, n);
    const char *bad = NULL;
    if (k != sizeof raw)
        bad = "it is not an nkey seed (58 characters of base32, SU...)";
    else if (creds_crc16(raw, k - 2) != (raw[k - 2] | raw[k - 1] << 8))
        bad = "its checksum is wrong (a character changed or missing)";
    else if ((raw[0] & 0xf8) != NKEY_PREFIX_SEED)
        bad = "it is not a seed (S...): a public key?";
    else if (((raw[0] & 7) << 5 | raw[1] >> 3) != NKEY_PREFIX_USER)
        bad = "it is not a user's seed (SU...): an account's or an operator's?";
    EVP_PKEY *key = NULL;
    unsigned char pk[NKEY_RAW];
    size_t pklen = sizeof pk;
    if (!bad && (!(key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, raw + 2, NKEY_RAW)) ||
                 EVP_PKEY_get_raw_public_key(key, pk, &pklen) != 1 || pklen != NKEY_RAW))
        bad = "its ed25519 key cannot be read";
    EVP_PKEY_free(key);
    OPENSSL_cleanse(raw, sizeof raw);
    if (!bad)
        creds_encode_public(pub, NKEY_PREFIX_USER, pk);
    return bad;
}

/* Whether p[0..l) holds word. */
static bool creds_has(const char *p, size_t l, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= l; i++)
        if (memcmp(p + i, word, w) == 0)
            return true;
    return false;
}

/* Whether sig[0..slen) is the ed25519 signature of msg[0..mlen) by the
 * public nkey pub ("A..." or "O..."); false for a key that is not one. */
static bool creds_signed_by(const char *pub, const unsigned char *msg, size_t mlen,
                            const unsigned char *sig, size_t slen)
{
    unsigned char raw[1 + NKEY_RAW + 2];
    if (creds_base32(raw, sizeof raw, pub, strlen(pub)) != sizeof raw ||
        creds_crc16(raw, 1 + NKEY_RAW) != (raw[1 + NKEY_RAW] | raw[2 + NKEY_RAW] << 8))
        return false;
    EVP_PKEY *key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, raw + 1, NKEY_RAW);
    EVP_MD_CTX *ctx = key ? EVP_MD_CTX_new() : NULL;
    bool ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key) == 1 &&
              EVP_DigestVerify(ctx, sig, slen, msg, mlen) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(key);
    return ok;
}

/* The block after the n-th (from 0) "-----BEGIN ...-----" line of text:
 * its first non-blank line, trimmed, as [*at, *at + *len). */
static bool creds_block(const char *text, int n, const char **at, size_t *len)
{
    bool after_begin = false;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        const char *next = eol ? eol + 1 : line + strlen(line);
        const char *b = line, *e = eol ? eol : next;
        while (b < e && (*b == ' ' || *b == '\t' || *b == '\r'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            e--;
        bool marker = e - b >= 3 && strncmp(b, "---", 3) == 0;
        if (after_begin && b < e) {
            if (marker)
                return false;
            *at = b;
            *len = (size_t)(e - b);
            return true;
        }
        if (marker && creds_has(b, (size_t)(e - b), "BEGIN") && n-- == 0)
            after_begin = true;
        line = next;
    }
    return false;
}

static void creds_time(char *buf, size_t cap, int64_t t)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, cap, "%lld", (long long)t);
}

/* Read path into a NUL-terminated buffer of at most CREDS_MAX_FILE bytes. */
static fq_status creds_read(char **out, const char *path, char *why, size_t cap)
{
    FILE *f = fopen(path, "r");
    *out = NULL;
    if (!f) {
        snprintf(why, cap, "cannot read it: %s", strerror(errno));
        return FQ_EIO;
    }
    char *buf = malloc(CREDS_MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, CREDS_MAX_FILE + 1, f) : 0;
    bool err = ferror(f);
    fclose(f);
    if (!buf)
        return FQ_ENOMEM;
    if (err || n > CREDS_MAX_FILE) {
        OPENSSL_cleanse(buf, n);
        free(buf);
        snprintf(why, cap, err ? "cannot read it" : "it is over %d bytes: not a credentials file",
                 CREDS_MAX_FILE);
        return err ? FQ_EIO : FQ_EINVAL;
    }
    buf[n] = '\0';
    *out = buf;
    return FQ_OK;
}

/* Bytes of s that are not printable ASCII become '?': claims are quoted in
 * a log line. */
static void creds_printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            *s = '?';
}

fq_status fq_creds_check_text(char *why, size_t cap, const char *text, int64_t now)
{
    const char *jwt, *seed;
    size_t jlen, slen;
    if (!creds_block(text, 0, &jwt, &jlen))
        return creds_fail(why, cap, "no user JWT in it (a -----BEGIN NATS USER JWT----- line, "
                          "then the JWT): not a credentials file");
    if (!creds_block(text, 1, &seed, &slen))
        return creds_fail(why, cap, "no nkey seed in it (a -----BEGIN USER NKEY SEED----- "
                          "line after the JWT, then the seed)");
    const char *dot1 = memchr(jwt, '.', jlen);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', jlen - (size_t)(dot1 + 1 - jwt)) : NULL;
    unsigned char claims_json[8192];
    size_t clen = dot2 ? creds_base64url(claims_json, sizeof claims_json, dot1 + 1,
                                         (size_t)(dot2 - dot1 - 1)) : SIZE_MAX;
    if (clen == SIZE_MAX)
        return creds_fail(why, cap, "its user JWT is not a JWT (three parts of base64url "
                          "joined by dots)");
    fq_jwt_claims c;
    char err[160];
    if (fq_jwt_claims_parse(&c, claims_json, clen, err, sizeof err) != FQ_OK)
        return creds_fail(why, cap, "its user JWT cannot be read: %s", err);
    creds_printable(c.sub);
    creds_printable(c.iss);
    creds_printable(c.name);
    creds_printable(c.type);
    if (c.type[0] && strcmp(c.type, "user") != 0)
        return creds_fail(why, cap, "its JWT is an %s's (%s), not a user's", c.type, c.sub);
    unsigned char sig[128];
    size_t siglen = creds_base64url(sig, sizeof sig, dot2 + 1, jlen - (size_t)(dot2 + 1 - jwt));
    if (siglen == SIZE_MAX || !creds_signed_by(c.iss, (const unsigned char *)jwt,
                                               (size_t)(dot2 - jwt), sig, siglen))
        return creds_fail(why, cap, "its user JWT (%s) is not signed by the key it names as its "
                          "issuer (%s): altered, or not a NATS JWT", c.sub, c.iss);
    char when[32];
    if (c.exp && now > c.exp) {
        creds_time(when, sizeof when, c.exp);
        return creds_fail(why, cap, "its user JWT (%s) expired at %s: issue the user a new one",
                          c.sub, when);
    }
    if (c.nbf && now < c.nbf) {
        creds_time(when, sizeof when, c.nbf);
        return creds_fail(why, cap, "its user JWT (%s) is not valid before %s", c.sub, when);
    }
    char pub[64];
    const char *bad = creds_seed_public(pub, seed, slen);
    if (bad)
        return creds_fail(why, cap, "its nkey seed is not usable: %s", bad);
    if (strcmp(pub, c.sub) != 0)
        return creds_fail(why, cap, "its nkey seed is not the key of its user JWT: the seed's "
                          "public key is %s, the JWT is for %s (a seed and a JWT of two "
                          "different users?)", pub, c.sub);
    if (c.exp)
        creds_time(when, sizeof when, c.exp);
    snprintf(why, cap, "user %s (%s) signed by %s, expires %s, its seed matching", c.name,
             c.sub, c.iss, c.exp ? when : "never");
    return FQ_OK;
}

fq_status fq_creds_check(char *why, size_t cap, const char *path, int64_t now)
{
    char *text = NULL;
    char scratch[1];
    if (!why || !cap) {
        why = scratch;
        cap = sizeof scratch;
    }
    why[0] = '\0';
    fq_status st = creds_read(&text, path, why, cap);
    if (st == FQ_OK)
        st = fq_creds_check_text(why, cap, text, now);
    if (text) {
        OPENSSL_cleanse(text, strlen(text));
        free(text);
    }
    return st;
}
