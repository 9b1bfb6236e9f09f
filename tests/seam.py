"""The backend seam, checked on the sources (docs/design.md, "Seams").

No numeric work above ops/: in src/models/, src/parallel/, src/optim/,
src/train/ and the adapters (src/nn/) this reports
  - an OpenMP pragma (threads belong to a backend's kernels);
  - memcpy / memmove / memset of anything but one object (`sizeof x`,
    `sizeof *p`: a struct cleared or copied is host metadata; a count times
    an element size is tensor data, which ops copy and clear: op_copy,
    op_zero, ...);
  - a call of core/dtype's conversion loops (mt_convert_*, mt_accumulate_16,
    mt_add_from_16, mt_transpose_f32): tensor data is converted by
    op_to_16 / op_from_16;
  - a for loop whose body reads or writes an element of a float, bf16 or
    16-bit array (an element loop over tensor data), found by the types of
    the pointers the file declares (locals, parameters, struct fields): a
    `float *x` is data at x[i] or *(x + i), a `float **x` or `float *x[4]`
    (pointers to buffers, metadata) only at x[u][i];
except the lines of the allow-list (tests/seam_allow.txt: host metadata,
each with its reason). And every op_* of ops.h, matmul_lowp.h, matmul_int8.h, positions.h and moe.h has its
entry in the kernel table and hands its call to it (MT_DISPATCH) first.
Exit 1 on any finding.

usage: python3 tests/seam.py [SRC_DIR [ALLOW_LIST]]
"""
import os
import re
import sys

FOLDERS = ["models", "parallel", "optim", "train", "nn"]
# tensor data: fp32 and 16-bit elements (doubles above ops/ are statistics and timings)
DATA_TYPES = r"(?:float|mt_bf16|uint16_t|mt_fp16)"
# `float *x`, `const float *const x`, `float x[4]`: depth 1; `float **x`, `float *const *x`, `float *x[4]`: depth 2
DECL = re.compile(r"\b" + DATA_TYPES + r"\b((?:\s*const)?(?:\s*\*(?:\s*const)?)*)\s*(\w+)\s*(\[)?")
CONVERT = re.compile(r"\b(mt_convert_\w+|mt_accumulate_16|mt_add_from_16|mt_transpose_f32)\s*\(")
MEMFN = re.compile(r"\b(memcpy|memmove|memset)\s*\(")
ONE_OBJECT = re.compile(r"^sizeof\s*\(?\s*[*&]?\s*\w+(?:\s*(?:->|\.)\s*\w+)*\s*\)?$")


def strip_comments(text):
    """Comments and string literals blanked (newlines kept, so line numbers stay)."""
    out = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    out = re.sub(r"//[^\n]*", "", out)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', out)


def data_names(text):
    """Names of tensor data by pointer depth: {1: {...}, 2: {...}}."""
    names = {1: set(), 2: set()}
    for m in DECL.finditer(text):
        depth = m.group(1).count("*") + (1 if m.group(3) else 0)
        if depth in names:
            names[depth].add(m.group(2))
    for k in names:
        names[k] -= {"const", "sizeof"}
    names[2] -= names[1]  # a name declared both ways (two functions) counts as data
    return names


def args_of(text, i):
    """The top-level arguments of the call whose "(" is at i."""
    depth, cur, out = 0, "", []
    for c in text[i:]:
        if c == "(":
            depth += 1
            if depth == 1:
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                out.append(cur.strip())
                return out
        elif c == "," and depth == 1:
            out.append(cur.strip())
            cur = ""
            continue
        cur += c
    return out


def loop_body(text, i):
    """The text of the for statement starting at i: its header and body."""
    j = text.index("(", i)
    depth = 0
    while True:  # the header's parentheses
        c = text[j]
        depth += c == "("
        depth -= c == ")"
        j += 1
        if depth == 0:
            break
    k = j
    while text[k] in " \t\n":
        k += 1
    if text[k] == "{":
        depth = 0
        while True:
            depth += text[k] == "{"
            depth -= text[k] == "}"
            k += 1
            if depth == 0:
                return text[i:k]
    if text.startswith("for", k):
        return text[i:k] + loop_body(text, k)
    e = text.index(";", k)
    return text[i:e + 1]


def declared_fields(text, names):
    """Adds the declarations of tensor-data type in text that are not prototypes (`float *losses;`)."""
    for line in text.split("\n"):
        if "(" in line or not line.rstrip().endswith(";"):
            continue  # fields and variables, not prototypes
        d = data_names(line)
        for k in names:
            names[k] |= d[k]


def field_names(src):
    """Struct fields of tensor-data type declared in the headers under src,
    by depth: matched after -> or . in any file."""
    names = {1: set(), 2: set()}
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".h"):
                declared_fields(strip_comments(open(os.path.join(root, f), encoding="utf-8").read()), names)
    names[1] -= names[2]  # a field name that is a buffer table somewhere counts only at x[u][i]
    return names


def findings(path, rel, fields):
    raw = open(path, encoding="utf-8").read()
    text = strip_comments(raw)
    names = data_names(text)
    own = {1: set(), 2: set()}
    declared_fields(text, own)  # the file's own structs' fields
    fields = {1: (fields[1] | own[1]) - own[2], 2: fields[2] | own[2]}
    alt = lambda ns: "|".join(sorted(map(re.escape, ns))) or "(?!)"
    # an element access: x[i] or *(x + i) of a depth-1 name, x[u][i] of a depth-2 one: the file's own
    # names when alone, the headers' struct fields after . or ->
    index = re.compile(r"(?<![\w>.])(" + alt(names[1]) + r")\s*\[|\*\s*\(\s*(" + alt(names[1]) +
                       r")\s*\+|(?<![\w>.])(" + alt(names[2]) + r")\s*\[[^\]]*\]\s*\[|(?:->|\.)\s*(" +
                       alt(fields[1]) + r")\s*\[|(?:->|\.)\s*(" + alt(fields[2]) + r")\s*\[[^\]]*\]\s*\[")
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    out = []
    for m in re.finditer(r"^\s*#\s*pragma\s+omp\b", text, re.M):
        out.append((line_of(m.start()), "OpenMP pragma"))
    for m in CONVERT.finditer(text):
        out.append((line_of(m.start()), "dtype conversion " + m.group(1)))
    for m in MEMFN.finditer(text):
        a = args_of(text, m.end() - 1)
        if len(a) == 3 and ONE_OBJECT.match(a[2]):
            continue  # one struct or object: host metadata
        out.append((line_of(m.start()), m.group(1)))
    if True:
        for m in re.finditer(r"\bfor\s*\(", text):
            body = loop_body(text, m.start())
            hit = index.search(body)
            if hit:
                out.append((line_of(m.start()), "loop over tensor data (%s)" % next(g for g in hit.groups() if g)))
    lines = raw.split("\n")
    return [(rel, ln, what, lines[ln - 1].strip()) for ln, what in out]


def read_allow(path):
    """Entries `FILE | CODE FRAGMENT | reason`: a finding in FILE on a line containing the fragment
    (`*`: every finding of the file)."""
    allow = []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            sys.exit(f"seam: {path}:{n}: expected `file | code fragment | reason`")
        allow.append(parts + [0])
    return allow


def undispatched(src):
    """The op_* of ops.h, matmul_lowp.h, matmul_int8.h, positions.h and moe.h whose CPU definition does not begin
    by handing the call to a device's kernel table (MT_DISPATCH), or that the table (ops/kernel_table.h)
    lacks."""
    decl = re.compile(r"^(?:const\s+)?\w+\s*\*?\s*op_(\w+)\(", re.M)
    names = set()
    for h in ("ops/ops.h", "ops/matmul_lowp.h", "ops/matmul_int8.h", "ops/positions.h", "ops/moe.h"):
        names |= set(decl.findall(strip_comments(open(os.path.join(src, h), encoding="utf-8").read())))
    table = open(os.path.join(src, "ops/kernel_table.h"), encoding="utf-8").read()
    code = "".join(open(os.path.join(src, "ops", f), encoding="utf-8").read()
                   for f in sorted(os.listdir(os.path.join(src, "ops"))) if f.endswith(".c"))
    out = []
    for n in sorted(names):
        if not re.search(r"\(\*" + n + r"\)\(", table):
            out.append(f"seam: op_{n} has no entry in src/ops/kernel_table.h")
        if not re.search(r"\bop_" + n + r"\([^)]*\)[^;{]*\{\s*MT_DISPATCH(?:_RET)?\(be, " + n + r",", code):
            out.append(f"seam: op_{n} does not begin with MT_DISPATCH(be, {n}, ...)")
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    allow = read_allow(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "seam_allow.txt"))
    bad = []
    fields = field_names(src)
    for folder in FOLDERS:
        for root, _, files in os.walk(os.path.join(src, folder)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(root, f)
                rel = os.path.relpath(path, src)
                for fnd in findings(path, rel, fields):
                    ok = False
                    for a in allow:
                        if a[0] == rel and (a[1] == "*" or a[1] in fnd[3]):
                            a[3] += 1
                            ok = True
                    if not ok:
                        bad.append(fnd)
    for rel, ln, what, code in sorted(bad):
        print(f"seam: src/{rel}:{ln}: {what}: {code}")
    nodisp = undispatched(src)
    for line in nodisp:
        print(line)
    stale = [a for a in allow if a[3] == 0]
    for a in stale:
        print(f"seam: allow-list entry matches nothing (remove it): {a[0]} | {a[1]}")
    if bad or stale or nodisp:
        print(f"seam: {len(bad)} findings above ops/ (move them behind the backend, or allow-list host metadata)")
        return 1
    pending = [a for a in allow if a[2].startswith("pending")]
    print(f"seam: ok ({sum(a[3] for a in allow if a not in pending)} allowed host-metadata findings; "
          f"{sum(a[3] for a in pending)} pending in {len(pending)} entries: " +
          ", ".join(sorted({a[0] for a in pending})) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
