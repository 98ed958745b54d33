/* log.h — the service log of `ember serve`: one line per event on stderr,
 * with the time (UTC, milliseconds), the level, the request id where there
 * is one, and the message; plain text or one JSON object per line.
 *
 * Plain:  2026-12-02T01:24:44.123Z info [chatcmpl-Xk3q9Z...] request completed ...
 * JSON:   {"time":"2026-12-02T01:24:44.123Z","level":"info","request_id":"...","msg":"..."}
 *
 * Messages never carry prompt or output text unless em_log_content() says
 * a debug setting asked for it (log_content = true). Control bytes in a
 * message are escaped (em_err_escape), so one event is always one line.
 *
 * Threads: every function is safe from any thread (the settings are
 * atomics, a line is written whole under a mutex); none is
 * async-signal-safe. The defaults (info, plain, no content) hold until
 * em_log_configure. */
#ifndef EM_LOG_H
#define EM_LOG_H

typedef enum { EM_LOG_ERROR = 0, EM_LOG_WARN, EM_LOG_INFO, EM_LOG_DEBUG } em_log_level;

/* "error", "warn", "info", "debug" (static). */
const char *em_log_level_name(em_log_level l);
/* The inverse: 0, or -1 when s names no level. */
int em_log_level_parse(const char *s, em_log_level *out);

/* Lines of level <= level are written; json: JSON lines instead of plain;
 * content: prompt and output text may be logged (at debug). */
void em_log_configure(em_log_level level, int json, int content);

/* Whether a line of level l would be written. */
int em_log_enabled(em_log_level l);
/* Whether log_content asked for prompt and output text (and debug is on). */
int em_log_content(void);

/* One line: rid (borrowed; NULL or "" for none) and a printf-style message,
 * without a trailing newline. */
void em_log(em_log_level l, const char *rid, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
