#!/usr/bin/env python3
"""Fails when a check in tessel's headers builds its message before knowing it is needed.

require(cond, parts...) formats its parts only when cond is false, so a check that passes costs a
comparison. An argument such as shape.to_string() or "a" + std::to_string(n) is evaluated on
every call instead: before this check existed, such arguments (and the sim's per-launch symbol
lookup) were 11 of the 16 us a 64^3 matmul call took on the host. Pass the objects themselves
(Shape, Layout and tessel::detail::shape_of(tensor) print through operator<<).

Usage: lazy_messages.py SOURCE_DIR      (exit 1 and one line per eager check)
       lazy_messages.py --self-test     (the scanner finds the eager forms and passes the lazy ones)
"""
import pathlib
import re
import sys

EAGER = re.compile(r'to_string\(|std::string\(|ostringstream|\+ *"|" *\+|concat\(')


def calls(text, name):
    """Yields (line, call text) for each name(...) in text, strings and nested parentheses skipped."""
    for m in re.finditer(r'\b' + name + r'\(', text):
        i, depth = m.end(), 1
        while depth and i < len(text):
            c = text[i]
            if c == '"':
                i += 1
                while text[i] != '"':
                    i += 2 if text[i] == '\\' else 1
            elif c == '(':
                depth += 1
            elif c == ')':
                depth -= 1
            i += 1
        yield text.count('\n', 0, m.start()) + 1, text[m.start():i]


def without_string_contents(call):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', call)


def eager_checks(text):
    return [(line, ' '.join(call.split())) for line, call in calls(text, 'require')
            if EAGER.search(without_string_contents(call))]


def self_test():
    eager = ['require(ok, "shape ", s.to_string());', 'require(ok, std::string("n = ") + std::to_string(n));',
             'require(f(x), "a (" + name + ")");']
    lazy = ['require(ok, "shape ", s, " strides ", t.strides());', 'require(ok, "a (", name, ") says \\"+\\" ", n);',
            'require(g(h(x)), "ok");']
    wrong = [c for c in eager if not eager_checks(c)] + [c for c in lazy if eager_checks(c)]
    for c in wrong:
        print(f'self-test: misjudged {c}')
    return 1 if wrong else 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    root = pathlib.Path(argv[1])
    found = 0
    for path in sorted((root / 'include' / 'tessel').rglob('*.hpp')):
        for line, call in eager_checks(path.read_text()):
            print(f'{path.relative_to(root)}:{line}: message built before the check: {call[:160]}')
            found += 1
    print(f'{found} eager checks' if found else 'every require() formats its message only on failure')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
