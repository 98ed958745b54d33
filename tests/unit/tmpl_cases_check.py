#!/usr/bin/env python3
# tmpl_cases_check.py — re-render every case of tmpl_cases.json with Jinja2
# (Debian python3-jinja2) set up as Hugging Face transformers sets it up,
# and report each case whose recorded expectation differs. The C test
# (test_tmpl.c) never needs this; it is how the table's expectations were
# made and how a new case gets its expected output:
#   python3 tests/unit/tmpl_cases_check.py tests/unit/tmpl_cases.json [--fix]
# --fix rewrites the expectations from Jinja2 (review the diff).
import datetime
import json
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2025, 3, 14, 9, 26, 53).strftime(fmt)


def render(template, variables):
    try:
        return True, env.from_string(template).render(**variables)
    except Exception as e:  # Jinja2 raised: the case expects an error
        return False, f"{type(e).__name__}: {e}"


def main():
    path = sys.argv[1]
    fix = "--fix" in sys.argv
    cases = json.load(open(path, encoding="utf-8"))
    bad = 0
    for i, case in enumerate(cases):
        ok, out = render(case["template"], case["vars"])
        if ok != ("expected" in case) or (ok and out != case["expected"]):
            bad += 1
            print(f"case {i}: {case['template']!r}\n  table:  {case.get('expected', case.get('error'))!r}\n"
                  f"  jinja2: {out!r}")
        if fix:
            case.pop("expected", None)
            case.pop("error", None)
            case["expected" if ok else "error"] = out
    if fix:
        json.dump(cases, open(path, "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    print(f"{len(cases)} cases, {bad} differ from Jinja2 {jinja2.__version__}")
    return 1 if bad and not fix else 0


if __name__ == "__main__":
    sys.exit(main())
