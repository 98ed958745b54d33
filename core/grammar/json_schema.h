/* json_schema.h — JSON Schema (a jansson document) to GBNF text that
 * em_grammar_compile accepts, for structured output: OpenAI's
 * response_format {"type": "json_schema"} and {"type": "json_object"}.
 *
 * The subset and its mapping are in docs/grammar.md. In short: objects
 * (properties in schema order, required ones present, optional ones may be
 * absent; additionalProperties false, true or a schema — when absent, no
 * others if `properties` is given, any members otherwise), arrays (items,
 * minItems, maxItems), strings (enum, const, pattern, minLength, maxLength,
 * format date, time, date-time, uuid), integers and numbers (minimum,
 * maximum, exclusive forms; exact ranges), booleans, null, type arrays,
 * anyOf / oneOf (both as alternatives), a one-schema allOf, and $ref to any
 * JSON pointer inside the document ("#", "#/$defs/x", "#/definitions/x"),
 * recursion included. A keyword outside the subset is an error that names
 * it and where it stands; annotations (title, description, examples,
 * default, $schema, $id, $comment, deprecated, readOnly, writeOnly) are
 * ignored. The output is a single value with no whitespace before or after
 * it; inside, whitespace is optional and bounded (see opts). */
#ifndef EM_JSON_SCHEMA_H
#define EM_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"

typedef struct {
    int compact;   /* 1: no whitespace at all between tokens; 0 (default):
                    * nothing, one space, or a newline and up to 20 blanks */
} em_json_schema_opts;

/* Translate schema (borrowed) into GBNF with start rule "root". opts may be
 * NULL (defaults). *gbnf is malloc'd and NUL-terminated (caller frees),
 * *len its length. Errors: EM_EUNSUPPORTED naming the keyword or format and
 * its JSON pointer ("json_schema: #/properties/tags: unsupported keyword
 * 'uniqueItems'"), EM_EINVAL for a schema that is not valid (a bad $ref,
 * minimum above maximum, a wrong type for a keyword). */
int em_json_schema_to_gbnf(const json_t *schema, const em_json_schema_opts *opts,
                           char **gbnf, size_t *len, em_err *err);

/* Several schemas (n, borrowed) in one grammar with no root rule: schema
 * i's value is rule <prefix><i> ("args0", "args1", ...; prefix borrowed,
 * letters and '-' only), the rest named as em_json_schema_to_gbnf names
 * them, so the caller adds its own root around them. On an error *failed
 * is the index of the schema it is in. Ownership as em_json_schema_to_gbnf. */
int em_json_schemas_gbnf(const json_t *const *schemas, size_t n, const char *prefix,
                         const em_json_schema_opts *opts, char **gbnf, size_t *len, size_t *failed,
                         em_err *err);

/* The grammar of any JSON object (response_format json_object), with the
 * same whitespace policy; same ownership as em_json_schema_to_gbnf. */
int em_json_object_gbnf(const em_json_schema_opts *opts, char **gbnf, size_t *len,
                        em_err *err);

#endif
