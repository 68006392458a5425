/* SPDX-License-Identifier: BSD-3-Clause */
/* placeholder, replaced by the verbs transport */
#include "transport/transport.h"
#include "core/check.h"
static hoop_status ib_init(const struct hoop_tp_config *cfg, void **tctx)
{
    (void)cfg, (void)tctx;
    return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "ib: not built yet");
}
const struct hoop_transport hoop__transport_ib = {.name = "ib", .preference = 1, .init = ib_init};
