/* err.c — formatting of em_err messages and the code table. */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Bytes of the character at s (n bytes left) that may stay as they are: a
 * printable ASCII byte or a whole valid UTF-8 sequence that is not a C1
 * control (U+0080..U+009F); 0 where the byte is to be escaped. */
static size_t keep_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return c < 0x20 || c == 0x7f ? 0 : 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;   /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        if (c == 0xC2)
            lo = 0xA0;   /* not the C1 controls */
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;   /* not overlong */
        else if (c == 0xED)
            hi = 0x9F;   /* not a surrogate */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;   /* not overlong */
        else if (c == 0xF4)
            hi = 0x8F;   /* not past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

void em_err_escape(char *s, size_t cap)
{
    if (!cap)
        return;
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strnlen(s, cap - 1), i = 0, k;
    while (i < n && (k = keep_len(u + i, n - i)) > 0)
        i += k;
    if (i == n)   /* nothing to escape */
        return;
    char out[4096];   /* longer messages are cut to 4095 bytes */
    size_t lim = (cap < sizeof out ? cap : sizeof out) - 1, o = 0;
    for (i = 0; i < n;) {
        k = keep_len(u + i, n - i);
        if (k) {
            if (o + k > lim)
                break;
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            static const char hex[] = "0123456789abcdef";
            if (o + 4 > lim)
                break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[u[i] >> 4];
            out[o++] = hex[u[i] & 15];
            i++;
        }
    }
    memcpy(s, out, o);
    s[o] = '\0';
}

int em_err_set(em_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    em_err_escape(err->msg, sizeof err->msg);
    err->code = code;
    return code;
}

int em_err_prefix(em_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
    em_err_escape(err->msg, sizeof err->msg);
    if (err->code == EM_OK)
        err->code = code;
    return err->code;
}

const char *em_err_str(int code)
{
    switch (code) {
    case EM_OK:           return "ok";
    case EM_EINVAL:       return "invalid argument";
    case EM_ENOENT:       return "not found";
    case EM_EFORMAT:      return "malformed data";
    case EM_EUNSUPPORTED: return "not supported";
    case EM_ERANGE:       return "out of range";
    case EM_ENOMEM:       return "out of memory";
    case EM_EIO:          return "input/output error";
    case EM_EDEVICE:      return "device error";
    case EM_EBUSY:        return "busy";
    case EM_ESTATE:       return "invalid state";
    case EM_ECANCELED:    return "cancelled";
    case EM_ENODEV:       return "no Vulkan device";
    default:              return "unknown error";
    }
}

int em_err_is_input(int code)
{
    return code == EM_EINVAL || code == EM_ENOENT || code == EM_EFORMAT ||
           code == EM_EUNSUPPORTED || code == EM_ERANGE;
}
