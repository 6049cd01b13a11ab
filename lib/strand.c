/* strand.c -- see strand.h for the principles. */
#include "strand.h"

enum fq_strand_verdict fq_strand_check(uint64_t *from, fq_strand *s, uint64_t first_seq,
                                       uint64_t ack_floor)
{
    if (s->drain_floor && first_seq && first_seq <= s->drain_floor) {
        *from = first_seq;
        return FQ_STRAND_STRANDED;
    }
    s->drain_floor = 0;
    if (!first_seq || !ack_floor || first_seq > ack_floor) {
        s->seen_seq = 0;
        s->sightings = 0;
        return FQ_STRAND_NONE;
    }
    if (s->seen_seq != first_seq) {
        s->seen_seq = first_seq;
        s->sightings = 0;
    }
    if (++s->sightings < FQ_STRAND_SIGHTINGS)
        return FQ_STRAND_SUSPECT;
    *from = first_seq;
    s->seen_seq = 0;
    s->sightings = 0;
    s->drain_floor = ack_floor;
    return FQ_STRAND_STRANDED;
}

bool fq_strand_consumer(fq_strand *s, bool made, int64_t now_ms, int64_t bound_ms)
{
    if (made) {
        *s = (fq_strand){0};
        return false;
    }
    if (!s->refused_since_ms)
        s->refused_since_ms = now_ms ? now_ms : 1;
    if (s->refused_reported || !fq_strand_refused(s, now_ms, bound_ms))
        return false;
    s->refused_reported = true;
    return true;
}

bool fq_strand_refused(const fq_strand *s, int64_t now_ms, int64_t bound_ms)
{
    return s->refused_since_ms && now_ms - s->refused_since_ms >= bound_ms;
}
