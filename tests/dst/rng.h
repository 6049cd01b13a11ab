/* rng.h -- the simulation's one PRNG: every random choice of a run comes from it, so a seed replays it exactly. */
#ifndef DST_RNG_H
#define DST_RNG_H

#include <stdbool.h>
#include <stdint.h>

/* splitmix64: small, fast, and every seed (0 included) gives a full-period
 * stream. One per simulated world; nothing else in the simulation draws. */
typedef struct dst_rng {
    uint64_t s;                 /* the state: the seed, advanced once a draw */
    uint64_t draws;             /* draws so far, to tell replays apart in a failure */
} dst_rng;

static inline void dst_rng_seed(dst_rng *r, uint64_t seed)
{
    r->s = seed;
    r->draws = 0;
}

static inline uint64_t dst_rng_next(dst_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    r->draws++;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, n); 0 when n is 0. The modulo's bias is far below what a
 * simulation notices at these ranges. */
static inline uint64_t dst_rng_below(dst_rng *r, uint64_t n)
{
    return n ? dst_rng_next(r) % n : 0;
}

/* Uniform in [lo, hi]. */
static inline uint64_t dst_rng_in(dst_rng *r, uint64_t lo, uint64_t hi)
{
    return lo + dst_rng_below(r, hi - lo + 1);
}

/* True with probability num/den. */
static inline bool dst_rng_chance(dst_rng *r, uint64_t num, uint64_t den)
{
    return dst_rng_below(r, den) < num;
}

#endif
