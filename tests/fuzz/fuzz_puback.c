/* fuzz_puback.c -- fq_nio_parse_puback: a JetStream PubAck reply, as the
 * server (or whoever answers on the proxy's inbox) sends it. The whole input
 * is the reply's data, in a buffer of exactly its length; an empty reply
 * comes as NULL, as nats.c hands one. */
#include "fuzz.h"
#include "natsio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fq_nio_event ev = {.type = FQ_NIO_EV_PUBACK};
    fq_nio_parse_puback(&ev, size ? data : NULL, size);
    FUZZ_CHECK(ev.status == FQ_OK || ev.status == FQ_EIO);
    FUZZ_CHECK(ev.status == FQ_OK ? ev.seq > 0 && ev.err_code == 0 : ev.seq == 0 && !ev.duplicate);
    FUZZ_CHECK(ev.err_code >= 0 && ev.err_code <= 99999);
    return 0;
}
