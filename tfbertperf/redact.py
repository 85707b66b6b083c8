"""Secret redaction shared by logs, reports, errors and the environment fingerprint.

Key names are kept, values replaced by "<redacted>".  Covers account keys, SAS query parameters, bearer tokens,
connection strings and anything whose name says it is a secret.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

# Words that make a name (env var, dict key) a secret's name when they stand as a whole component of it:
# AZURE_STORAGE_KEY, HF_TOKEN, AccountKey, sas_token, client_secret — but not `tokenize` or `tokens_per_sec`.
_SECRET_WORDS = {"token", "secret", "password", "passwd", "pwd", "credential", "credentials", "sas", "signature",
                 "auth", "authorization", "apikey", "accountkey", "sig"}
_SECRET_JOINED = ("connection_string", "connectionstring", "conn_str", "private_key", "api_key", "access_key",
                  "account_key", "shared_key", "sas_token", "client_secret")
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
    # NAME=value for secret names in free text (decided by is_secret_name below)
    (re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)=([^\s;&\"']+)"),
     lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) else m.group(0)),
    # (added for the environment fingerprint) passwords in URL userinfo: scheme://user:pass@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@\"']+):([^/\s@\"']+)@"), r"\1:" + REDACTED + "@"),
    # PEM private keys (a credentials JSON pasted into a value or an error message)
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S), REDACTED),
    # "private_key": "..." / 'client_secret': '...' / "refresh_token": "..." inside JSON or repr text
    (re.compile(r"(?i)([\"'](?:private_key(?:_id)?|client_secret|refresh_token|access_token|id_token)[\"']\s*:\s*)"
                r"([\"'])(?:\\.|(?!\2).)*\2"), r"\1\2" + REDACTED + r"\2"),
]


def redact_text(text: str) -> str:
    """Return `text` with secret values replaced by <redacted>."""
    if not isinstance(text, str) or not text:
        return text
    for pat, repl in _PATTERNS:
        text = pat.sub(repl, text)
    return text


def _components(name: str) -> list[str]:
    # split snake/kebab/dotted and camelCase: "AzureStorageKey" → azure, storage, key
    parts = re.split(r"[^A-Za-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name))
    return [p.lower() for p in parts if p]


def is_secret_name(name: str) -> bool:
    """True when a variable/field called `name` holds a secret value (a secret word is a whole component of the
    name, or `key` ends a multi-part name such as AZURE_STORAGE_KEY / AccountKey)."""
    if not isinstance(name, str) or name.upper() in _CRED_PATH_NAMES:
        return False
    comps = _components(name)
    if not comps:
        return False
    if any(c in _SECRET_WORDS for c in comps):
        return True
    if len(comps) >= 2 and comps[-1] == "key":
        return True
    low = "_".join(comps)
    return any(j in low for j in _SECRET_JOINED)


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


# Parts of an Azure Storage connection string that name an endpoint or account (safe to show); every other part
# (AccountKey, SharedAccessSignature, anything unknown) is replaced.  A whitelist, so a new secret field is
# redacted by default.
_CONN_STR_SAFE_PARTS = {
    "defaultendpointsprotocol", "accountname", "blobendpoint", "queueendpoint", "tableendpoint",
    "fileendpoint", "dfsendpoint", "endpointsuffix", "usedevelopmentstorage", "developmentstorageproxyuri",
}


def redact_connection_string(conn: str) -> str:
    """Return an Azure Storage connection string with key names kept and secret values replaced.

    `AccountName`, endpoints and the protocol stay visible (they say *where* the data is, e.g. Azurite on
    127.0.0.1:10000); `AccountKey`, `SharedAccessSignature` and any unrecognised part become <redacted>.
    """
    if not isinstance(conn, str) or not conn:
        return conn
    parts = []
    for part in conn.split(";"):
        if not part.strip():
            continue
        name, eq, value = part.partition("=")
        if not eq:
            parts.append(REDACTED)
        elif name.strip().lower() in _CONN_STR_SAFE_PARTS:
            # endpoints are URLs: drop any query string (a SAS token may ride along)
            parts.append(f"{name}={redact_text(value.split('?', 1)[0])}")
        else:
            parts.append(f"{name}={REDACTED}")
    return ";".join(parts)
