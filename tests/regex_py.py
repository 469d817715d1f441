"""Run our Rust-syntax regexes with Python's re, to check the translator independently."""

import re


def py_regex(rust: str) -> re.Pattern:
    return re.compile(re.sub(r"\\x\{([0-9A-Fa-f]+)\}", lambda m: "\\U%08X" % int(m.group(1), 16), rust))
