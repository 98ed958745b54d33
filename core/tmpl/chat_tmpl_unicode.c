/* chat_tmpl_unicode.c — the Unicode the chat templates need, over UTF-8:
 * decoding and encoding, validation, Python's whitespace (str.isspace),
 * case mapping for the Latin, Greek, Cyrillic, Armenian and Georgian
 * scripts (with the expansions and the final sigma Python applies),
 * printability as repr() judges it, strip and splitlines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

uint32_t tu_decode(const char *s, size_t n, size_t *adv)
{
    const unsigned char *u = (const unsigned char *)s;
    if (!n) {
        *adv = 0;
        return 0;
    }
    if (u[0] < 0x80 || n < 2) {
        *adv = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *adv = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0 || n < 4) {
        if (n < 3) {
            *adv = 1;
            return u[0];
        }
        *adv = 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *adv = 4;
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
           ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

size_t tu_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int tu_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            goto bad;
        }
        if (n - i < len || u[i + 1] < lo || u[i + 1] > hi)
            goto bad;
        for (size_t k = 2; k < len; k++)
            if (u[i + k] < 0x80 || u[i + k] > 0xBF)
                goto bad;
        i += len;
        continue;
    bad:
        if (bad_at)
            *bad_at = i;
        return 0;
    }
    return 1;
}

int tu_is_space(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Simple one-to-one case mappings: ranges of upper case letters and the
 * distance to their lower case (alt: upper and lower alternate, upper
 * first), then single pairs. */
static const struct { uint32_t lo, hi; int32_t delta; uint8_t alt; } case_ranges[] = {
    { 0x41, 0x5A, 32, 0 },       { 0xC0, 0xD6, 32, 0 },       { 0xD8, 0xDE, 32, 0 },
    { 0x100, 0x12F, 1, 1 },      { 0x132, 0x137, 1, 1 },      { 0x139, 0x148, 1, 1 },
    { 0x14A, 0x177, 1, 1 },      { 0x179, 0x17E, 1, 1 },      { 0x182, 0x185, 1, 1 },
    { 0x1A0, 0x1A5, 1, 1 },      { 0x1CD, 0x1DC, 1, 1 },      { 0x1DE, 0x1EF, 1, 1 },
    { 0x1F8, 0x21F, 1, 1 },      { 0x222, 0x233, 1, 1 },      { 0x246, 0x24F, 1, 1 },
    { 0x370, 0x373, 1, 1 },      { 0x391, 0x3A1, 32, 0 },     { 0x3A3, 0x3AB, 32, 0 },
    { 0x3D8, 0x3EF, 1, 1 },      { 0x400, 0x40F, 80, 0 },     { 0x410, 0x42F, 32, 0 },
    { 0x460, 0x481, 1, 1 },      { 0x48A, 0x4BF, 1, 1 },      { 0x4C1, 0x4CE, 1, 1 },
    { 0x4D0, 0x52F, 1, 1 },      { 0x531, 0x556, 48, 0 },     { 0x10A0, 0x10C5, 7264, 0 },
    { 0x1E00, 0x1E95, 1, 1 },    { 0x1EA0, 0x1EFF, 1, 1 },    { 0x1F08, 0x1F0F, -8, 0 },
    { 0x1F18, 0x1F1D, -8, 0 },   { 0x1F28, 0x1F2F, -8, 0 },   { 0x1F38, 0x1F3F, -8, 0 },
    { 0x1F48, 0x1F4D, -8, 0 },   { 0x1F68, 0x1F6F, -8, 0 },   { 0x2160, 0x216F, 16, 0 },
    { 0x24B6, 0x24CF, 26, 0 },   { 0x2C00, 0x2C2F, 48, 0 },   { 0xA640, 0xA66D, 1, 1 },
    { 0xA680, 0xA69B, 1, 1 },    { 0xA722, 0xA72F, 1, 1 },    { 0xA732, 0xA76F, 1, 1 },
    { 0xA779, 0xA77C, 1, 1 },    { 0xA77E, 0xA787, 1, 1 },    { 0xFF21, 0xFF3A, 32, 0 },
    { 0x10400, 0x10427, 40, 0 },
};

static const struct { uint32_t up, low; } case_pairs[] = {
    { 0x178, 0xFF }, { 0x386, 0x3AC }, { 0x388, 0x3AD }, { 0x389, 0x3AE }, { 0x38A, 0x3AF },
    { 0x38C, 0x3CC }, { 0x38E, 0x3CD }, { 0x38F, 0x3CE }, { 0x181, 0x253 }, { 0x186, 0x254 },
    { 0x189, 0x256 }, { 0x18A, 0x257 }, { 0x18E, 0x1DD }, { 0x18F, 0x259 }, { 0x190, 0x25B },
    { 0x193, 0x260 }, { 0x194, 0x263 }, { 0x196, 0x269 }, { 0x197, 0x268 }, { 0x19C, 0x26F },
    { 0x19D, 0x272 }, { 0x19F, 0x275 }, { 0x1A9, 0x283 }, { 0x1AE, 0x288 }, { 0x1B1, 0x28A },
    { 0x1B2, 0x28B }, { 0x1B7, 0x292 }, { 0x187, 0x188 }, { 0x18B, 0x18C }, { 0x191, 0x192 },
    { 0x198, 0x199 }, { 0x1A7, 0x1A8 }, { 0x1AC, 0x1AD }, { 0x1AF, 0x1B0 }, { 0x1B3, 0x1B4 },
    { 0x1B5, 0x1B6 }, { 0x1B8, 0x1B9 }, { 0x1BC, 0x1BD }, { 0x1C4, 0x1C6 }, { 0x1C7, 0x1C9 },
    { 0x1CA, 0x1CC }, { 0x1F1, 0x1F3 }, { 0x1F4, 0x1F5 }, { 0x1F6, 0x195 }, { 0x1F7, 0x1BF },
    { 0x220, 0x19E }, { 0x23A, 0x2C65 }, { 0x23B, 0x23C }, { 0x23D, 0x19A }, { 0x23E, 0x2C66 },
    { 0x241, 0x242 }, { 0x243, 0x180 }, { 0x244, 0x289 }, { 0x245, 0x28C }, { 0x376, 0x377 },
    { 0x37F, 0x3F3 }, { 0x3CF, 0x3D7 }, { 0x3F7, 0x3F8 }, { 0x3FA, 0x3FB }, { 0x3F9, 0x3F2 },
    { 0x4C0, 0x4CF }, { 0x2132, 0x214E }, { 0x2183, 0x2184 },
};

/* Upper case letters whose lower case maps back elsewhere (lower() only). */
static const struct { uint32_t up, low; } lower_only[] = {
    { 0x130, 'i' }, { 0x3F4, 0x3B8 }, { 0x1E9E, 0xDF }, { 0x2126, 0x3C9 }, { 0x212A, 'k' },
    { 0x212B, 0xE5 },
};

/* Lower case letters whose upper case is not the other way (upper() only). */
static const struct { uint32_t low, up; } upper_only[] = {
    { 0xB5, 0x39C }, { 0x131, 'I' }, { 0x17F, 'S' }, { 0x3C2, 0x3A3 }, { 0x3D0, 0x392 },
    { 0x3D1, 0x398 }, { 0x3D5, 0x3A6 }, { 0x3D6, 0x3A0 }, { 0x3F0, 0x39A }, { 0x3F1, 0x3A1 },
    { 0x3F5, 0x395 }, { 0x1E9B, 0x1E60 }, { 0x1FBE, 0x399 }, { 0x1C5, 0x1C4 }, { 0x1C8, 0x1C7 },
    { 0x1CB, 0x1CA }, { 0x1F2, 0x1F1 },
};

uint32_t tu_lower(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    for (size_t i = 0; i < sizeof lower_only / sizeof lower_only[0]; i++)
        if (lower_only[i].up == cp)
            return lower_only[i].low;
    for (size_t i = 0; i < sizeof case_pairs / sizeof case_pairs[0]; i++)
        if (case_pairs[i].up == cp)
            return case_pairs[i].low;
    for (size_t i = 0; i < sizeof case_ranges / sizeof case_ranges[0]; i++) {
        uint32_t lo = case_ranges[i].lo, hi = case_ranges[i].hi;
        if (cp < lo || cp > hi)
            continue;
        if (case_ranges[i].alt)
            return (cp - lo) % 2 == 0 ? cp + 1 : cp;
        return (uint32_t)((int64_t)cp + case_ranges[i].delta);
    }
    return cp;
}

uint32_t tu_upper(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    for (size_t i = 0; i < sizeof upper_only / sizeof upper_only[0]; i++)
        if (upper_only[i].low == cp)
            return upper_only[i].up;
    for (size_t i = 0; i < sizeof case_pairs / sizeof case_pairs[0]; i++)
        if (case_pairs[i].low == cp)
            return case_pairs[i].up;
    for (size_t i = 0; i < sizeof case_ranges / sizeof case_ranges[0]; i++) {
        uint32_t lo = case_ranges[i].lo, hi = case_ranges[i].hi;
        if (case_ranges[i].alt) {
            if (cp > lo && cp <= hi && (cp - lo) % 2 == 1)
                return cp - 1;
            continue;
        }
        int64_t d = case_ranges[i].delta;
        if ((int64_t)cp >= (int64_t)lo + d && (int64_t)cp <= (int64_t)hi + d)
            return (uint32_t)((int64_t)cp - d);
    }
    return cp;
}

int tu_is_cased(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return tu_upper(cp) != cp || tu_lower(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149 ||
           cp == 0x1F0 || cp == 0x390 || cp == 0x3B0 || cp == 0x587 || (cp >= 0x250 && cp <= 0x2AF);
}

int tu_is_alnum(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    if (tu_is_space(cp) || cp < 0xC0 || cp == 0xD7 || cp == 0xF7)
        return cp == 0xAA || cp == 0xB2 || cp == 0xB3 || cp == 0xB5 || cp == 0xB9 || cp == 0xBA ||
               (cp >= 0xBC && cp <= 0xBE);
    if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
        (cp >= 0xFE00 && cp <= 0xFE6F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
        (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0x1F000 && cp <= 0x1FBFF) ||
        (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0x300 && cp <= 0x36F) || cp == 0x5BE ||
        (cp >= 0x5C0 && cp <= 0x5CF) || (cp >= 0x5F3 && cp <= 0x5FF) || cp == 0x60C || cp == 0x61B ||
        cp == 0x61F || (cp >= 0x64B && cp <= 0x65F))
        return 0;
    return 1;
}

int tu_is_printable(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD)
        return 0;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E ||
        cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) ||
        cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF ||
        (cp >= 0x1D173 && cp <= 0x1D17A) || (cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000)
        return 0;
    return 1;
}

static int is_linebreak(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static int put_cp(tctx *c, tbuf *b, uint32_t cp)
{
    char e[4];
    return tb_put(c, b, e, tu_encode(cp, e));
}

/* upper() of one code point, with the expansions Python makes; title
 * case (title(), capitalize()) differs for the Latin digraphs. */
static int put_upper(tctx *c, tbuf *b, uint32_t cp, int title)
{
    if (title && ((cp >= 0x1C4 && cp <= 0x1CC) || (cp >= 0x1F1 && cp <= 0x1F3))) {
        uint32_t base = cp >= 0x1F1 ? 0x1F1 : 0x1C4 + (cp - 0x1C4) / 3 * 3;
        return put_cp(c, b, base + 1);
    }
    if (cp == 0xDF)
        return tb_put(c, b, "SS", 2);
    if (cp == 0x149)
        return tb_put(c, b, "\xCA\xBCN", 3);
    return put_cp(c, b, tu_upper(cp));
}

int tu_case(tctx *c, tbuf *b, const char *s, size_t n, int how)
{
    int rc = 0, prev_cased = 0, first = 1;
    if (c && n > 64 && (rc = tc_steps(c, n / 64)))
        return rc;
    for (size_t i = 0; i < n && !rc;) {
        size_t adv;
        uint32_t cp = tu_decode(s + i, n - i, &adv);
        if (cp < 0x80 && how != TCASE_TITLE && how != TCASE_CAPITALIZE) {   /* fast path */
            char ch = (char)cp;
            if (how == TCASE_UPPER && ch >= 'a' && ch <= 'z')
                ch = (char)(ch - 32);
            else if (how == TCASE_LOWER && ch >= 'A' && ch <= 'Z')
                ch = (char)(ch + 32);
            else if (how == TCASE_SWAP && ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z'))
                ch = (char)(ch ^ 0x20);
            rc = tb_putc(c, b, ch);
            i += adv;
            continue;
        }
        int cased = tu_is_cased(cp);
        int up = 0;
        switch (how) {
        case TCASE_UPPER: up = 1; break;
        case TCASE_LOWER: up = 0; break;
        case TCASE_CAPITALIZE: up = first; break;
        case TCASE_TITLE: up = !prev_cased; break;
        case TCASE_SWAP: up = tu_lower(cp) == cp; break;
        default: break;
        }
        if (how == TCASE_SWAP && !cased) {
            rc = tb_put(c, b, s + i, adv);
        } else if (up) {
            rc = put_upper(c, b, cp, how == TCASE_TITLE || how == TCASE_CAPITALIZE);
        } else if (cp == 0x130) {   /* İ lowers to i + combining dot */
            rc = tb_put(c, b, "i\xCC\x87", 3);
        } else if (cp == 0x3A3) {   /* final sigma: after a cased letter, not before one */
            size_t adv2 = 0;
            uint32_t next = i + adv < n ? tu_decode(s + i + adv, n - i - adv, &adv2) : 0;
            rc = put_cp(c, b, prev_cased && !(i + adv < n && tu_is_cased(next)) ? 0x3C2 : 0x3C3);
        } else {
            rc = put_cp(c, b, tu_lower(cp));
        }
        prev_cased = cased;
        first = 0;
        i += adv;
    }
    return rc;
}

static int in_chars(uint32_t cp, const char *chars, size_t nchars)
{
    for (size_t i = 0; i < nchars;) {
        size_t adv;
        if (tu_decode(chars + i, nchars - i, &adv) == cp)
            return 1;
        i += adv;
    }
    return 0;
}

size_t tu_prev(const char *s, size_t i)
{
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    return i > 0 ? i - 1 : 0;
}

void tu_strip(const char *s, size_t n, const char *chars, size_t nchars, int which, size_t *start,
              size_t *end)
{
    size_t a = 0, b = n;
    if (which & 1)
        while (a < b) {
            size_t adv;
            uint32_t cp = tu_decode(s + a, b - a, &adv);
            if (chars ? !in_chars(cp, chars, nchars) : !tu_is_space(cp))
                break;
            a += adv;
        }
    if (which & 2)
        while (b > a) {
            size_t p = tu_prev(s, b), adv;
            uint32_t cp = tu_decode(s + p, b - p, &adv);
            if (chars ? !in_chars(cp, chars, nchars) : !tu_is_space(cp))
                break;
            b = p;
        }
    *start = a;
    *end = b;
}

int tu_splitlines(tctx *c, const char *s, size_t n, tval *out)
{
    int rc = tl_new(c, 0, 0, out);
    size_t a = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t adv;
        uint32_t cp = tu_decode(s + i, n - i, &adv);
        if (!is_linebreak(cp)) {
            i += adv;
            continue;
        }
        tval line;
        if (!(rc = ts_new(c, s + a, i - a, &line)))
            rc = tl_push(c, out, line);
        i += adv;
        if (cp == '\r' && i < n && s[i] == '\n')
            i++;
        a = i;
    }
    if (!rc && a < n) {
        tval line;
        if (!(rc = ts_new(c, s + a, n - a, &line)))
            rc = tl_push(c, out, line);
    }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    return rc;
}
