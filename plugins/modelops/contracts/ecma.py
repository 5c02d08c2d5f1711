"""JSON Schema ``pattern`` (ECMA-262) rewritten so Python ``re``, Java and Rust regexes agree with it.

JSON Schema patterns are ECMA-262 regular expressions without flags. Engines that run
the same text differ at the edges, and the edge is where bad input hides:

* ``$`` — ECMA-262: the end of the input only. Python ``re`` and Java also match it
  before a final ``\\n``, so ``^[a-z]+$`` accepted ``"u1\\n"``.
* ``.`` — ECMA-262 excludes ``\\n``, ``\\r``, U+2028, U+2029; Python and Rust only ``\\n``.
* ``\\d``, ``\\w``, ``\\b`` — ECMA-262 (without the ``u``/``v`` flags' case folding) is ASCII;
  Python ``re`` on ``str`` is Unicode (``"١"`` is a digit there).
* ``\\s`` — ECMA-262 lists its own whitespace set; Python and Java differ from it and
  from each other.

:func:`portable_pattern` rewrites those constructs into explicit forms that every one
of these engines reads the same way (lookaheads and character classes), so the
gateway (jsonschema-rs), the GX request suite on pandas (Python ``re``) and on Spark
(Java ``rlike``) all follow the ECMA-262 meaning of the schema's pattern. A construct
with no portable spelling is refused with :class:`~modelops.errors.ContractError`.
"""

from __future__ import annotations

from modelops.errors import ContractError

END = r"(?![\s\S])"
"""ECMA-262 ``$`` without the ``m`` flag: nothing follows."""

_WORD = "A-Za-z0-9_"
_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_LINE_ENDS = "\\n\\r\\u2028\\u2029"
_IN_CLASS = {"d": "0-9", "w": _WORD, "s": _SPACE}
_OUTSIDE = {
    "d": "[0-9]", "D": "[^0-9]", "w": f"[{_WORD}]", "W": f"[^{_WORD}]", "s": f"[{_SPACE}]", "S": f"[^{_SPACE}]",
    "b": f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))",
    "B": f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))",
}


def portable_pattern(pattern: str) -> str:
    """``pattern`` (ECMA-262) spelled so Python ``re``, Java and Rust regexes match exactly what ECMA-262 matches.

    Example: ``^[A-Za-z0-9_-]+$`` becomes ``^[A-Za-z0-9_-]+(?![\\s\\S])``.

    Raises:
        ContractError: a negated class escape (``\\D``, ``\\W``, ``\\S``) inside ``[...]``,
            which has no portable spelling.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escaped = pattern[i + 1]
            i += 2
            if in_class:
                if escaped in "DWS":
                    raise ContractError(
                        f"pattern {pattern!r}: \\{escaped} inside [...] has no portable spelling; "
                        f"write the class out (example: [^0-9] instead of [\\D])")
                out.append(_IN_CLASS.get(escaped, "\\b" if escaped == "b" else "\\" + escaped))
            else:
                out.append(_OUTSIDE.get(escaped, "\\" + escaped))
            continue
        i += 1
        if in_class:
            if char == "]":
                in_class = False
            out.append(char)
            continue
        if char == "[":
            in_class = True
            out.append(char)
            if pattern[i:i + 1] == "^":
                out.append("^")
                i += 1
            if pattern[i:i + 1] == "]":  # ECMA-262: [] and [^] are empty / any; Python reads ] as a literal
                raise ContractError(f"pattern {pattern!r}: an empty class [] or [^] has no portable spelling")
        elif char == "$":
            out.append(END)
        elif char == ".":
            out.append(f"[^{_LINE_ENDS}]")
        else:
            out.append(char)
    return "".join(out)
