/* fuzz_request.c — JSON request bodies as /v1/chat/completions,
 * /v1/completions, a batch line's body and a WebSocket chat's params reach
 * the parameter checks (web/openai.c): any bytes through jansson as the
 * server reads them (duplicate keys refused), then the sampling, penalty,
 * logit_bias, logprobs, stop and max_tokens checks of web_gen_params
 * (with an ordinary and an admin key), and the messages check (roles,
 * content strings or parts) — every refusal with a message, every accepted
 * value within its documented range. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "web/web_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *req = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!req)
        return 0;
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    em_web_auth auth = { .key_id = 1, .default_class = EM_CLASS_INTERACTIVE, .admin = (int)(size & 1) };
    em_gen_params gp;
    memset(&gp, 0, sizeof gp);
    em_web_error e = { 0 };
    if (web_gen_params(req, &auth, &gp, &e) == 0) {
        FUZZ_ASSERT(gp.sample.temp >= 0 && gp.sample.temp <= 2);
        FUZZ_ASSERT(gp.sample.top_p > 0 && gp.sample.top_p <= 1);
        FUZZ_ASSERT(gp.cls == EM_CLASS_INTERACTIVE || gp.cls == EM_CLASS_BACKGROUND);
    } else {
        FUZZ_ASSERT(e.status >= 400 && e.status < 600 && e.message[0]);
    }
    json_t *msgs = json_object_get(req, "messages");
    if (msgs) {
        em_web_error me = { 0 };
        json_t *ok = web_messages_check(msgs, &me);
        if (ok) {
            size_t i;
            json_t *m;
            json_array_foreach(ok, i, m)
                FUZZ_ASSERT(json_is_string(json_object_get(m, "role")) && json_is_string(json_object_get(m, "content")));
            json_decref(ok);
        } else {
            FUZZ_ASSERT(me.status == 400 && me.message[0]);
        }
    }
    json_decref(req);
    return 0;
}
