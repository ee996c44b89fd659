"""A corpus of English sentences from two pinned Debian packages.

- ``dict-gcide`` 0.48.5+nmu2 (Debian 12): the GNU Collaborative International
  Dictionary of English (Webster's 1913 + WordNet + additions), dictd format;
  every definition, note and quotation paragraph, split into sentences;
- ``wordnet-base`` 1:3.0-37 (Debian 12): WordNet 3.0's glosses (one line per
  synset) and their example sentences.

Both are checked against their SHA-256, so the corpus does not drift with
Debian's package lists.  They are looked up in ``SHNSW_DEB_DIR``, the
corpus's ``debs/`` directory and apt's download cache; this module never
runs apt-get: when they are missing, the error gives the ``apt-get download
NAME=VERSION`` command that fetches them (``make bench-corpus`` runs it).  The ``.deb`` (an ``ar``
archive with ``data.tar.xz``) is read with the standard library alone.

Cleaning is deterministic: headwords, pronunciations, bracketed etymologies
and source tags, sense numbers and ``--Author`` citations are removed, lines
are whitespace-collapsed, kept when they have >= 4 words, 20..300 characters,
start with a letter and are >= 85 % letters and spaces, and de-duplicated
case-insensitively (first occurrence kept; GCIDE before WordNet).  The result
is 331,958 distinct lines (200,346 from GCIDE, 131,612 more from WordNet),
about 18.5 BERT tokens each (SHA-256 of the text in ``EXPECTED_SHA256``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import os
import re
import tarfile
from pathlib import Path

PACKAGES = {
    "dict-gcide": ("0.48.5+nmu2",
                   "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f"),
    "wordnet-base": ("1:3.0-37",
                     "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752"),
}
# Changes to the cleaning below change this version (and so the cache key).
CORPUS_VERSION = "gcide0.48.5nmu2-wn3.0-37-v1"
EXPECTED_LINES = 331_958
# SHA-256 of the lines joined by "\n" (UTF-8), as built from the two pinned packages.
EXPECTED_SHA256 = "83af25e9322456ded48b8826d59c1f5c0e0f2d786355bf9eb1bd4e241d1802af"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def deb_filename(name: str, version: str) -> str:
    return f"{name}_{version.replace(':', '%3a')}_all.deb"


def deb_dirs(dest: Path) -> list:
    """Where the pinned .deb files are looked for: SHNSW_DEB_DIR, the corpus's
    own debs/ directory and apt's download cache."""
    dirs = [Path(os.environ["SHNSW_DEB_DIR"])] if os.environ.get("SHNSW_DEB_DIR") else []
    return dirs + [dest, Path("/var/cache/apt/archives")]


def fetch_command(dest: Path) -> str:
    """The shell command that puts the two pinned packages into dest."""
    pins = " ".join(f"{n}={v}" for n, (v, _) in PACKAGES.items())
    return f"mkdir -p {dest} && cd {dest} && apt-get download {pins}"


def needs_fetch(cache_dir: Path) -> bool:
    """Whether the corpus in cache_dir can be built or loaded only after
    fetching its packages (neither its lines nor both .deb files are here)."""
    if (cache_dir / "lines.txt").exists():
        return False
    return not all(any((d / deb_filename(n, v)).exists() for d in deb_dirs(deb_dir(cache_dir)))
                   for n, (v, _) in PACKAGES.items())


def find_deb(name: str, dest: Path) -> Path:
    """The pinned .deb of `name`, checked against its SHA-256.  Nothing is
    downloaded here: when it is missing the error says how to fetch it."""
    version, sha = PACKAGES[name]
    fn = deb_filename(name, version)
    for d in deb_dirs(dest):
        c = d / fn
        if c.exists():
            if _sha256(c) != sha:
                raise RuntimeError(f"{c}: SHA-256 {_sha256(c)} is not the pinned {sha}")
            return c
    raise RuntimeError(
        f"the real sentence set is built from the Debian package {name}={version}, "
        f"which is not in {', '.join(str(d) for d in deb_dirs(dest))}. Fetch both pinned "
        f"packages (no root needed; run `apt-get update` once on a machine that never "
        f"has) with\n    {fetch_command(dest)}\nor `make bench-corpus`, or point "
        "SHNSW_DEB_DIR at a directory that holds them")


def deb_members(deb: Path, wanted) -> dict:
    """{path: bytes} of the data members of a .deb whose path ends with one of
    `wanted` (ar archive -> data.tar.xz/.gz/.zst-less -> tar)."""
    raw = Path(deb).read_bytes()
    if raw[:8] != b"!<arch>\n":
        raise ValueError(f"{deb}: not a Debian package")
    pos, data = 8, None
    while pos + 60 <= len(raw):
        hdr = raw[pos:pos + 60]
        name = hdr[:16].decode().strip().rstrip("/")
        size = int(hdr[48:58].decode().strip())
        body = raw[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            data = (name, body)
        pos += 60 + size + (size & 1)
    if data is None:
        raise ValueError(f"{deb}: no data.tar member")
    name, body = data
    if name.endswith(".xz"):
        body = lzma.decompress(body)
    elif name.endswith(".gz"):
        body = gzip.decompress(body)
    elif name != "data.tar":
        raise ValueError(f"{deb}: unsupported {name}")
    out = {}
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        for m in t.getmembers():
            if m.isfile() and any(m.name.endswith(w) for w in wanted):
                out[m.name] = t.extractfile(m).read()
    return out


# --- cleaning ---------------------------------------------------------------------

_HEAD = re.compile(r"^[^\\\n]{1,80}?\\[^\\\n]*\\")           # Headword \pro*nun"ci*a`tion\
_BRACK = re.compile(r"\[[^\[\]]*\]")                          # [etymology], [1913 Webster]
_POS = re.compile(r"^[,;.\s]*((n|a|v|adv|prep|conj|interj|pron|pl|sing|imp|p|pr|vb|t|i|"
                  r"superl|compar|obs|R|fem|masc|E|L|prop|adj)\.[,;\s]*)+")
_SENSE = re.compile(r"^(\d+\.|\([a-z]\))\s*")                 # 1.  (a)
_CITE = re.compile(r"\s*--\s*[A-Z][^-]{0,60}$")               # --Shak.  --Sir W. Scott.
_SPLIT = re.compile(r"(?<=[a-z\)][.!?])\s+(?=[A-Z][a-z])")    # sentence boundaries


def keep_line(s: str) -> bool:
    if len(s) < 20 or len(s) > 300 or len(s.split()) < 4 or not s[0].isalpha():
        return False
    return sum(c.isalpha() or c == " " for c in s) >= 0.85 * len(s)


def gcide_lines(text: str):
    """Sentences of a GCIDE dictd text (the decompressed gcide.dict)."""
    started = False
    for para in re.split(r"\n[ \t]*\n", text):
        s = " ".join(para.split())
        # The file opens with its 00-database-* entries (licence, history).
        started = started or bool(_HEAD.match(s))
        if not s or not started:
            continue
        s = _HEAD.sub("", s)
        for _ in range(3):                     # nested brackets
            s = _BRACK.sub("", s)
        s = _POS.sub("", s)
        s = _SENSE.sub("", s)
        s = s.replace("{", "").replace("}", "").replace('"', "")
        s = _CITE.sub("", s)
        for sent in _SPLIT.split(s):
            sent = _SENSE.sub("", _CITE.sub("", sent.strip(" ,;"))).strip(" ,;")
            sent = " ".join(sent.split())
            if keep_line(sent):
                yield sent


def wordnet_lines(text: str):
    """Glosses and examples of a WordNet data.{noun,verb,adj,adv} file."""
    for line in text.splitlines():
        if line.startswith("  ") or "|" not in line:
            continue
        parts = [p.strip() for p in re.split(r";\s*", line.split("|", 1)[1].strip())]
        defs = "; ".join(p for p in parts if not p.startswith('"'))
        if defs:
            d = defs[0].upper() + defs[1:]
            out = [d if d.endswith(".") else d + "."]
        else:
            out = []
        out += [p.strip('"') for p in parts if p.startswith('"')]
        for s in out:
            s = " ".join(s.split())
            if keep_line(s):
                yield s


def dedupe(lines) -> list:
    """Distinct lines, case-insensitively, first occurrence kept, in order."""
    seen, out = set(), []
    for s in lines:
        k = s.lower()
        if k not in seen:
            seen.add(k)
            out.append(s)
    return out


def build(debdir: Path, log=print) -> list:
    """The corpus: distinct lines of GCIDE then WordNet, in a fixed order."""
    gc = find_deb("dict-gcide", debdir)
    wn = find_deb("wordnet-base", debdir)
    g = deb_members(gc, ["/gcide.dict.dz"])
    text = gzip.decompress(next(iter(g.values()))).decode("utf-8", "replace")
    lines = list(gcide_lines(text))
    w = deb_members(wn, [f"/wordnet/data.{p}" for p in ("noun", "verb", "adj", "adv")])
    for p in ("noun", "verb", "adj", "adv"):
        body = next(v for k, v in w.items() if k.endswith(f"/data.{p}"))
        lines.extend(wordnet_lines(body.decode("utf-8", "replace")))
    return dedupe(lines)


def digest(lines) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def deb_dir(cache_dir: Path) -> Path:
    """The corpus's own directory for the two .deb files."""
    return cache_dir / "debs"


def load(cache_dir: Path, log=print) -> list:
    """The corpus lines, cached as lines.txt (one line each) in cache_dir."""
    f = cache_dir / "lines.txt"
    if f.exists():
        return f.read_text(encoding="utf-8").split("\n")
    log("  corpus: building from Debian packages "
        + ", ".join(f"{n}={v}" for n, (v, _) in PACKAGES.items()), flush=True)
    lines = build(deb_dir(cache_dir), log)
    if any("\n" in s for s in lines):
        raise AssertionError("a corpus line contains a newline")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, f)
    log(f"  corpus: {len(lines)} distinct lines in {f}", flush=True)
    if digest(lines) != EXPECTED_SHA256:
        log(f"  note: the corpus differs from the reference build ({len(lines)} lines, "
            f"expected {EXPECTED_LINES} with SHA-256 {EXPECTED_SHA256[:12]}...)", flush=True)
    return lines
