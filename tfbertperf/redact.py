"""Secret redaction shared by logs, reports, errors and the environment fingerprint.

Key names are kept, values replaced by "<redacted>".  Covers account keys, SAS query parameters, bearer tokens,
connection strings and anything whose name says it is a secret.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

# Names (env vars, dict keys) whose values are secrets.
_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|CONNECTION_STRING|CONN_STR|SAS|SIGNATURE|AUTH)", re.I
)
# Env vars that are paths to credential files: the path is fine to show, never the contents.
_CRED_PATH_NAMES = {"GOOGLE_APPLICATION_CREDENTIALS"}

_PATTERNS = [
    # Azure connection string parts: AccountKey=...; SharedAccessSignature=...
    (re.compile(r"(?i)(AccountKey|SharedAccessSignature|SharedAccessKey)=([^;\s\"']+)"), r"\1=" + REDACTED),
    # SAS query parameters in URLs: sig=..., and the rest of a SAS token's signed fields
    (re.compile(r"(?i)([?&;](?:sig|se|sp|sv|st|spr|srt|ss|sr|skoid|sktid|skt|ske|sks|skv|sdd)=)([^&\s\"']+)"),
     r"\1" + REDACTED),
    # Bearer / Basic auth headers
    (re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    # key=value for obviously secret keys in free text
    (re.compile(r"(?i)\b([A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD)[A-Z0-9_]*)=([^\s;&\"']+)"), r"\1=" + REDACTED),
]


def redact_text(text: str) -> str:
    """Return `text` with secret values replaced by <redacted>."""
    if not isinstance(text, str) or not text:
        return text
    for pat, repl in _PATTERNS:
        text = pat.sub(repl, text)
    return text


def is_secret_name(name: str) -> bool:
    """True when a variable/field called `name` holds a secret value."""
    if name.upper() in _CRED_PATH_NAMES:
        return False
    return bool(_SECRET_NAME.search(name))


def redact_obj(obj: Any) -> Any:
    """Deep-copy a JSON-like object with secret values redacted (by key name and by value pattern)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, bytes)) and v:
                out[k] = REDACTED
            else:
                out[k] = redact_obj(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
