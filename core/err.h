/* err.h — ember's error convention, shared by every layer.
 *
 * Functions return int: 0 (EM_OK) on success, a negative EM_E* code on
 * failure. An optional caller-owned em_err receives a one-line human message
 * ("<what>: <why>", no trailing newline). Passing NULL for the em_err is
 * always allowed. */
#ifndef EM_ERR_H
#define EM_ERR_H

#include <stddef.h>

enum {
    EM_OK           = 0,
    EM_EINVAL       = -1,  /* bad argument or flag (user input)               */
    EM_ENOENT       = -2,  /* file or key does not exist (user input)         */
    EM_EFORMAT      = -3,  /* corrupt or malformed file/data (user input)     */
    EM_EUNSUPPORTED = -4,  /* valid but not supported: arch, type (user input)*/
    EM_ERANGE       = -5,  /* value out of range, e.g. token id (user input)  */
    EM_ENOMEM       = -6,  /* host or device memory exhausted                 */
    EM_EIO          = -7,  /* read/write failure                              */
    EM_EDEVICE      = -8,  /* Vulkan device failure, lost device              */
    EM_EBUSY        = -9,  /* resource busy / queue full                      */
    EM_ESTATE       = -10, /* call not valid in the current state             */
    EM_ECANCELED    = -11, /* operation cancelled                             */
    EM_ENODEV       = -12, /* no Vulkan device here at all: no loader, no     */
                           /* driver, none listed, or none usable by ember    */
};

typedef struct em_err {
    int  code;       /* the last code set, EM_OK if none */
    char msg[512];   /* "<what>: <why>" */
} em_err;

/* Format a message into err (if non-NULL) and return code. printf-style. */
int em_err_set(em_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message with "<what>: " (keeps err->code); returns err->code
 * (or code when err is NULL). */
int em_err_prefix(em_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Rewrite the NUL-terminated s (a buffer of cap bytes) as printable, valid
 * UTF-8: each control byte (below 0x20, DEL), each byte that is not part of
 * a valid UTF-8 character, and the C1 controls U+0080..U+009F become "\xNN";
 * the text is cut (never inside an escape or a character) if it no longer
 * fits, and at 4095 bytes. Text taken from files and arguments can then
 * neither split a one-line message, nor reach a terminal as an escape
 * sequence, nor make a message that a JSON encoder refuses. em_err_set and
 * em_err_prefix apply it to every message. */
void em_err_escape(char *s, size_t cap);

/* Short name of a code ("invalid argument", ...). Static string. */
const char *em_err_str(int code);

/* 1 when the code means the user's input was at fault (CLI exit status 2). */
int em_err_is_input(int code);

#endif
