"""Text from user code, made safe for a terminal, a log or an editor.

Why: a candidate's exception message or stderr reaches the CLI's summary, the language
server's diagnostics and notifications. ANSI escapes in it could repaint a terminal (one
made a refused candidate's summary read "verdict: correct"), and other control characters
garble logs and JSON viewers. Every text that crosses from user code is cleaned once, at the
boundary where it enters an EvalResult, a profile or a message.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI sequences (colours, cursor moves, erase)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC sequences (titles, hyperlinks)
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str, keep_newlines: bool = False) -> str:
    """Escape sequences removed, other control characters (and bidirectional overrides)
    shown as `?`; newlines and tabs become spaces unless `keep_newlines`."""
    text = _ESCAPES.sub("", text)
    if not keep_newlines:
        text = text.replace("\r\n", " ").replace("\n", " ").replace("\t", " ")
    else:
        text = text.replace("\r\n", "\n")
    return _CONTROLS.sub("?", text)
