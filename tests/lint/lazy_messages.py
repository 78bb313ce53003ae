#!/usr/bin/env python3
"""Fails when a check in tessel's headers builds its message before knowing it is needed.

require(cond, parts...) formats its parts only when cond is false, so a check that passes costs a
comparison. An argument such as shape.to_string() or "a" + std::to_string(n) is evaluated on
every call instead: before this check existed, such arguments (and the sim's per-launch symbol
lookup) were 11 of the 16 us a 64^3 matmul call took on the host. Pass the objects themselves
(Shape, Layout and tessel::detail::shape_of(tensor) print through operator<<).

The scanner reads every source under include/tessel with comments, character literals and the
contents of string literals blanked out, splits each require(...) into its top-level arguments and
looks at the message parts (all but the condition) for: std::string construction, to_string,
ostringstream, std::format, .str(), concat(, string concatenation with a literal, and calls of any
function that include/ declares as returning std::string (collected from the sources, so a new
helper is covered without editing this file).

Usage: lazy_messages.py SOURCE_DIR      (exit 1 and one line per eager check)
       lazy_messages.py --self-test     (the scanner finds the eager forms and passes the lazy ones)
"""
import pathlib
import re
import sys

SUFFIXES = ('.hpp', '.cpp', '.cu', '.cuh')
EAGER = re.compile(r'to_string\s*\(|std::string\s*[({]|ostringstream|std::format\s*\(|\.str\s*\(\s*\)|\bconcat\s*\(|'
                   r'\+\s*""|""\s*\+')


def blank(text):
    """Comments removed, character literals and string contents blanked; line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(')' + (m.group(1) if m else '') + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else '') + 2
            out.append('""' + '\n' * text.count('\n', i, j))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def calls(text, name):
    """Yields (line, [top-level arguments]) for each name(...) in blanked text."""
    for m in re.finditer(r'(?<![\w.>:])' + name + r'\s*\(', text):
        i, depth, args, start = m.end(), 1, [], m.end()
        while depth and i < len(text):
            c = text[i]
            if c in '([{':
                depth += 1
            elif c in ')]}':
                depth -= 1
            elif c == ',' and depth == 1:
                args.append(text[start:i])
                start = i + 1
            i += 1
        args.append(text[start:i - 1])
        yield text.count('\n', 0, m.start()) + 1, args


def string_functions(texts):
    """Names of the functions the sources declare as returning std::string."""
    names = set()
    for text in texts:
        names.update(re.findall(r'std::string\s+(?:[\w:]+::)?(\w+)\s*\([^;{)]*\)\s*(?:const\s*)?(?:noexcept\s*)?\{', text))
    names.discard('operator')
    return names


def eager_checks(text, helpers=frozenset()):
    helper = re.compile(r'\b(?:' + '|'.join(sorted(map(re.escape, helpers))) + r')\s*\(') if helpers else None
    found = []
    for line, args in calls(blank(text), 'require'):
        message = ','.join(args[1:])
        if EAGER.search(message) or (helper and helper.search(message)):
            found.append((line, ' '.join(('require(' + ','.join(args) + ')').split())))
    return found


def self_test():
    helpers = string_functions(['inline std::string hex_text(const void* p) { return ""; }'])
    eager = ['require(ok, "shape ", s.to_string());', 'require(ok, std::string("n = ") + std::to_string(n));',
             'require(f(x), "a (" + name + ")");', 'require(ok, "a"\n        + name);', 'require (ok, "p ", hex_text(p));',
             'require(ok, "x ", std::format("{}", n));', 'require(ok, os.str());']
    lazy = ['require(ok, "shape ", s, " strides ", t.strides());', 'require(ok, "a (", name, ") says \\"+\\" ", n);',
            'require(g(h(x)), "ok");', 'require(c == \'"\', "quote ", n);  // a " in a comment, + "',
            'require(s == std::string("x"), "not x: ", s);', '/* require(ok, a.to_string()) */ require(ok, "n ", n + 1);',
            'requires(ok, s.to_string()); x.require(ok, "k"); foo_require(ok, std::string("a"));']
    wrong = [c for c in eager if not eager_checks(c, helpers)] + [c for c in lazy if eager_checks(c, helpers)]
    if 'hex_text' not in helpers:
        wrong.append('string_functions missed hex_text')
    for c in wrong:
        print(f'self-test: misjudged {c!r}')
    return 1 if wrong else 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    root = pathlib.Path(argv[1])
    paths = sorted(p for p in (root / 'include' / 'tessel').rglob('*') if p.suffix in SUFFIXES)
    texts = {p: p.read_text() for p in paths}
    helpers = string_functions(blank(t) for t in texts.values())
    found = 0
    for path, text in texts.items():
        for line, call in eager_checks(text, helpers):
            print(f'{path.relative_to(root)}:{line}: message built before the check: {call[:160]}')
            found += 1
    print(f'{found} eager checks' if found else
          f'every require() in {len(paths)} files formats its message only on failure ({len(helpers)} string-returning functions watched)')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
