/* chat_tmpl.h — chat templates: a bounded interpreter of the Jinja2 subset
 * that models publish as `tokenizer.chat_template`, rendering exactly what
 * Hugging Face transformers renders (Jinja2 in an ImmutableSandboxedEnvironment
 * with trim_blocks, lstrip_blocks, loopcontrols and the {% generation %} tag;
 * tojson as Python json.dumps(ensure_ascii=False); raise_exception;
 * strftime_now). docs/templates.md lists the language covered.
 *
 * A parsed em_tmpl is immutable: any number of threads may render it at
 * once. Rendering is bounded in time and memory by the EM_TMPL_MAX_* limits
 * below; a template that passes one fails with EM_ERANGE naming the limit,
 * never with a crash, a hang or unbounded memory.
 *
 * Error codes: EM_EFORMAT for a template that does not parse (syntax, an
 * unknown filter or test, invalid UTF-8), EM_EINVAL for an error while
 * rendering (a Jinja error: undefined used, type error, raise_exception),
 * EM_ERANGE for a limit, EM_ENOMEM when memory runs out. The em_err message
 * reads "template: line L, col C: <what>", e.g.
 * "template: line 3, col 12: unknown filter 'foo'"; for raise_exception
 * "template: line L, col C: <the template's message>". Nothing is written to
 * *out on error. */
#ifndef EM_CHAT_TMPL_H
#define EM_CHAT_TMPL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "core/err.h"
#include "core/model/gguf.h"

/* Limits. None is near what a real template needs: rendering the 49
 * templates of ../shared/golden/templates peaks at parse nesting 11,
 * evaluation depth 13, 600 steps and 2.4 KB of output. A render needs at
 * most about 256 KiB of C stack (1 MiB under ASan). */
#define EM_TMPL_MAX_SOURCE      ((size_t)1 << 20)   /* template source bytes */
#define EM_TMPL_MAX_NESTING     128     /* blocks inside blocks, brackets, operators: parse depth */
#define EM_TMPL_MAX_DEPTH       1000    /* evaluation recursion (expressions, statements, calls) */
#define EM_TMPL_MAX_CALL_DEPTH  100     /* macros calling macros (recursion) */
#define EM_TMPL_MAX_STEPS       50000000ULL /* work units: nodes evaluated, items, 64 bytes processed */
#define EM_TMPL_MAX_STRING      ((size_t)16 << 20)  /* any one string, the output included */
#define EM_TMPL_MAX_OUTPUT      EM_TMPL_MAX_STRING
#define EM_TMPL_MAX_ITEMS       1000000 /* elements of any one list or dict */
#define EM_TMPL_MAX_MEMORY      ((size_t)256 << 20) /* values alive at once */
#define EM_TMPL_MAX_VALUE_DEPTH 512     /* lists/dicts inside lists/dicts (vars included) */
#define EM_TMPL_MAX_RANGE       100000  /* range() items: Jinja's sandbox MAX_RANGE */

typedef struct em_tmpl em_tmpl;

typedef struct {
    /* The instant strftime_now formats, as local broken-down time; NULL: the
     * current local time. Formatting is always in the C locale. */
    const struct tm *now;
    /* Output bytes at most (0: EM_TMPL_MAX_OUTPUT): past it the render stops
     * with EM_ERANGE at once, its work bounded by what it wrote. A caller
     * that knows the output cannot be used beyond some size (a prompt that
     * could not fit the context) sets it. */
    size_t max_output;
    /* em_chat_render only: more variables (a JSON object, borrowed; NULL:
     * none), as keyword arguments to transformers' apply_chat_template
     * (enable_thinking, reasoning_effort...): each set unless it is one of
     * the variables em_chat_render sets itself. */
    const json_t *extra_vars;
} em_tmpl_opts;

/* In the message of the EM_ERANGE a render stopped by max_output fails with. */
#define EM_TMPL_OUTPUT_CAPPED "(em_tmpl_opts.max_output)"

/* Parse len bytes of template source (borrowed; copied: the caller keeps
 * src). The source must be valid UTF-8; "\r\n" and "\r" become "\n" and one
 * trailing newline is dropped, as Jinja does. On success *out is the
 * caller's, freed with em_tmpl_destroy; on failure *out is NULL. */
int  em_tmpl_parse(const char *src, size_t len, em_tmpl **out, em_err *err);
void em_tmpl_destroy(em_tmpl *t);   /* accepts NULL */

/* Render t with the variables of the JSON object vars (borrowed; may be
 * NULL for none; each key is a template variable, passed as-is: messages,
 * add_generation_prompt, bos_token, eos_token, tools, ...). opts may be NULL
 * (the defaults). On success *out is a malloc'd NUL-terminated string
 * (caller frees; the text may itself contain NUL bytes: use *out_len) and
 * *out_len its length. */
int  em_tmpl_render(const em_tmpl *t, const json_t *vars, const em_tmpl_opts *opts,
                    char **out, size_t *out_len, em_err *err);

/* The fallback used when a model has no chat template: ChatML, the
 * template transformers used as its default,
 *   {% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' +
 *   message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if
 *   add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
 * Static string. */
const char *em_chat_fallback_template(void);

/* The model's chat template: tokenizer.chat_template of g (borrowed), as a
 * pointer into g's mapping and a length; 0 with *src NULL when the model has
 * none (or the key is not a string). */
int  em_chat_gguf_template(const em_gguf *g, const char **src, size_t *len);

/* Render a chat prompt: template src (len bytes, borrowed; NULL for the
 * ChatML fallback above) with variables messages (a JSON array, borrowed,
 * passed as-is), add_generation_prompt, bos_token and eos_token (borrowed
 * NUL-terminated token texts; NULL reads as ""), tools (borrowed JSON, or
 * NULL: none) and documents = none, as transformers passes them. *out and
 * *out_len as em_tmpl_render. */
int  em_chat_render(const char *src, size_t len, const json_t *messages,
                    int add_generation_prompt, const char *bos_token, const char *eos_token,
                    const json_t *tools, const em_tmpl_opts *opts,
                    char **out, size_t *out_len, em_err *err);

/* Tokenize a rendered chat prompt (borrowed; len bytes) as a chat turn is
 * fed: special-token text ("<|im_start|>") becomes its id, and BOS is put
 * first when the model asks for one (tokenizer.ggml.add_bos_token) and the
 * template did not write it already. *ids is malloc'd (caller frees). */
struct em_tokenizer;
int em_chat_tokenize(const struct em_tokenizer *tok, const char *prompt, size_t len, int32_t **ids,
                     size_t *n, em_err *err);

#endif
