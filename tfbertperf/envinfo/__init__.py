"""env stage (see shared/DESIGN.md): the environment fingerprint of this machine and the ranked difference of two.

    doc = fingerprint(data_uri)              # fingerprinting: every section, secrets redacted (run embeds it)
    kind, doc = load_doc(path)               # documents: environment.json, report.json or a run directory
    diffs = diff(a, b)                       # diffing: differences ranked by likely impact on speed/numerics
    out = explain(a, b)                      # diffing: the whole comparison (+ side by side for two reports)
    text = format_fingerprint(doc) / format_diff(out)                                  # render

Modules:
- fingerprinting.py  fingerprint(): one section per collector, redacted; SCHEMA, SECTIONS
- software.py        Python/OS, packages, TF build, threads, oneDNN, XLA, precision, determinism, env vars
- hardware.py        host (container, cloud hints), devices and nvidia-smi, CPU (cores, quota, flags), memory
- datalocation.py    where the data is: filesystem type of a path (local / network / fuse / memory) and a short,
                     bounded read-latency and throughput probe; scheme/bucket/emulator for gs:// and az://
- documents.py       load_doc / document_kind: which kind of JSON document a file is
- diffing.py         diff / explain: flattened documents → ranked differences (rules.py holds the judgement)
- rules.py           per-key group, affected (speed/numerics), score and why; what counts as noise
- sidebyside.py      two reports: attribution, throughput and loss trajectories next to each other
- render.py          human-readable text of a fingerprint and of a diff
- values.py          flatten, dig, fmt, to_json and number helpers shared by the above
Local reads only: nothing here makes a network call or initialises the TensorFlow runtime.
"""

from tfbertperf.envinfo.diffing import diff, explain
from tfbertperf.envinfo.documents import load_doc
from tfbertperf.envinfo.fingerprinting import SCHEMA, SECTIONS, fingerprint
from tfbertperf.envinfo.render import format_diff, format_fingerprint
from tfbertperf.envinfo.values import to_json

__all__ = ["SCHEMA", "SECTIONS", "diff", "explain", "fingerprint", "format_diff", "format_fingerprint", "load_doc",
           "to_json"]
